/*
 * The short-lived engine child. The Go runtime starts only here, in a
 * fresh process that writes the plan to a pipe and _exits; the parent
 * (slurmstepd) bounds its time, SIGKILLs it at the deadline and reaps it.
 */
#include "gpubind.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "table.h"

#define GB_CHILD_FD 3
#define GB_CHILD_NOFILE 1024
#define GB_CHILD_FSIZE (64L * 1024 * 1024)

typedef int (*gb_run_fn)(const char *request, int out_fd);

int gb_engine_path(char *buf, size_t len)
{
	Dl_info info;
	char tmp[1024];

	if (!dladdr((void *) gb_engine_path, &info) || !info.dli_fname) {
		gb_error("cannot find the plugin's own path (dladdr failed); set engine=PATH");
		return -1;
	}
	if ((size_t) snprintf(tmp, sizeof(tmp), "%s", info.dli_fname) >=
	    sizeof(tmp))
		return -1;
	if ((size_t) snprintf(buf, len, "%s/%s", dirname(tmp),
			      GB_ENGINE_NAME) >= len)
		return -1;
	return 0;
}

/* In the child: a table with status error, so the parent has a reason. */
static void child_fail(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));

static void child_fail(const char *fmt, ...)
{
	char msg[1024], out[1200];
	va_list ap;
	int n;

	va_start(ap, fmt);
	(void) vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	for (char *p = msg; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = '?';
	n = snprintf(out, sizeof(out),
		     "gpubind-plan 1\nstatus error\nmessage %s\nend 2\n", msg);
	if (n > 0 && (size_t) n < sizeof(out))
		(void) !write(GB_CHILD_FD, out, n);
	_exit(2);
}

static void set_limit(int res, rlim_t v)
{
	struct rlimit rl = { v, v };
	struct rlimit cur;

	/* Never raise a limit the admin set lower. */
	if (!getrlimit(res, &cur) && cur.rlim_max != RLIM_INFINITY &&
	    cur.rlim_max < v)
		rl.rlim_cur = rl.rlim_max = cur.rlim_max;
	(void) setrlimit(res, &rl);
}

static void close_from(int lowfd)
{
#ifdef SYS_close_range
	if (!syscall(SYS_close_range, (unsigned) lowfd, ~0U, 0))
		return;
#endif
	for (int fd = lowfd; fd < GB_CHILD_NOFILE * 64; fd++)
		(void) close(fd);
}

static void __attribute__((noreturn))
child_main(const char *engine, const char *request, int wfd, int timeout_ms,
	   pid_t parent)
{
	struct sigaction sa;
	sigset_t none;
	void *h;
	gb_run_fn run;
	int null, rc;

	/* Slurm may block signals (25.05 blocks SIGCHLD): start clean. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			(void) sigaction(s, &sa, NULL);
	sigemptyset(&none);
	(void) sigprocmask(SIG_SETMASK, &none, NULL);
	/* Die with slurmstepd; it may have died before the prctl. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
		_exit(3);

	/* The pipe becomes fd 3; 0-2 are /dev/null; nothing else survives. */
	if (wfd != GB_CHILD_FD) {
		if (dup2(wfd, GB_CHILD_FD) < 0)
			_exit(3);
	} else if (fcntl(wfd, F_SETFD, 0) < 0) {
		_exit(3);
	}
	null = open("/dev/null", O_RDWR);
	if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 ||
	    dup2(null, 2) < 0)
		child_fail("cannot open /dev/null in the engine child");
	close_from(GB_CHILD_FD + 1);

	/*
	 * No RLIMIT_AS: the Go runtime reserves address space far beyond
	 * what it uses. CPU time bounds a spinning child even if the parent
	 * were gone; the wall deadline is the parent's SIGKILL.
	 */
	set_limit(RLIMIT_CPU, (rlim_t) (timeout_ms / 1000 + 2));
	set_limit(RLIMIT_NOFILE, GB_CHILD_NOFILE);
	set_limit(RLIMIT_CORE, 0);
	set_limit(RLIMIT_FSIZE, GB_CHILD_FSIZE);
	(void) setpgid(0, 0);

	h = dlopen(engine, RTLD_LAZY | RTLD_LOCAL);
	if (!h)
		child_fail("cannot load engine %s: %s", engine, dlerror());
	run = (gb_run_fn) dlsym(h, "gpubind_engine_run");
	if (!run)
		child_fail("engine %s has no gpubind_engine_run", engine);
	rc = run(request, GB_CHILD_FD);
	_exit(rc == 0 ? 0 : 1);
}

static long remaining_ms(long deadline_us)
{
	long left = deadline_us - gb_now_us();

	return left <= 0 ? 0 : (left + 999) / 1000;
}

/* Wait for pid until now + ms; 1 when reaped (or ECHILD: someone else did). */
static int wait_until(pid_t pid, long deadline_us, struct gb_child_result *res)
{
	for (;;) {
		int st;
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid) {
			res->exited = 1;
			res->status = st;
			return 1;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return 1; /* slurmstepd may reap any child with wait3 */
		if (remaining_ms(deadline_us) == 0)
			return 0;
		{
			struct timespec ts = { 0, 500000 };

			(void) nanosleep(&ts, NULL);
		}
	}
}

/*
 * Reap pid before the deadline, else SIGKILL it and wait at most
 * GB_REAP_GRACE_MS more: never block slurmstepd on a child that cannot die.
 */
static void reap(pid_t pid, long deadline_us, struct gb_child_result *res)
{
	if (wait_until(pid, deadline_us, res))
		return;
	res->timed_out = 1;
	(void) kill(pid, SIGKILL);
	if (!wait_until(pid, gb_now_us() + GB_REAP_GRACE_MS * 1000L, res))
		res->unreaped = 1;
}

int gb_run_engine(const char *engine, const char *request, int timeout_ms,
		  struct gb_child_result *res, char *err, size_t errlen)
{
	int fds[2];
	pid_t pid, parent;
	long deadline = gb_now_us() + (long) timeout_ms * 1000;
	size_t cap = 64 * 1024;
	int rc = -1;

	memset(res, 0, sizeof(*res));
	if (access(engine, R_OK)) {
		(void) snprintf(err, errlen, "cannot read engine %s: %s",
				engine, strerror(errno));
		return -1;
	}
	if (pipe2(fds, O_CLOEXEC)) {
		(void) snprintf(err, errlen, "pipe2: %s", strerror(errno));
		return -1;
	}
	res->out = malloc(cap);
	if (!res->out) {
		(void) snprintf(err, errlen, "out of memory");
		(void) close(fds[0]);
		(void) close(fds[1]);
		return -1;
	}
	parent = getpid();
	pid = fork();
	if (pid < 0) {
		(void) snprintf(err, errlen, "fork: %s", strerror(errno));
		(void) close(fds[0]);
		(void) close(fds[1]);
		free(res->out);
		res->out = NULL;
		return -1;
	}
	if (pid == 0)
		child_main(engine, request, fds[1], timeout_ms, parent);
	(void) close(fds[1]);

	for (;;) {
		struct pollfd p = { fds[0], POLLIN, 0 };
		long left = remaining_ms(deadline);
		ssize_t n;
		int pr;

		if (left == 0) {
			res->timed_out = 1;
			(void) snprintf(err, errlen,
					"engine did not finish within %d ms (killed)",
					timeout_ms);
			break;
		}
		pr = poll(&p, 1, (int) left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0) {
			(void) snprintf(err, errlen, "poll: %s", strerror(errno));
			break;
		}
		if (pr == 0)
			continue;
		if (res->outlen == cap) {
			char *x;

			if (cap > GB_TABLE_MAX_BYTES) {
				(void) snprintf(err, errlen,
						"engine wrote more than %d bytes",
						GB_TABLE_MAX_BYTES);
				break;
			}
			x = realloc(res->out, cap * 2);
			if (!x) {
				(void) snprintf(err, errlen, "out of memory");
				break;
			}
			res->out = x;
			cap *= 2;
		}
		n = read(fds[0], res->out + res->outlen, cap - res->outlen);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0) {
			(void) snprintf(err, errlen, "read: %s", strerror(errno));
			break;
		}
		if (n == 0) {
			rc = 0;
			break;
		}
		res->outlen += n;
	}
	(void) close(fds[0]);
	if (rc) {
		/* Error or deadline: do not wait for a child that misbehaves. */
		(void) kill(pid, SIGKILL);
		res->killed = 1;
		deadline = gb_now_us();
	}
	reap(pid, deadline + (rc ? 1000000L : 0), res);
	if (rc == 0 && res->timed_out)
		(void) snprintf(err, errlen,
				"engine did not exit within %d ms (killed)",
				timeout_ms);
	return rc;
}
