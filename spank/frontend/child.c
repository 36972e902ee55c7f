/*
 * The engine process: the installed program gpubind-launcher, started with
 * posix_spawn, never a fork of slurmstepd (a fork copies slurmstepd's
 * memory, its oom_score_adj and any lock another thread holds, the dynamic
 * loader's included). The Go runtime starts only there; it writes the plan
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
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "table.h"

/* The launcher's fds (spank/engine/launcher.c): request on 0, table on 3. */
#define GB_LAUNCHER_TABLE_FD 3
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

/* The built-in launcher path, exported for `gpubind check` to read from this file. */
const char gpubind_launcher_path[] = GB_LAUNCHER_PATH;

int gb_launcher_path(char *buf, size_t len)
{
	const char *p = gb_conf.launcher[0] ? gb_conf.launcher :
			gpubind_launcher_path;

	return (size_t) snprintf(buf, len, "%s", p) >= len ? -1 : 0;
}

/* fd moved to a number >= 10, close-on-exec; -1 (fd closed) on failure. */
static int high_fd(int fd)
{
	int hi;

	if (fd < 0)
		return -1;
	hi = fcntl(fd, F_DUPFD_CLOEXEC, 10);
	(void) close(fd);
	return hi;
}

/* The request in a sealed memfd at offset 0, close-on-exec; -1 with err. */
static int request_memfd(const char *request, char *err, size_t errlen)
{
	size_t len = strlen(request), off = 0;
	int fd = high_fd(memfd_create("gpubind-request",
				      MFD_CLOEXEC | MFD_ALLOW_SEALING));

	if (fd < 0) {
		(void) snprintf(err, errlen, "memfd_create: %s", strerror(errno));
		return -1;
	}
	while (off < len) {
		ssize_t n = write(fd, request + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			(void) snprintf(err, errlen, "writing the request: %s",
					n < 0 ? strerror(errno) : "short write");
			(void) close(fd);
			return -1;
		}
		off += n;
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

/*
 * posix_spawn the launcher: glibc's is clone(CLONE_VM|CLONE_VFORK) then
 * execve, so no copy of slurmstepd's memory is made, the child runs only
 * glibc's spawn helper until execve, and no atfork handler or loader lock
 * is involved. Explicit argv and environment; fds 0 request,
 * 1 and 2 /dev/null, 3 the table pipe, nothing else; default signals,
 * nothing blocked, its own process group.
 */
static int spawn_launcher(const char *launcher, int reqfd, int wfd,
			  int nullfd, int timeout_ms, pid_t *pid, char *err,
			  size_t errlen)
{
	static char *const envp[] = { GB_LAUNCHER_ENV };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t all, none;
	char ppid[24], tmo[24];
	char *argv[] = { (char *) launcher, "plan", ppid, tmo, NULL };
	int rc;

	(void) snprintf(ppid, sizeof(ppid), "%ld", (long) getpid());
	(void) snprintf(tmo, sizeof(tmo), "%d", timeout_ms);
	sigfillset(&all);
	sigemptyset(&none);
	if (posix_spawn_file_actions_init(&fa)) {
		(void) snprintf(err, errlen, "posix_spawn_file_actions_init failed");
		return -1;
	}
	if (posix_spawnattr_init(&at)) {
		posix_spawn_file_actions_destroy(&fa);
		(void) snprintf(err, errlen, "posix_spawnattr_init failed");
		return -1;
	}
	rc = posix_spawn_file_actions_adddup2(&fa, reqfd, 0) ||
	     posix_spawn_file_actions_adddup2(&fa, nullfd, 1) ||
	     posix_spawn_file_actions_adddup2(&fa, nullfd, 2) ||
	     posix_spawn_file_actions_adddup2(&fa, wfd, GB_LAUNCHER_TABLE_FD) ||
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
	     posix_spawn_file_actions_addclosefrom_np(&fa, GB_LAUNCHER_TABLE_FD + 1) ||
#endif
	     posix_spawnattr_setsigdefault(&at, &all) ||
	     posix_spawnattr_setsigmask(&at, &none) ||
	     posix_spawnattr_setpgroup(&at, 0) ||
	     posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF |
				      POSIX_SPAWN_SETSIGMASK |
				      POSIX_SPAWN_SETPGROUP);
	if (rc) {
		(void) snprintf(err, errlen, "posix_spawn attributes failed");
	} else {
		rc = posix_spawn(pid, launcher, &fa, &at, argv, envp);
		if (rc)
			(void) snprintf(err, errlen,
					"cannot start launcher %s: %s",
					launcher, strerror(rc));
	}
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	return rc ? -1 : 0;
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

int gb_run_launcher(const char *launcher, const char *request,
		    int timeout_ms, struct gb_child_result *res, char *err,
		    size_t errlen)
{
	int fds[2], reqfd, nullfd;
	pid_t pid;
	long deadline = gb_now_us() + (long) timeout_ms * 1000;
	size_t cap = 64 * 1024;
	int rc = -1;

	memset(res, 0, sizeof(*res));
	reqfd = request_memfd(request, err, errlen);
	if (reqfd < 0)
		return -1;
	nullfd = high_fd(open("/dev/null", O_RDWR | O_CLOEXEC));
	if (nullfd < 0 || pipe2(fds, O_CLOEXEC) ||
	    (fds[0] = high_fd(fds[0])) < 0 || (fds[1] = high_fd(fds[1])) < 0) {
		(void) snprintf(err, errlen, "pipe or /dev/null: %s",
				strerror(errno));
		(void) close(reqfd);
		if (nullfd >= 0)
			(void) close(nullfd);
		return -1;
	}
	res->out = malloc(cap);
	if (!res->out ||
	    spawn_launcher(launcher, reqfd, fds[1], nullfd, timeout_ms, &pid,
			   err, errlen)) {
		if (!res->out)
			(void) snprintf(err, errlen, "out of memory");
		(void) close(fds[0]);
		(void) close(fds[1]);
		(void) close(reqfd);
		(void) close(nullfd);
		free(res->out);
		res->out = NULL;
		return -1;
	}
	(void) close(fds[1]);
	(void) close(reqfd);
	(void) close(nullfd);

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
