/*
 * spank_gpubind.so: the C front end of the gpubind SPANK plugin.
 *
 * File map (split by context, like NVIDIA/pyxis):
 *   plugin.c        SPANK_PLUGIN, option registration, callback dispatch
 *   args.c          plugstack.conf arguments and option precedence
 *   local.c         srun/sbatch/salloc: option callback, early check, `help`
 *   stepd.c         slurmstepd: the step's facts, plan, per-task application
 *   request.c       the engine request, typed; its text for the launcher
 *   cgroup_stepd.c  slurmstepd: the isolate/cpus flags, calls into cgroup/
 *   cgroup/         the cgroup layer: probe, lifecycle, a backend per version
 *   child.c         the engine process: start gpubind-launcher (vfork, execveat), pipe, reap
 *   trust.c         the files run or read as root: path walked from /, fd kept
 *   plancache.c     decision tables kept by step shape
 *   log.c           "gpubind: " logging helpers
 *   ../../rule/     the per-task rule, behind table.h (no Slurm; also Go's):
 *                   parse.c table parser, rule.c per-task rule, output.c the
 *                   task's environment and log line, default.c default=,
 *                   fields.c CPU lists and flag names, fabric.c NVLink
 * No Go runtime ever runs in the process that loads this file, nor in a fork
 * of it: the engine runs in the program gpubind-launcher, which slurmstepd
 * starts with vfork and execveat (docs/architecture.md).
 */
#ifndef GPUBIND_FRONTEND_H
#define GPUBIND_FRONTEND_H

#include <sched.h>
#include <slurm/spank.h>
#include <stddef.h>
#include <sys/types.h>

#define GB_PREFIX "gpubind: "
#define GB_OPTION_NAME "gpu-bind-topo"
#define GB_ENV_OPTION "SLURM_GPU_BIND_TOPO"
#define GB_ENGINE_NAME "gpubind_engine.so"
/* The installed launcher (make install: $(LIBEXECDIR)/gpubind); launcher= overrides. */
#ifndef GB_LAUNCHER_PATH
#define GB_LAUNCHER_PATH "/usr/local/libexec/gpubind/gpubind-launcher"
#endif
#define GB_DEFAULT_TIMEOUT_MS 10000

/* plugstack.conf arguments (args.c). */
struct gb_config {
	char default_opt[256];   /* "" means off */
	int mode_optional;       /* mode=: failures of explicit requests */
	/*
	 * default_mode=enforce: a step that only default= binds fails when the
	 * plugin fails (optional, the default: it runs as Slurm set it up).
	 */
	int default_enforce;
	char source[16];         /* auto|nvml|sysfs|snapshot */
	char snapshot[1024];
	char root[1024];
	char engine[1024];       /* "" means next to the plugin (srun's check, help) */
	char launcher[1024];     /* "" means GB_LAUNCHER_PATH */
	char cache_dir[1024];
	char gres_conf[1024];
	int timeout_ms;
	char force[64];          /* comma list: isolate,cpus,uuid */
	char never[64];
	char nics[256];          /* nics=: the admin's rails, comma list, "" none */
	int plan_cache;          /* plan cache entries kept (plancache.c); 0 = off */
	/*
	 * containers=yes: a container plugin (pyxis) is configured. The step's
	 * GPUs go into NVIDIA_VISIBLE_DEVICES by UUID before any task exists,
	 * and uuid is forced unless uuid=never (docs/containers.md).
	 */
	int containers;
};

/*
 * args.c owns the plugstack settings and the user's option. gb_config_load
 * parses slurm_spank_init's arguments into them: 0, or -1 with err set.
 * gb_config is read-only for everybody else.
 */
int gb_config_load(int ac, char **av, char *err, size_t errlen);
const struct gb_config *gb_config(void);
/* cache_dir=, or the built-in GB_DEFAULT_CACHE_DIR (plancache.h). */
const char *gb_cache_dir(void);
/*
 * The option callback's --gpu-bind-topo value (NULL: the bare option): -1
 * when it is GB_OPTION_MAX bytes or longer. gb_user_option: that value (""
 * for the bare option), or NULL when the user gave none.
 */
#define GB_OPTION_MAX 1024
int gb_user_option_set(const char *optarg);
const char *gb_user_option(void);
/* Exported for `gpubind check` (gpubind.exports): 0, or -1 with err set. */
int gpubind_check_args(int ac, char **av, char *err, size_t errlen);

/*
 * Effective option text after precedence: the user's option (bare means
 * "closest"), else SLURM_GPU_BIND_TOPO (env_value, may be NULL), else the
 * admin's default, else "off". Returns 1 when binding is wanted (buf holds
 * the text), 0 for off.
 */
int gb_effective_option(const char *env_value, char *buf, size_t len);
int gb_option_is_off(const char *text);

/* log.c: all lines carry the fixed prefix; user text only through "%s". */
void gb_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void gb_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void gb_verbose(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void gb_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/*
 * The one enforce/optional decision (plugstack mode=). Logs what failed and
 * returns -1 under mode=enforce (the callback fails), or logs
 * "WHAT; UNBOUND (mode=optional)" and returns 0 under mode=optional (the step
 * goes on with what Slurm set up; unbound says what that means here). msg
 * (may be NULL) receives the logged text.
 */
int gb_failed(const char *what, const char *unbound, char *msg, size_t len);
/*
 * The step's binding came only from the admin's default=: from now on
 * gb_failed decides by default_mode= (and fails where the admin forces
 * isolate or cpus), not by mode=. slurmstepd serves one step.
 */
void gb_failed_for_default(void);
/* A failed spank_* call, with its error named. */
void gb_spank_error(const char *call, const char *what, spank_err_t rc);
long gb_now_us(void);

/* local.c */
int gb_local_option_cb(const char *optarg);
int gb_local_init_post_opt(spank_t sp);

/* stepd.c */
int gb_stepd_init_post_opt(spank_t sp);
int gb_stepd_task_init(spank_t sp);
int gb_stepd_task_post_fork(spank_t sp);
int gb_stepd_task_exit(spank_t sp);
void gb_stepd_user_init(void);
void gb_stepd_exit(void);
struct gb_table;
const struct gb_table *gb_stepd_plan(void);

/*
 * failmemo.c: a launcher that failed (timed out, crashed, gave no table) is
 * remembered in cache_dir for GB_FAILMEMO_S seconds, so that a hung NVML
 * does not cost every step of the node the whole timeout. gb_failmemo_get:
 * 1 with the remembered cause of launcher's failure in buf and its age in
 * *age_s, else 0. A launcher that planned clears it.
 */
#define GB_FAILMEMO_S 60
#define GB_FAILMEMO_NAME "launcher-failed"
int gb_failmemo_get(const char *launcher, char *buf, size_t len,
		    long *age_s);
void gb_failmemo_put(const char *launcher, const char *why);
void gb_failmemo_clear(void);

/* child.c */
/*
 * How long the parent waits for a SIGKILLed launcher to go. One in
 * uninterruptible sleep (NVML on a wedged GPU) does not die at once; it
 * must not hold slurmstepd. After this it is left to slurmstepd, which
 * reaps any child with wait3.
 */
#define GB_REAP_GRACE_MS 2000

struct gb_child_result {
	char *out;          /* malloc'd engine output */
	size_t outlen;
	int timed_out;
	int killed;         /* the parent SIGKILLed it */
	int exited;         /* status below is valid */
	int status;         /* waitpid status */
	int unreaped;       /* still there GB_REAP_GRACE_MS after SIGKILL */
};
/*
 * Run the launcher (launcher_fd: gb_trust_open's O_PATH fd, name: its path
 * for argv[0] and messages) on request: clone(CLONE_VM|CLONE_VFORK) and
 * execveat of the fd, the table read back until EOF or timeout_ms, then
 * SIGKILL and a bounded reap. snapshot_fd (-1: none) is the checked
 * snapshot= file, given to the launcher as fd 4 with snapshot_fd=4 in the
 * request. 0 with res->out, or -1 with err set.
 */
int gb_run_launcher(int launcher_fd, const char *name, int snapshot_fd,
		    const char *request, int timeout_ms,
		    struct gb_child_result *res, char *err, size_t errlen);
/* The launcher to run: launcher= or GB_LAUNCHER_PATH. */
int gb_launcher_path(char *buf, size_t len);

/* Default engine path: GB_ENGINE_NAME next to this plugin (dladdr). */
int gb_engine_path(char *buf, size_t len);

/*
 * trust.c: a file slurmstepd runs or reads as root (what: "launcher",
 * "engine", "snapshot") must be a regular file owned by root (or by the
 * process's own user) and not writable by group or others, and so must every
 * directory on its path from /, symbolic links resolved (a sticky directory
 * others can write, such as /tmp, only where the entry in it is root's).
 * gb_trust_open walks the path with openat(O_NOFOLLOW) and returns a
 * close-on-exec fd of the very file it checked, opened with flags (O_PATH to
 * run it, O_RDONLY to read it), or -1 with err naming the path, the
 * component and the fault. gb_trust_file is the same check, fd closed.
 */
int gb_trust_open(const char *what, const char *path, int flags, char *err,
		  size_t errlen);
int gb_trust_file(const char *what, const char *path, char *err,
		  size_t errlen);

#endif
