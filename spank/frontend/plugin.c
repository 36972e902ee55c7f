/*
 * SPANK entry points of spank_gpubind.so: plugin symbols, option
 * registration, and dispatch by context to local.c and stepd.c.
 */
#include "gpubind.h"

#include <stdio.h>
#include <string.h>

SPANK_PLUGIN(gpubind, 1);

static int option_cb(int val, const char *optarg, int remote)
{
	(void) val;
	if (gb_user_option_set(optarg)) {
		gb_error("--%s value is longer than %zu bytes", GB_OPTION_NAME,
			 (size_t) GB_OPTION_MAX - 1);
		return -1;
	}
	if (remote)
		return 0;
	return gb_local_option_cb(optarg);
}

static char opt_name[] = GB_OPTION_NAME;
static char opt_arginfo[] = "[POLICY][,FLAG...]";
static char opt_usage[] =
	"Bind each task to the GPU(s) nearest to it in the node topology "
	"and log the mapping; '--" GB_OPTION_NAME "=help' lists policies "
	"and flags (env: " GB_ENV_OPTION ")";

static struct spank_option option = {
	opt_name, opt_arginfo, opt_usage, 2, 0, option_cb,
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	char err[512];
	spank_err_t rc;

	if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE &&
	    ctx != S_CTX_ALLOCATOR)
		return 0;
	if (gb_config_load(ac, av, err, sizeof(err))) {
		gb_error("%s", err);
		return -1;
	}
	rc = spank_option_register(sp, &option);
	if (rc != ESPANK_SUCCESS) {
		gb_spank_error("spank_option_register", "--" GB_OPTION_NAME,
			       rc);
		return -1;
	}
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	switch (spank_context()) {
	case S_CTX_REMOTE:
		return gb_stepd_init_post_opt(sp);
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
		return gb_local_init_post_opt(sp);
	default:
		return 0;
	}
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	if (spank_context() != S_CTX_REMOTE)
		return 0;
	return gb_stepd_task_init(sp);
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	(void) sp;
	(void) ac;
	(void) av;
	if (spank_context() == S_CTX_REMOTE && gb_stepd_plan())
		gb_stepd_user_init();
	return 0;
}

int slurm_spank_task_post_fork(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	if (spank_context() != S_CTX_REMOTE || !gb_stepd_plan())
		return 0;
	return gb_stepd_task_post_fork(sp);
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	if (spank_context() != S_CTX_REMOTE || !gb_stepd_plan())
		return 0;
	return gb_stepd_task_exit(sp);
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	(void) sp;
	(void) ac;
	(void) av;
	if (spank_context() == S_CTX_REMOTE)
		gb_stepd_exit();
	return 0;
}
