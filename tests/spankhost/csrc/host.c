/*
 * spankhost: loads spank_gpubind.so the way slurmstepd does, to test the
 * plugin's safety without a cluster. It models Slurm 25.05+: SIGCHLD is
 * blocked in every thread before the plugin is loaded and read from a
 * signalfd (src/slurmd/slurmstepd/slurmstepd.c, _main_thread_init).
 *
 * usage: spankhost [flags] PLUGIN [plugstack args...]
 *   -n N        local tasks (default 1)          -g OFF   global id of task 0
 *   -s STEP     step id (default 0; batch=4294967291)
 *   -o VALUE    user option --gpu-bind-topo=VALUE ("-" for the bare option)
 *   -e N=V      step environment variable (repeatable)
 *   -t TYPE     per-task SLURM_CPU_BIND_TYPE      -l LIST per-task SLURM_CPU_BIND_LIST
 *   -a          set each task's affinity from LIST before task_init
 *   -C N        after init_post_opt, fork N children that exit; count them
 *               through the signalfd
 *   -L N        N busy malloc threads while tasks fork (load)
 *   -c          contain_spank: user_init/task_post_fork from clone(CLONE_VM)
 *   -q          print only summary lines, not per-task env
 *   -X CTX      context: remote (default), local (srun) or allocator (sbatch);
 *               outside remote only init, the option and init_post_opt run
 *   -w MS       give up waiting for child exits after MS (default 60000)
 *   -G LIB      dlopen LIB into the host first (negative control: a Go
 *               library loaded in-process must make the checks fail)
 *   -T phdr     a host thread loops dl_iterate_phdr from before init_post_opt
 *               to the end (it holds glibc's dl_load_write_lock for each walk)
 *   -T LIB      the same with a thread looping dlopen(LIB) and dlclose
 *   -O ADJ      set the host's oom_score_adj first (slurmstepd: -1000)
 *   -U UID      the job's uid and gid (default: the host's own)
 *   -F N        init_post_opt under RLIMIT_NOFILE N (soft); prints the open
 *               fds before and after it
 * Output lines (stdout): "init_post_opt rc=R", "threads before=A after=B",
 * "children forked=N seen=M", "task L rc=R VAR=VALUE ...", "tasks ok=N
 * failed=M", "post_fork calls=N". Plugin log lines go to stderr.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/spank.h>

#define MAGIC 0x5e1f

struct spank_handle {
	int magic;
	int task;  /* -1 outside a task */
	pid_t pid; /* the task's pid, in the parent after fork */
};

static char **env;
static int nenv;
static struct spank_option *opts[8];
static int nopts;
static spank_context_t ctx = S_CTX_REMOTE;
static uint32_t ntasks = 1, stepid, goff;
static long job_uid = -1;   /* -U: the job's uid and gid (default: the host's) */
static volatile int stop_load;

/* ---- Slurm/SPANK API as slurmstepd offers it ---------------------------- */

#define LOGFN(name, level)                                               \
	void name(const char *fmt, ...)                                  \
	{                                                                \
		char b[8192];                                            \
		va_list ap;                                              \
		va_start(ap, fmt);                                       \
		vsnprintf(b, sizeof(b), fmt, ap);                        \
		va_end(ap);                                              \
		dprintf(2, "host-log %s: %s\n", level, b);               \
	}
LOGFN(slurm_info, "info")
LOGFN(slurm_error, "error")
LOGFN(slurm_verbose, "verbose")
LOGFN(slurm_debug, "debug")
LOGFN(slurm_debug2, "debug2")
LOGFN(slurm_debug3, "debug3")
LOGFN(slurm_spank_log, "spank_log")

const char *spank_strerror(spank_err_t e)
{
	switch ((int) e) {
	case ESPANK_SUCCESS: return "Success";
	case ESPANK_BAD_ARG: return "Bad argument";
	case ESPANK_NOT_TASK: return "Not in task context";
	case ESPANK_ENV_NOEXIST: return "Environment variable does not exist";
	case ESPANK_NOSPACE: return "Buffer too small";
	case ESPANK_NOT_REMOTE: return "Valid only in remote context";
	default: return "Generic error";
	}
}

spank_context_t spank_context(void) { return ctx; }
int spank_remote(spank_t sp) { (void) sp; return ctx == S_CTX_REMOTE; }

spank_err_t spank_option_register(spank_t sp, struct spank_option *o)
{
	if (!sp || sp->magic != MAGIC || nopts == 8)
		return ESPANK_BAD_ARG;
	opts[nopts++] = o;
	return ESPANK_SUCCESS;
}

spank_err_t spank_option_getopt(spank_t sp, struct spank_option *o, char **a)
{
	(void) sp; (void) o; (void) a;
	return ESPANK_NOT_AVAIL;
}

static char *env_find(const char *name)
{
	size_t l = strlen(name);

	for (int i = 0; i < nenv; i++)
		if (!strncmp(env[i], name, l) && env[i][l] == '=')
			return env[i] + l + 1;
	return NULL;
}

static void env_put(const char *name, const char *val)
{
	size_t l = strlen(name);
	char *kv;

	if (asprintf(&kv, "%s=%s", name, val) < 0)
		abort();
	for (int i = 0; i < nenv; i++)
		if (!strncmp(env[i], name, l) && env[i][l] == '=') {
			free(env[i]);
			env[i] = kv;
			return;
		}
	env = realloc(env, (nenv + 2) * sizeof(*env));
	if (!env)
		abort();
	env[nenv++] = kv;
	env[nenv] = NULL;
}

spank_err_t spank_getenv(spank_t sp, const char *var, char *buf, int len)
{
	char *v;

	if (!sp || sp->magic != MAGIC || len < 0)
		return ESPANK_BAD_ARG;
	if (!(v = env_find(var)))
		return ESPANK_ENV_NOEXIST;
	if ((int) strlen(v) >= len)
		return ESPANK_NOSPACE;
	strcpy(buf, v);
	return ESPANK_SUCCESS;
}

spank_err_t spank_setenv(spank_t sp, const char *var, const char *val, int ow)
{
	if (!sp || sp->magic != MAGIC || !var || !val)
		return ESPANK_BAD_ARG;
	if (!ow && env_find(var))
		return ESPANK_ENV_EXISTS;
	env_put(var, val);
	return ESPANK_SUCCESS;
}

spank_err_t spank_unsetenv(spank_t sp, const char *var)
{
	(void) sp; (void) var;
	return ESPANK_ERROR;
}

spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...)
{
	va_list ap;
	spank_err_t rc = ESPANK_SUCCESS;

	if (!sp || sp->magic != MAGIC)
		return ESPANK_BAD_ARG;
	va_start(ap, item);
	switch (item) {
	case S_JOB_UID:
		*va_arg(ap, uid_t *) = job_uid >= 0 ? (uid_t) job_uid : getuid();
		break;
	case S_JOB_GID:
		*va_arg(ap, gid_t *) = job_uid >= 0 ? (gid_t) job_uid : getgid();
		break;
	case S_JOB_ID:
		*va_arg(ap, uint32_t *) = 42;
		break;
	case S_JOB_STEPID:
		*va_arg(ap, uint32_t *) = stepid;
		break;
	case S_JOB_LOCAL_TASK_COUNT:
		*va_arg(ap, uint32_t *) = ntasks;
		break;
	case S_JOB_LOCAL_TO_GLOBAL_ID: {
		uint32_t l = va_arg(ap, uint32_t);
		uint32_t *g = va_arg(ap, uint32_t *);

		if (l >= ntasks)
			rc = ESPANK_BAD_ARG;
		else
			*g = goff + l;
		break;
	}
	case S_TASK_ID:
		if (sp->task < 0)
			rc = ESPANK_NOT_TASK;
		else
			*va_arg(ap, int *) = sp->task;
		break;
	case S_TASK_PID:
		if (sp->task < 0)
			rc = ESPANK_NOT_TASK;
		else
			*va_arg(ap, pid_t *) = sp->pid ? sp->pid : getpid();
		break;
	case S_TASK_GLOBAL_ID:
		if (sp->task < 0)
			rc = ESPANK_NOT_TASK;
		else
			*va_arg(ap, uint32_t *) = goff + sp->task;
		break;
	default:
		rc = ESPANK_BAD_ARG;
	}
	va_end(ap);
	return rc;
}

/* ---- host ---------------------------------------------------------------- */

/* Open fds of this process. */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* not the directory's own fd */
}

static int threads(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	int n = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	fclose(f);
	return n;
}

typedef int (*spank_fn)(spank_t, int, char **);

static spank_fn sym(void *h, const char *name)
{
	return (spank_fn) dlsym(h, name);
}

/* -T: a thread that keeps the dynamic loader's locks busy, as slurmstepd's
 * threads do when they unwind a stack or load an NSS module or a plugin. */
static const char *loader_busy;

static int phdr_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	(void) info;
	(void) size;
	(*(volatile unsigned long *) data)++;
	return 0;
}

static void *loader_thread(void *arg)
{
	volatile unsigned long n = 0;

	(void) arg;
	for (;;) {
		if (!strcmp(loader_busy, "phdr")) {
			dl_iterate_phdr(phdr_cb, (void *) &n);
		} else {
			void *h = dlopen(loader_busy, RTLD_NOW | RTLD_LOCAL);

			if (h)
				dlclose(h);
		}
	}
	return NULL;
}

static void *load_thread(void *arg)
{
	(void) arg;
	while (!stop_load) {
		void *p[32];

		for (int i = 0; i < 32; i++)
			p[i] = malloc(64 + i * 512);
		for (int i = 0; i < 32; i++)
			free(p[i]);
	}
	return NULL;
}

/* Every child reaped so far (a wait for one child may reap another). */
static pid_t reaped_pid[8192];
static int reaped_st[8192], nreaped;
static int wait_ms = 60000;

static int take(pid_t *pids, int *status, int npids, int *seen, pid_t pid,
		int st)
{
	for (int i = 0; i < npids; i++)
		if (pids[i] == pid) {
			status[i] = st;
			(*seen)++;
			return 1;
		}
	return 0;
}

/* Wait for `want` children through the signalfd; returns how many seen. */
static int collect(int sfd, int want, pid_t *pids, int *status, int npids,
		   int timeout_ms)
{
	int seen = 0;

	if (timeout_ms > wait_ms)
		timeout_ms = wait_ms;
	for (int i = 0; i < nreaped; i++)
		if (reaped_pid[i] &&
		    take(pids, status, npids, &seen, reaped_pid[i], reaped_st[i]))
			reaped_pid[i] = 0;
	while (seen < want) {
		struct pollfd p = { sfd, POLLIN, 0 };
		struct signalfd_siginfo si;
		int r = poll(&p, 1, timeout_ms);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;  /* nothing arrived: exits were swallowed */
		if (read(sfd, &si, sizeof(si)) != sizeof(si))
			continue;
		for (;;) {
			int st;
			pid_t pid = waitpid(-1, &st, WNOHANG);

			if (pid <= 0)
				break;
			if (!take(pids, status, npids, &seen, pid, st) &&
			    nreaped < 8192) {
				reaped_pid[nreaped] = pid;
				reaped_st[nreaped++] = st;
			}
		}
	}
	return seen;
}

struct clone_arg {
	void *h;
	int task;
	pid_t pid;
};

static int contained(void *a)
{
	struct clone_arg *ca = a;
	struct spank_handle sh = { MAGIC, ca->task, ca->pid };
	spank_fn f;

	if (ca->task < 0) {
		if ((f = sym(ca->h, "slurm_spank_user_init")))
			return f(&sh, 0, NULL) ? 1 : 0;
		return 0;
	}
	if ((f = sym(ca->h, "slurm_spank_task_post_fork")))
		return f(&sh, 0, NULL) ? 1 : 0;
	return 0;
}

/* contain_spank: run the callback in a clone(CLONE_VM) child, wait for it. */
static int run_contained(void *h, int task, pid_t tpid, int sfd)
{
	static char stack[256 * 1024] __attribute__((aligned(16)));
	struct clone_arg ca = { h, task, tpid };
	pid_t pid, pids[1];
	int st[1] = { -1 };

	pid = clone(contained, stack + sizeof(stack), CLONE_VM | SIGCHLD, &ca);
	if (pid < 0) {
		perror("clone");
		return -1;
	}
	pids[0] = pid;
	if (collect(sfd, 1, pids, st, 1, 30000) != 1)
		return -1;
	return WIFEXITED(st[0]) ? WEXITSTATUS(st[0]) : -1;
}

int main(int argc, char **argv)
{
	struct spank_handle sh = { MAGIC, -1, 0 };
	const char *optval = NULL, *btype = NULL, *blist = NULL, *inproc = NULL;
	int nchildren = 0, nload = 0, contain = 0, quiet = 0, setaff = 0;
	int c, sfd, rc, tbefore, tafter, fbefore;
	long nofile = 0;
	sigset_t chld;
	void *h;
	spank_fn fn;
	pthread_t load[64];

	env = calloc(1, sizeof(*env));
	while ((c = getopt(argc, argv, "+n:g:s:o:e:t:l:aC:L:cqG:w:X:T:O:U:F:")) != -1) {
		switch (c) {
		case 'n': ntasks = atoi(optarg); break;
		case 'g': goff = atoi(optarg); break;
		case 's': stepid = strtoul(optarg, NULL, 10); break;
		case 'o': optval = optarg; break;
		case 'e': {
			char *eq = strchr(optarg, '=');

			if (!eq) {
				fprintf(stderr, "bad -e %s\n", optarg);
				return 2;
			}
			*eq = '\0';
			env_put(optarg, eq + 1);
			break;
		}
		case 't': btype = optarg; break;
		case 'l': blist = optarg; break;
		case 'a': setaff = 1; break;
		case 'C': nchildren = atoi(optarg); break;
		case 'L': nload = atoi(optarg) > 64 ? 64 : atoi(optarg); break;
		case 'c': contain = 1; break;
		case 'q': quiet = 1; break;
		case 'G': inproc = optarg; break;
		case 'w': wait_ms = atoi(optarg); break;
		case 'T': loader_busy = optarg; break;
		case 'U': job_uid = atol(optarg); break;
		case 'F': nofile = atol(optarg); break;
		case 'O': {
			FILE *f = fopen("/proc/self/oom_score_adj", "w");

			/* Lowering it needs CAP_SYS_RESOURCE (not in every container). */
			if (!f || fprintf(f, "%s", optarg) < 0 || fclose(f))
				printf("oom_score_adj unchanged\n");
			else
				printf("oom_score_adj set=%s\n", optarg);
			break;
		}
		case 'X':
			ctx = !strcmp(optarg, "local") ? S_CTX_LOCAL :
			      !strcmp(optarg, "allocator") ? S_CTX_ALLOCATOR :
			      S_CTX_REMOTE;
			break;
		default: return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "usage: spankhost [flags] PLUGIN [args...]\n");
		return 2;
	}

	/* Slurm 25.05: block SIGCHLD in all threads, read it from a signalfd. */
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &chld, NULL) ||
	    (sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
		perror("signalfd");
		return 1;
	}
	tbefore = threads();
	if (inproc && !dlopen(inproc, RTLD_LAZY)) {
		fprintf(stderr, "dlopen %s: %s\n", inproc, dlerror());
		return 1;
	}

	h = dlopen(argv[optind], RTLD_LAZY);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	if (loader_busy) {
		pthread_t lt;

		if (pthread_create(&lt, NULL, loader_thread, NULL)) {
			fprintf(stderr, "pthread_create failed\n");
			return 1;
		}
	}
	fn = sym(h, "slurm_spank_init");
	rc = fn ? fn(&sh, argc - optind - 1, argv + optind + 1) : -1;
	printf("init rc=%d\n", rc);
	if (rc == 0 && optval) {
		if (nopts < 1) {
			printf("no option registered\n");
			return 1;
		}
		rc = opts[0]->cb(opts[0]->val, strcmp(optval, "-") ? optval : NULL,
				 ctx == S_CTX_REMOTE);
		printf("option rc=%d\n", rc);
	}
	fn = sym(h, "slurm_spank_init_post_opt");
	if (nofile > 0) {
		/* -F: init_post_opt under a low RLIMIT_NOFILE (soft limit only). */
		struct rlimit rl;

		if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
			rl.rlim_cur = (rlim_t) nofile;
			if (setrlimit(RLIMIT_NOFILE, &rl))
				perror("setrlimit");
		}
	}
	fbefore = open_fds();
	rc = fn ? fn(&sh, argc - optind - 1, argv + optind + 1) : -1;
	printf("init_post_opt rc=%d\n", rc);
	printf("fds before=%d after=%d\n", fbefore, open_fds());
	tafter = threads();
	printf("threads before=%d after=%d\n", tbefore, tafter);
	if (ctx != S_CTX_REMOTE) {
		const char *v = getenv("SLURM_GPU_BIND_TOPO");

		printf("env SLURM_GPU_BIND_TOPO=%s\n", v ? v : "(unset)");
		printf("host alive\n");
		return 0;
	}
	fflush(stdout);

	if (nchildren > 0) {
		/*
		 * One child at a time, so that signals cannot coalesce: each
		 * exit must arrive on the signalfd as its own SIGCHLD.
		 */
		int seen = 0;

		for (int i = 0; i < nchildren; i++) {
			pid_t pid = fork();
			struct pollfd p = { sfd, POLLIN, 0 };
			struct signalfd_siginfo si;
			int st;

			if (pid == 0)
				_exit(0);
			if (pid < 0)
				break;
			if (poll(&p, 1, wait_ms > 1000 ? 1000 : wait_ms) == 1 &&
			    read(sfd, &si, sizeof(si)) == sizeof(si) &&
			    si.ssi_signo == SIGCHLD)
				seen++;
			while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
				;
		}
		printf("children forked=%d seen=%d\n", nchildren, seen);
		fflush(stdout);
	}

	if (contain) {
		rc = run_contained(h, -1, 0, sfd);
		printf("user_init contained rc=%d\n", rc);
		fflush(stdout);
	}

	for (int i = 0; i < nload; i++)
		pthread_create(&load[i], NULL, load_thread, NULL);

	if (rc != 0)
		ntasks = 0;
	{
		pid_t *pids = calloc(ntasks ? ntasks : 1, sizeof(*pids));
		int *st = calloc(ntasks ? ntasks : 1, sizeof(*st));
		int pfd[2], ok = 0, postfork = 0;
		spank_fn ti = sym(h, "slurm_spank_task_init");
		spank_fn pf = sym(h, "slurm_spank_task_post_fork");

		if (pipe(pfd))
			return 1;
		for (uint32_t i = 0; i < ntasks; i++) {
			pids[i] = fork();
			if (pids[i] < 0) {
				perror("fork");
				return 1;
			}
			if (pids[i] == 0) {
				/* The task child, as in exec_task(). */
				struct spank_handle th = { MAGIC, (int) i, 0 };
				char out[8192];
				int n, r;

				close(pfd[0]);
				if (btype)
					env_put("SLURM_CPU_BIND_TYPE", btype);
				if (blist)
					env_put("SLURM_CPU_BIND_LIST", blist);
				if (setaff && blist) {
					/* Entry i of a hex mask list. */
					char *l = strdup(blist), *tok, *save;
					uint32_t k = 0;
					unsigned long m = 0;

					for (tok = strtok_r(l, ",", &save); tok;
					     tok = strtok_r(NULL, ",", &save), k++)
						if (k == i)
							m = strtoul(tok, NULL, 16);
					if (m) {
						cpu_set_t s;

						CPU_ZERO(&s);
						for (int b = 0; b < 64; b++)
							if (m & (1UL << b))
								CPU_SET(b, &s);
						sched_setaffinity(0, sizeof(s), &s);
					}
				}
				r = ti ? ti(&th, 0, NULL) : 0;
				n = snprintf(out, sizeof(out), "task %u rc=%d", i, r);
				for (int e = 0; e < nenv && n < (int) sizeof(out); e++)
					if (!strncmp(env[e], "CUDA_", 5) ||
					    !strncmp(env[e], "GPUBIND_", 8) ||
					    !strncmp(env[e], "NCCL_IB_HCA", 11) ||
					    !strncmp(env[e], "UCX_NET", 7))
						n += snprintf(out + n, sizeof(out) - n,
							      " %s", env[e]);
				if (n < (int) sizeof(out) - 1) {
					out[n++] = '\n';
					if (write(pfd[1], out, n) != n)
						_exit(3);
				}
				_exit(r ? 1 : 0);
			}
			if (contain) {
				if (run_contained(h, (int) i, pids[i], sfd) == 0)
					postfork++;
			} else if (pf) {
				struct spank_handle th = { MAGIC, (int) i, pids[i] };

				if (pf(&th, 0, NULL) == 0)
					postfork++;
			}
		}
		close(pfd[1]);
		{
			FILE *f = fdopen(pfd[0], "r");
			char line[8192];

			while (f && fgets(line, sizeof(line), f))
				if (!quiet)
					fputs(line, stdout);
			if (f)
				fclose(f);
		}
		collect(sfd, ntasks, pids, st, ntasks, 60000);
		stop_load = 1;
		for (int i = 0; i < nload; i++)
			pthread_join(load[i], NULL);
		for (uint32_t i = 0; i < ntasks; i++)
			if (WIFEXITED(st[i]) && WEXITSTATUS(st[i]) == 0 && pids[i])
				ok++;
		printf("tasks ok=%d failed=%d\n", ok, (int) ntasks - ok);
		printf("post_fork calls=%d\n", postfork);
		free(pids);
		free(st);
	}
	fn = sym(h, "slurm_spank_exit");
	if (fn)
		fn(&sh, 0, NULL);
	printf("threads end=%d\n", threads());
	printf("host alive\n");
	return 0;
}
