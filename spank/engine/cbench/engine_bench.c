/* engine_bench: time gpubind_engine_run the way the front end calls it: fork, dlopen the
 * engine in the child, run one request into a pipe, _exit; the parent reads and reaps.
 * Prints the median of N runs in ms. With "cold DIR" it deletes DIR/topo-*.json before
 * each run, so every run discovers; otherwise the cache is warm after the first run.
 *
 *   gcc -O2 -Wall -Wextra -Werror -o engine_bench engine_bench.c -ldl
 *   ./engine_bench build/gpubind_engine.so request.txt 21 [cold /tmp/cache]
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int (*run_fn)(const char *, int);

static double now_ms(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
		perror("gpubind: clock_gettime");
		exit(1);
	}
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void clear_cache(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[4096];
	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, "topo-", 5) != 0)
			continue;
		if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path)
			continue;
		if (unlink(path) != 0)
			perror("gpubind: unlink");
	}
	if (closedir(d) != 0)
		perror("gpubind: closedir");
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double one_run(const char *engine, const char *req, size_t *outlen, int *rc)
{
	int fds[2];
	char buf[65536];
	ssize_t n;
	int st;
	pid_t pid;
	double t0 = now_ms();
	if (pipe(fds) != 0) {
		perror("gpubind: pipe");
		exit(1);
	}
	pid = fork();
	if (pid < 0) {
		perror("gpubind: fork");
		exit(1);
	}
	if (pid == 0) {
		void *h;
		run_fn run;
		if (close(fds[0]) != 0)
			_exit(100);
		h = dlopen(engine, RTLD_LAZY | RTLD_LOCAL);
		if (h == NULL)
			_exit(101);
		run = (run_fn)dlsym(h, "gpubind_engine_run");
		if (run == NULL)
			_exit(102);
		_exit(run(req, fds[1]) & 0xff);
	}
	if (close(fds[1]) != 0) {
		perror("gpubind: close");
		exit(1);
	}
	*outlen = 0;
	while ((n = read(fds[0], buf, sizeof buf)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			perror("gpubind: read");
			exit(1);
		}
		*outlen += (size_t)n;
	}
	if (close(fds[0]) != 0) {
		perror("gpubind: close");
		exit(1);
	}
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			perror("gpubind: waitpid");
			exit(1);
		}
	}
	*rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	return now_ms() - t0;
}

int main(int argc, char **argv)
{
	FILE *f;
	char req[65536];
	size_t len, outlen;
	int n, i, rc;
	double *t;
	const char *cold = NULL;
	if (argc != 4 && !(argc == 6 && strcmp(argv[4], "cold") == 0)) {
		fprintf(stderr, "gpubind: usage: %s ENGINE.so REQUESTFILE N [cold CACHEDIR]\n", argv[0]);
		return 2;
	}
	if (argc == 6)
		cold = argv[5];
	f = fopen(argv[2], "r");
	if (f == NULL) {
		perror("gpubind: request file");
		return 1;
	}
	len = fread(req, 1, sizeof req - 1, f);
	req[len] = '\0';
	if (fclose(f) != 0) {
		perror("gpubind: fclose");
		return 1;
	}
	n = atoi(argv[3]);
	if (n < 1 || n > 10000) {
		fprintf(stderr, "gpubind: N must be 1..10000\n");
		return 2;
	}
	t = calloc((size_t)n, sizeof *t);
	if (t == NULL) {
		perror("gpubind: calloc");
		return 1;
	}
	(void)one_run(argv[1], req, &outlen, &rc); /* warm the page cache (and the discovery cache) */
	for (i = 0; i < n; i++) {
		if (cold != NULL)
			clear_cache(cold);
		t[i] = one_run(argv[1], req, &outlen, &rc);
		if (rc != 0) {
			fprintf(stderr, "gpubind: run %d: engine rc %d\n", i, rc);
			return 1;
		}
	}
	qsort(t, (size_t)n, sizeof *t, cmp);
	printf("%s: median %.2f ms, min %.2f, max %.2f over %d runs, table %zu bytes\n",
	       cold ? "cold" : "warm", t[n / 2], t[0], t[n - 1], n, outlen);
	free(t);
	return 0;
}
