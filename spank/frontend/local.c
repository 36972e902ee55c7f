/*
 * srun, sbatch and salloc (local and allocator contexts). These are
 * short-lived clients, so the engine may be loaded in-process here to
 * check the option early and to print `help` (docs/architecture.md).
 */
#include "gpubind.h"
#include "table.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Exports of the Go engine (spank/engine, PROTOCOL.md). */
typedef int (*gb_check_fn)(const char *option, char *errbuf, int errlen);
typedef const char *(*gb_help_fn)(void);

static void *load_engine(void)
{
	const char *engine = gb_config()->engine;
	char path[1024], err[2400], byfd[64];
	void *h;
	int fd;

	if (engine[0])
		(void) snprintf(path, sizeof(path), "%s", engine);
	else if (gb_engine_path(path, sizeof(path)))
		return NULL;
	/*
	 * Code that another user could change must not run in this client:
	 * checked from / (trust.c), loaded from the fd that was checked.
	 */
	fd = gb_trust_open("engine", path, O_RDONLY, err, sizeof(err));
	if (fd < 0) {
		gb_error("%s", err);
		return NULL;
	}
	(void) snprintf(byfd, sizeof(byfd), "/proc/self/fd/%d", fd);
	/* RTLD_LAZY: go-nvml leaves nvml* unresolved until nvml.Init. */
	h = dlopen(byfd, RTLD_LAZY | RTLD_LOCAL);
	if (!h)
		gb_verbose("cannot load engine %s: %s", path, dlerror());
	(void) close(fd);
	return h;
}

/*
 * The policies, as srun's early check and the fallback help name them. The
 * flags are gb_flag_names (rule/fields.c). The engine's help (Go,
 * gpubind.PolicyHelpText) is the full text; this one is printed only when the
 * engine cannot be loaded here.
 */
static const struct policy {
	const char *name;
	const char *arg;    /* what follows the name, "" for none */
	int simple;         /* checked here without the engine (no argument) */
} policies[] = {
	{ "closest", "", 1 },  /* the default */
	{ "pack", "", 1 },
	{ "spread", "", 1 },
	{ "map", ":LIST", 0 },
	{ "per-task", ":N", 0 },
	{ "single", ":N", 0 },
	{ "off", "", 0 },      /* gb_option_is_off */
};

#define NPOLICIES (sizeof(policies) / sizeof(policies[0]))

static void print_help(void)
{
	void *h = load_engine();
	gb_help_fn help = h ? (gb_help_fn) dlsym(h, "gpubind_engine_help")
			    : NULL;

	const char *text = help ? help() : NULL;

	if (text) {
		fputs(text, stdout);
		return;
	}
	printf("--%s[=POLICY][,FLAG...]\n  POLICY:", GB_OPTION_NAME);
	for (size_t i = 0; i < NPOLICIES; i++)
		printf("%s %s%s%s", i ? "," : "", policies[i].name,
		       policies[i].arg, i ? "" : " (default)");
	printf("\n  FLAG:  ");
	for (int i = 0; i < GB_NFLAGS; i++)
		printf("%s %s", i ? "," : "", gb_flag_names[i].name);
	printf("\n(the gpubind engine could not be loaded for the full help)\n");
}

static int simple_policy(const char *p, size_t len)
{
	for (size_t i = 0; i < NPOLICIES; i++)
		if (policies[i].simple && strlen(policies[i].name) == len &&
		    !strncmp(p, policies[i].name, len))
			return 1;
	return 0;
}

/*
 * The common values ("closest", "verbose", "pack,nic", ...) need no engine:
 * an optional first word naming a simple policy, then known flags. Loading
 * the engine starts a Go runtime in srun, a few ms on every launch; the
 * rest (map:, per-task:, single:, anything unknown) goes to the engine, and
 * slurmstepd's engine checks every value again in any case.
 */
static int simple_option(const char *value)
{
	const char *p = value;
	int first = 1;

	for (;;) {
		size_t len = strcspn(p, ",");

		if (!(first && simple_policy(p, len)) && !gb_flag_lookup(p, len))
			return 0;
		if (p[len] == '\0')
			return 1;
		p += len + 1;
		first = 0;
	}
}

/*
 * Check an option text with the engine. Returns 0 when fine (or when the
 * engine is not available here: slurmstepd checks again), else what
 * gb_failed decides.
 */
static int check(const char *what, const char *value)
{
	char msg[1024] = "", why[2200];
	void *h;
	gb_check_fn fn;

	if (gb_option_is_off(value) || simple_option(value))
		return 0;
	if (strpbrk(value, "\n\r")) {
		(void) snprintf(msg, sizeof(msg), "it holds a newline");
	} else {
		h = load_engine();
		fn = h ? (gb_check_fn) dlsym(h, "gpubind_engine_check") : NULL;
		if (!fn)
			return 0;
		if (fn(value, msg, (int) sizeof(msg)) == 0)
			return 0;
		msg[sizeof(msg) - 1] = '\0';
	}
	(void) snprintf(why, sizeof(why), "invalid %s \"%s\": %s", what, value,
			msg);
	return gb_failed(why, "tasks run unbound", NULL, 0);
}

int gb_local_option_cb(const char *optarg)
{
	const char *value = optarg ? optarg : "closest";

	if (optarg && !strcmp(optarg, "help")) {
		print_help();
		exit(0);
	}
	if (check("--" GB_OPTION_NAME " value", value))
		return -1;
	/*
	 * sbatch/salloc: put the option into the environment that the job
	 * inherits, so that the steps inside the job see it (Slurm removes
	 * its own SPANK option variables from the batch step environment).
	 */
	if (spank_context() == S_CTX_ALLOCATOR &&
	    setenv(GB_ENV_OPTION, value, 1)) {
		gb_error("setenv(%s) failed", GB_ENV_OPTION);
		return -1;
	}
	return 0;
}

int gb_local_init_post_opt(spank_t sp)
{
	const char *env = getenv(GB_ENV_OPTION);

	(void) sp;
	if (gb_user_option() || !env || !*env)
		return 0;
	if (!strcmp(env, "help")) {
		print_help();
		exit(0);
	}
	return check(GB_ENV_OPTION " value", env);
}
