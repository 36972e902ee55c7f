//go:build gpubind_launcher

/*
 * gpubind-launcher, before the Go runtime starts: a constructor that runs
 * when the plugin in slurmstepd has started this program (argv
 * "plan PPID TIMEOUT_MS", request on fd 0, table pipe on fd 3, the checked
 * snapshot= file on fd 4 when the request says snapshot_fd=4). It makes the
 * process a bounded, killable worker before any Go code runs:
 *   - default signal dispositions, nothing blocked;
 *   - SIGKILL when slurmstepd dies (PR_SET_PDEATHSIG), and exit at once if
 *     it has died already;
 *   - every fd above 4 closed;
 *   - oom_score_adj 0 if it was lower: slurmstepd runs at -1000 and the
 *     launcher would otherwise inherit it, out of the OOM killer's reach;
 *   - rlimits: CPU time, open files, no core, file size.
 * The tests compile this file into their stand-in launchers too
 * (tests/spankhost), so that they start exactly as the real one does.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define GB_LAUNCHER_TABLE_FD 3
#define GB_LAUNCHER_SNAPSHOT_FD 4
#define GB_LAUNCHER_NOFILE 1024
#define GB_LAUNCHER_FSIZE (64L * 1024 * 1024)

/* A table with status error on fd 3, so the plugin logs a reason; exit 2. */
static void __attribute__((noreturn)) launcher_fail(const char *what, int err)
{
	char out[512];
	int n;

	n = snprintf(out, sizeof(out),
		     "gpubind-plan 1\nstatus error\nmessage launcher: %s%s%s\nend 2\n",
		     what, err ? ": " : "", err ? strerror(err) : "");
	if (n > 0 && (size_t) n < sizeof(out))
		(void) !write(GB_LAUNCHER_TABLE_FD, out, n);
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
	for (int fd = lowfd; fd < GB_LAUNCHER_NOFILE * 64; fd++)
		(void) close(fd);
}

/* A negative oom_score_adj (slurmstepd's -1000) up to 0; raising needs no privilege. */
static void oom_score_adj_not_below_zero(void)
{
	char cur[16] = "";
	int fd = open("/proc/self/oom_score_adj", O_RDWR | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		launcher_fail("cannot open /proc/self/oom_score_adj", errno);
	n = pread(fd, cur, sizeof(cur) - 1, 0);
	if (n <= 0) {
		(void) close(fd);
		launcher_fail("cannot read /proc/self/oom_score_adj", errno);
	}
	if (atoi(cur) < 0 && write(fd, "0", 1) != 1) {
		(void) close(fd);
		launcher_fail("cannot set oom_score_adj to 0", errno);
	}
	(void) close(fd);
}

__attribute__((constructor)) static void gb_launcher_start(int argc, char **argv)
{
	struct sigaction sa;
	sigset_t none;
	char *end;
	long ppid, timeout_ms;

	if (argc != 4 || strcmp(argv[1], "plan")) {
		static const char usage[] =
			"gpubind-launcher: started by the gpubind SPANK plugin only "
			"(argv: plan PPID TIMEOUT_MS; request on fd 0, table to fd 3)\n";

		(void) !write(2, usage, sizeof(usage) - 1);
		_exit(2);
	}
	ppid = strtol(argv[2], &end, 10);
	if (*end || ppid <= 0)
		launcher_fail("bad parent pid argument", 0);
	timeout_ms = strtol(argv[3], &end, 10);
	if (*end || timeout_ms <= 0)
		launcher_fail("bad timeout argument", 0);

	/* Die with slurmstepd; it may have died before the prctl. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != (pid_t) ppid)
		_exit(3);
	if (fcntl(GB_LAUNCHER_TABLE_FD, F_GETFD) < 0 || fcntl(0, F_GETFD) < 0)
		_exit(3);
	close_from(GB_LAUNCHER_SNAPSHOT_FD + 1);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			(void) sigaction(s, &sa, NULL);
	sigemptyset(&none);
	(void) sigprocmask(SIG_SETMASK, &none, NULL);

	oom_score_adj_not_below_zero();
	/*
	 * No RLIMIT_AS: the Go runtime reserves address space far beyond what
	 * it uses. CPU time bounds a spinning launcher even if slurmstepd were
	 * gone; the wall deadline is slurmstepd's SIGKILL.
	 */
	set_limit(RLIMIT_CPU, (rlim_t) (timeout_ms / 1000 + 2));
	set_limit(RLIMIT_NOFILE, GB_LAUNCHER_NOFILE);
	set_limit(RLIMIT_CORE, 0);
	set_limit(RLIMIT_FSIZE, GB_LAUNCHER_FSIZE);
}
