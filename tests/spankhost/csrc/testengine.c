/*
 * Test engines for the spankhost tests, built with -DMODE_x. Selected by
 * the plugin's engine=PATH argument; production code has no test hooks.
 *   MODE_TABLE     write the file named by the request's snapshot= as the
 *                  plan; with cache_dir=, save the request there first
 *   MODE_CRASH     SIGSEGV             MODE_HANG      never return
 *   MODE_GARBAGE   write junk          MODE_TRUNCATED a plan without "end"
 *   MODE_HUGE      write 2 MiB         MODE_LINGER    write the plan, close
 *                                                     the pipe, then hang
 *   MODE_FROZEN    freeze itself in the cgroup v1 freezer GB_TEST_FREEZER: it
 *                  cannot die of SIGKILL until thawed, like a child stuck in
 *                  uninterruptible sleep (NVML on a wedged GPU)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
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
	if (!req_value(req, "snapshot", path, sizeof(path)))
		return -1;
	if ((in = open(path, O_RDONLY)) < 0)
		return -1;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(fd, buf, n) != n)
			return -1;
	close(in);
	return 0;
}

int gpubind_engine_run(const char *req, int fd)
{
#if defined(MODE_TABLE)
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
	(void) req; (void) fd;
	const char *dir = getenv("GB_TEST_FREEZER");
	char path[4096], pid[32];
	int f;

	if (!dir)
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
