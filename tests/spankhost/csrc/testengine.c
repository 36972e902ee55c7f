/*
 * Test launchers for the spankhost tests, built with -DMODE_x as programs
 * together with spank/engine/launcher.c, so that they start exactly as the
 * real gpubind-launcher does (argv, fds, limits, oom_score_adj), then read
 * the request on fd 0 and write to fd 3 what MODE_x says. Selected by the
 * plugin's launcher=PATH argument; production code has no test hooks. Also
 * built as a library (-shared, MODE_TABLE) for a host thread to dlopen.
 *   MODE_TABLE     write the file named by the request's snapshot= as the
 *                  plan; with cache_dir=, save the request there first
 *   MODE_CRASH     SIGSEGV             MODE_HANG      never return
 *   MODE_GARBAGE   write junk          MODE_TRUNCATED a plan without "end"
 *   MODE_HUGE      write 2 MiB         MODE_LINGER    write the plan, close
 *                                                     the pipe, then hang
 *   MODE_FROZEN    freeze itself in the cgroup v1 freezer named by the
 *                  request's root=: it cannot die of SIGKILL until thawed,
 *                  like a launcher in uninterruptible sleep (NVML on a
 *                  wedged GPU)
 *   MODE_PROBE     write what the process looks like (exe, environment,
 *                  oom_score_adj, fds, parent-death signal, limits) to
 *                  cache_dir/probe.txt, then as MODE_TABLE
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((unused)) static char *req_value(const char *req, const char *key, char *buf, size_t len)
{
	size_t kl = strlen(key);

	for (const char *p = req; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (!strncmp(p, key, kl) && p[kl] == '=') {
			size_t l = strcspn(p + kl + 1, "\n");

			if (l >= len)
				return NULL;
			memcpy(buf, p + kl + 1, l);
			buf[l] = '\0';
			return buf;
		}
	}
	return NULL;
}

__attribute__((unused)) static int copy_plan(const char *req, int fd)
{
	char path[1024], dir[1024], buf[65536];
	int in;
	ssize_t n;

	if (req_value(req, "cache_dir", dir, sizeof(dir)) && dir[0]) {
		char rp[1100];
		FILE *f;

		snprintf(rp, sizeof(rp), "%s/request.txt", dir);
		if ((f = fopen(rp, "w"))) {
			fputs(req, f);
			fclose(f);
		}
	}
	/* As the real launcher: the checked file on fd 4 when the request says so. */
	if (req_value(req, "snapshot_fd", path, sizeof(path)))
		in = atoi(path);
	else if (!req_value(req, "snapshot", path, sizeof(path)) ||
		 (in = open(path, O_RDONLY)) < 0)
		return -1;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(fd, buf, n) != n)
			return -1;
	close(in);
	return 0;
}

__attribute__((unused)) static int probe(const char *req)
{
	extern char **environ;
	char dir[1024], path[1100], exe[1024] = "", oom[32] = "";
	struct rlimit rl;
	FILE *f;
	DIR *d;
	struct dirent *e;
	int sig = -1, o;
	ssize_t n;

	if (!req_value(req, "cache_dir", dir, sizeof(dir)))
		return -1;
	snprintf(path, sizeof(path), "%s/probe.txt", dir);
	if (!(f = fopen(path, "w")))
		return -1;
	if ((n = readlink("/proc/self/exe", exe, sizeof(exe) - 1)) > 0)
		exe[n] = '\0';
	if ((o = open("/proc/self/oom_score_adj", O_RDONLY)) >= 0) {
		if ((n = read(o, oom, sizeof(oom) - 1)) > 0)
			oom[strcspn(oom, "\n")] = '\0';
		close(o);
	}
	(void) prctl(PR_GET_PDEATHSIG, &sig);
	fprintf(f, "exe %s\noom_score_adj %s\npdeathsig %d\nppid %d\n", exe, oom,
		sig, (int) getppid());
	getrlimit(RLIMIT_CORE, &rl);
	fprintf(f, "core %ld\n", (long) rl.rlim_max);
	getrlimit(RLIMIT_NOFILE, &rl);
	fprintf(f, "nofile %ld\n", (long) rl.rlim_max);
	if ((d = opendir("/proc/self/fd"))) {
		while ((e = readdir(d)))
			if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d) &&
			    atoi(e->d_name) != fileno(f))
				fprintf(f, "fd %s\n", e->d_name);
		closedir(d);
	}
	for (char **v = environ; *v; v++)
		fprintf(f, "env %s\n", *v);
	fclose(f);
	return 0;
}

int gpubind_engine_run(const char *req, int fd)
{
#if defined(MODE_PROBE)
	if (probe(req))
		return -1;
	return copy_plan(req, fd);
#elif defined(MODE_TABLE)
	return copy_plan(req, fd);
#elif defined(MODE_CRASH)
	(void) req; (void) fd;
	raise(SIGSEGV);
	return 0;
#elif defined(MODE_HANG)
	(void) req; (void) fd;
	for (;;)
		pause();
#elif defined(MODE_FROZEN)
	(void) fd;
	char dir[1024], path[4096], pid[32];
	int f;

	if (!req_value(req, "root", dir, sizeof(dir)))
		return -1;
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	snprintf(pid, sizeof(pid), "%d", (int) getpid());
	if ((f = open(path, O_WRONLY)) < 0 || write(f, pid, strlen(pid)) < 0)
		return -1;
	close(f);
	snprintf(path, sizeof(path), "%s/freezer.state", dir);
	if ((f = open(path, O_WRONLY)) < 0 || write(f, "FROZEN", 6) < 0)
		return -1;
	close(f);
	for (;;)
		pause();
#elif defined(MODE_GARBAGE)
	(void) req;
	static const char junk[] = "\x01\x02 not a plan\nstatus maybe\n\xff\xfe";
	return write(fd, junk, sizeof(junk) - 1) > 0 ? 0 : -1;
#elif defined(MODE_TRUNCATED)
	(void) req;
	static const char part[] = "gpubind-plan 1\nstatus ok\nmode enforce\nflags -\nrule table\n";
	return write(fd, part, sizeof(part) - 1) > 0 ? 0 : -1;
#elif defined(MODE_HUGE)
	(void) req;
	char line[4000];
	memset(line, 'x', sizeof(line));
	line[sizeof(line) - 1] = '\n';
	for (int i = 0; i < 600; i++)
		if (write(fd, line, sizeof(line)) != sizeof(line))
			return -1;
	return 0;
#elif defined(MODE_LINGER)
	copy_plan(req, fd);
	close(fd);
	for (;;)
		pause();
#else
#error "define one MODE_x"
#endif
}

#ifdef GB_TEST_LAUNCHER
/* As gpubind-launcher's main: the request from fd 0, the table to fd 3. */
int main(void)
{
	static char req[1 << 20];
	size_t len = 0;
	ssize_t n;

	while (len < sizeof(req) - 1 &&
	       (n = read(0, req + len, sizeof(req) - 1 - len)) > 0)
		len += n;
	req[len] = '\0';
	return gpubind_engine_run(req, 3) == 0 ? 0 : 1;
}
#endif
