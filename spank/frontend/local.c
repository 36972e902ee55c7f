/*
 * srun, sbatch and salloc (local and allocator contexts). These are
 * short-lived clients, so the engine may be loaded in-process here to
 * check the option early and to print `help` (docs/architecture.md).
 */
#include "gpubind.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Exports of the Go engine (spank/engine, PROTOCOL.md). */
typedef int (*gb_check_fn)(const char *option, char *errbuf, int errlen);
typedef const char *(*gb_help_fn)(void);

static void *load_engine(void)
{
	char path[1024];
	void *h;

	if (gb_conf.engine[0])
		(void) snprintf(path, sizeof(path), "%s", gb_conf.engine);
	else if (gb_engine_path(path, sizeof(path)))
		return NULL;
	/* RTLD_LAZY: go-nvml leaves nvml* unresolved until nvml.Init. */
	h = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
	if (!h)
		gb_verbose("cannot load engine %s: %s", path, dlerror());
	return h;
}

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
	printf("--gpu-bind-topo[=POLICY][,FLAG...]\n"
	       "  POLICY: closest (default), pack, spread, map:LIST, "
	       "per-task:N, single:N, off\n"
	       "  FLAG:   verbose, nic, cpus, isolate\n"
	       "(the gpubind engine could not be loaded for the full help)\n");
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
	static const char *const policies[] = { "closest", "pack", "spread" };
	static const char *const flags[] = { "verbose", "nic", "cpus", "isolate" };
	const char *p = value;
	int first = 1;

	for (;;) {
		size_t len = strcspn(p, ",");
		int ok = 0;
		size_t i;

		for (i = 0; first && i < sizeof(policies) / sizeof(*policies); i++)
			ok |= strlen(policies[i]) == len && !strncmp(p, policies[i], len);
		for (i = 0; i < sizeof(flags) / sizeof(*flags); i++)
			ok |= strlen(flags[i]) == len && !strncmp(p, flags[i], len);
		if (!ok)
			return 0;
		if (p[len] == '\0')
			return 1;
		p += len + 1;
		first = 0;
	}
}

/*
 * Check an option text with the engine. Returns 0 when fine (or when the
 * engine is not available here: slurmstepd checks again), -1 when bad.
 */
static int check(const char *what, const char *value)
{
	char msg[1024] = "";
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
	if (gb_conf.mode_optional) {
		gb_error("ignoring invalid %s \"%s\" (mode=optional, tasks run unbound): %s",
			 what, value, msg);
		return 0;
	}
	gb_error("invalid %s \"%s\": %s", what, value, msg);
	return -1;
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
	if (gb_opt_set || !env || !*env)
		return 0;
	if (!strcmp(env, "help")) {
		print_help();
		exit(0);
	}
	return check(GB_ENV_OPTION " value", env);
}
