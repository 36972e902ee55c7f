/*
 * The engine process: the installed program gpubind-launcher, never a fork
 * of slurmstepd (a fork copies slurmstepd's memory, its oom_score_adj and
 * any lock another thread holds, the dynamic loader's included). It is
 * started with clone(CLONE_VM|CLONE_VFORK) and execveat of the fd that
 * trust.c checked: the very file that was checked runs, whatever happens to
 * its path afterwards. The Go runtime starts only there; it writes the plan
 * to a pipe and exits; the parent (slurmstepd) bounds its time, SIGKILLs it
 * at the deadline and reaps it.
 */
#include "gpubind.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "table.h"

/*
 * The launcher's fds (spank/engine/launcher.c): request on 0, table on 3,
 * the checked snapshot= file on 4 (the request then says snapshot_fd=4).
 */
#define GB_LAUNCHER_TABLE_FD 3
#define GB_LAUNCHER_SNAPSHOT_FD 4
/*
 * Its whole environment: nothing of slurmstepd's or the job's. GOGC=off: it
 * lives a few ms, a garbage collection there is pure cost.
 */
#define GB_LAUNCHER_ENV "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "GOGC=off", NULL

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

/*
 * The built-in launcher path, exported (gpubind.exports) for `gpubind check`
 * to read from this file; nothing else in the plugin names it.
 */
extern const char gpubind_launcher_path[];
const char gpubind_launcher_path[] = GB_LAUNCHER_PATH;

int gb_launcher_path(char *buf, size_t len)
{
	const char *set = gb_config()->launcher;
	const char *p = set[0] ? set : gpubind_launcher_path;

	return (size_t) snprintf(buf, len, "%s", p) >= len ? -1 : 0;
}

/* fd moved to a number >= 10, close-on-exec; -1 (fd closed) on failure. */
static int high_fd(int fd)
{
	int hi, e;

	if (fd < 0)
		return -1;
	hi = fcntl(fd, F_DUPFD_CLOEXEC, 10);
	e = errno;
	(void) close(fd);
	errno = e;
	return hi;
}

/*
 * A close-on-exec pipe, both ends at numbers >= 10: 0, or -1 with nothing
 * left open (under a low RLIMIT_NOFILE one end may move and the other not).
 */
static int high_pipe(int fds[2])
{
	int e;

	if (pipe2(fds, O_CLOEXEC))
		return -1;
	fds[0] = high_fd(fds[0]);
	if (fds[0] < 0) {
		e = errno;
		(void) close(fds[1]);
		errno = e;
		return -1;
	}
	fds[1] = high_fd(fds[1]);
	if (fds[1] < 0) {
		e = errno;
		(void) close(fds[0]);
		errno = e;
		return -1;
	}
	return 0;
}

static int write_all(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = EIO;
			return -1;
		}
		p += n;
		len -= n;
	}
	return 0;
}

/*
 * The request in a sealed memfd at offset 0, close-on-exec, with
 * snapshot_fd=4 added when the launcher gets the snapshot on fd 4; -1 with
 * err.
 */
static int request_memfd(const char *request, int snapshot, char *err,
			 size_t errlen)
{
	static const char snapline[] = "snapshot_fd=4\n";
	int fd = high_fd(memfd_create("gpubind-request",
				      MFD_CLOEXEC | MFD_ALLOW_SEALING));

	if (fd < 0) {
		(void) snprintf(err, errlen, "memfd_create: %s", strerror(errno));
		return -1;
	}
	if (write_all(fd, request, strlen(request)) ||
	    (snapshot && write_all(fd, snapline, sizeof(snapline) - 1))) {
		(void) snprintf(err, errlen, "writing the request: %s",
				strerror(errno));
		(void) close(fd);
		return -1;
	}
	(void) fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW |
		     F_SEAL_WRITE | F_SEAL_SEAL);
	if (lseek(fd, 0, SEEK_SET) != 0) {
		(void) snprintf(err, errlen, "lseek: %s", strerror(errno));
		(void) close(fd);
		return -1;
	}
	return fd;
}

/* What the child of spawn_launcher needs, all prepared by the parent. */
struct spawn {
	int exe;                /* the checked launcher, O_PATH */
	int fd[5];              /* to become fds 0..4; fd[4] -1: none */
	int nfds;               /* how many of fd[] to give */
	long maxfd;             /* close up to here if close_range is missing */
	char **argv, **envp;
	volatile int err;       /* errno of a failed step in the child */
	volatile int step;      /* which step failed (for the message) */
};

static const char *const spawn_steps[] = {
	"", "resetting signals", "setpgid", "dup2", "closing fds",
	"unblocking signals", "execveat",
};

/* The kernel's sigset: 64 signals. */
#define GB_KSIGSET 8

/* Set the calling thread's mask to *set (old into *old): raw, no glibc filter. */
static void set_mask(const unsigned long *set, unsigned long *old)
{
	(void) syscall(SYS_rt_sigprocmask, SIG_SETMASK, set, old,
		       (size_t) GB_KSIGSET);
}

/* Close [from, to] (both >= 0), close_range or one by one. */
static void close_fds(long from, long to)
{
	if (from > to)
		return;
#ifdef SYS_close_range
	if (!syscall(SYS_close_range, (unsigned) from, (unsigned) to, 0))
		return;
#endif
	for (long fd = from; fd <= to; fd++)
		(void) syscall(SYS_close, (int) fd);
}

/*
 * The child, on its own stack, sharing slurmstepd's memory until execveat:
 * only raw system calls here (async-signal-safe, no malloc, no lock, no
 * atfork handler, nothing of glibc's state), then the exec. A failed step
 * is left in sp->err for the parent, which is suspended until exec or
 * _exit (CLONE_VFORK).
 */
static int spawn_child(void *arg)
{
	struct spawn *sp = arg;
	/* A zeroed kernel struct sigaction is SIG_DFL, whatever its layout. */
	unsigned long dfl[8] = { 0 }, none = 0;
	int i;

	/* Every disposition back to default while all signals are blocked:
	 * no handler of slurmstepd's can run in this copy of its memory. */
	sp->step = 1;
	for (i = 1; i <= 64; i++)
		if (i != SIGKILL && i != SIGSTOP)
			(void) syscall(SYS_rt_sigaction, i, dfl, NULL,
				       (size_t) GB_KSIGSET);
	sp->step = 2;
	if (syscall(SYS_setpgid, 0, 0))
		goto fail;
	/* The sources are all >= 10 (high_fd): no dup2 overwrites another. */
	sp->step = 3;
	for (i = 0; i < sp->nfds; i++)
		if (syscall(SYS_dup2, sp->fd[i], i) != i)
			goto fail;
	/* Everything else but the exe fd, which is close-on-exec. */
	sp->step = 4;
	close_fds(sp->nfds, sp->exe - 1);
	close_fds(sp->exe + 1, sp->maxfd);
	sp->step = 5;
	set_mask(&none, NULL);
	sp->step = 6;
	(void) syscall(SYS_execveat, sp->exe, "", sp->argv, sp->envp,
		       AT_EMPTY_PATH);
fail:
	sp->err = errno;
	_exit(127);
}

/*
 * Start the launcher: clone(CLONE_VM|CLONE_VFORK) onto a stack of its own
 * (as glibc's posix_spawn does, so no copy of slurmstepd's memory is made
 * and the parent's stack is never touched), then execveat(exe, "",
 * AT_EMPTY_PATH): the file trust.c checked and nothing else. Explicit argv
 * and environment; fds 0 request, 1 and 2 /dev/null, 3 the table pipe, 4
 * the snapshot (if any), nothing else; default signals, nothing blocked,
 * its own process group. All signals stay blocked in the calling thread
 * while the child shares its memory, so no handler of slurmstepd's runs in
 * the child.
 */
static int spawn_launcher(int exe, const char *name, const int fds[5],
			  int timeout_ms, pid_t *pid, char *err, size_t errlen)
{
	enum { STACK = 64 * 1024 };
	static char *const envp[] = { GB_LAUNCHER_ENV };
	struct spawn sp = { .exe = exe, .nfds = fds[4] >= 0 ? 5 : 4,
			    .envp = (char **) envp };
	char ppid[24], tmo[24];
	char *argv[] = { (char *) name, "plan", ppid, tmo, NULL };
	struct rlimit rl;
	unsigned long all = ~0UL, old = 0;
	char *stack;
	int e;

	memcpy(sp.fd, fds, sizeof(sp.fd));
	sp.argv = argv;
	/* Where close_range is missing (before Linux 5.9): up to the limit. */
	sp.maxfd = getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur > 65536 ?
		   65535 : (long) rl.rlim_cur - 1;
	(void) snprintf(ppid, sizeof(ppid), "%ld", (long) getpid());
	(void) snprintf(tmo, sizeof(tmo), "%d", timeout_ms);
	stack = mmap(NULL, STACK, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED) {
		(void) snprintf(err, errlen, "cannot start launcher %s: mmap: %s",
				name, strerror(errno));
		return -1;
	}
	set_mask(&all, &old);
	*pid = clone(spawn_child, stack + STACK,
		     CLONE_VM | CLONE_VFORK | SIGCHLD, &sp);
	e = errno;
	set_mask(&old, NULL);
	(void) munmap(stack, STACK);
	if (*pid < 0) {
		(void) snprintf(err, errlen, "cannot start launcher %s: clone: %s",
				name, strerror(e));
		return -1;
	}
	if (sp.err) {
		int st;

		/* It has _exit'ed: reap it here, it never ran anything. */
		while (waitpid(*pid, &st, 0) < 0 && errno == EINTR)
			;
		(void) snprintf(err, errlen, "cannot start launcher %s: %s%s%s",
				name, sp.step == 6 ? "" : spawn_steps[sp.step],
				sp.step == 6 ? "" : ": ", strerror(sp.err));
		if (sp.step == 6 && sp.err == ENOENT)
			(void) snprintf(err + strlen(err), errlen - strlen(err),
					" (a script cannot be run from its fd: the launcher must be a program)");
		return -1;
	}
	return 0;
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

static void close_all(int *fd, int n)
{
	for (int i = 0; i < n; i++)
		if (fd[i] >= 0) {
			(void) close(fd[i]);
			fd[i] = -1;
		}
}

int gb_run_launcher(int launcher_fd, const char *name, int snapshot_fd,
		    const char *request, int timeout_ms,
		    struct gb_child_result *res, char *err, size_t errlen)
{
	/* Owned here: request, /dev/null, exe, snapshot, pipe read, pipe write. */
	enum { REQ, NUL, EXE, SNAP, RD, WR, NOWN };
	int own[NOWN] = { -1, -1, -1, -1, -1, -1 };
	int give[5];
	pid_t pid;
	long deadline = gb_now_us() + (long) timeout_ms * 1000;
	size_t cap = 64 * 1024;
	int rc = -1;

	memset(res, 0, sizeof(*res));
	own[REQ] = request_memfd(request, snapshot_fd >= 0, err, errlen);
	if (own[REQ] < 0)
		return -1;
	/* All >= 10: the child's dup2 onto 0..4 overwrites none of them. */
	own[NUL] = high_fd(open("/dev/null", O_RDWR | O_CLOEXEC));
	if (own[NUL] >= 0)
		own[EXE] = fcntl(launcher_fd, F_DUPFD_CLOEXEC, 10);
	if (own[EXE] >= 0 && snapshot_fd >= 0)
		own[SNAP] = fcntl(snapshot_fd, F_DUPFD_CLOEXEC, 10);
	if (own[NUL] < 0 || own[EXE] < 0 ||
	    (snapshot_fd >= 0 && own[SNAP] < 0) || high_pipe(&own[RD])) {
		(void) snprintf(err, errlen,
				"cannot start launcher %s: fds for it: %s", name,
				strerror(errno));
		close_all(own, NOWN);
		return -1;
	}
	give[0] = own[REQ];
	give[1] = give[2] = own[NUL];
	give[GB_LAUNCHER_TABLE_FD] = own[WR];
	give[GB_LAUNCHER_SNAPSHOT_FD] = own[SNAP];
	res->out = malloc(cap);
	if (!res->out || spawn_launcher(own[EXE], name, give, timeout_ms, &pid,
					err, errlen)) {
		if (!res->out)
			(void) snprintf(err, errlen, "out of memory");
		close_all(own, NOWN);
		free(res->out);
		res->out = NULL;
		return -1;
	}
	/* Only the read end stays. */
	close_all(own, RD);
	close_all(&own[WR], 1);

	for (;;) {
		struct pollfd p = { own[RD], POLLIN, 0 };
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
		n = read(own[RD], res->out + res->outlen, cap - res->outlen);
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
	(void) close(own[RD]);
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
