/*
 * spawn_launch: what would a posix_spawn launcher cost per step against the
 * front end's fork of (multithreaded) slurmstepd? Issue 14/16 design question.
 *
 *   fork   the current child.c way: fork, dlopen the engine in the child,
 *          gpubind_engine_run into a pipe, _exit; the parent reads, reaps.
 *   spawn  posix_spawn of this same program as "launcher ENGINE" with the
 *          pipe as fd 3 and the request on fd 0; the launcher dlopens the same
 *          c-shared engine and runs it. Nothing but exec happens after fork.
 *
 *   goprog posix_spawn of gpubind-launcher (the engine package built as a Go
 *          program, what the plugin runs): argv "plan PPID TIMEOUT_MS", the
 *          request on fd 0, the table on fd 3. Only with GO_LAUNCHER given.
 *
 * The parent holds THREADS idle threads and a RSS_MB heap, like slurmstepd.
 *   cc -O2 -Wall -Wextra -Werror -o spawn_launch spawn_launch.c -ldl -lpthread
 *   ./spawn_launch ENGINE.so REQUESTFILE N [THREADS [RSS_MB [GO_LAUNCHER]]]
 *   (launcher mode, internal: ./spawn_launch --launcher ENGINE.so)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
typedef int (*run_fn)(const char *, int);

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *) a, y = *(const double *) b;

	return (x > y) - (x < y);
}

static int launcher(const char *engine)
{
	static char req[1 << 16];
	size_t len = 0;
	ssize_t n;
	void *h;
	run_fn run;

	while ((n = read(0, req + len, sizeof(req) - 1 - len)) > 0)
		len += (size_t) n;
	req[len] = '\0';
	h = dlopen(engine, RTLD_LAZY | RTLD_LOCAL);
	if (!h)
		return 101;
	run = (run_fn) dlsym(h, "gpubind_engine_run");
	if (!run)
		return 102;
	return run(req, 3) & 0xff;
}

static size_t drain(int fd)
{
	char buf[65536];
	size_t total = 0;
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			perror("gpubind: read");
			exit(1);
		}
		total += (size_t) n;
	}
	return total;
}

static double run_fork(const char *engine, const char *req, size_t *out)
{
	int p[2], st;
	double t0 = now_ms();
	pid_t pid;

	if (pipe2(p, O_CLOEXEC)) {
		perror("gpubind: pipe2");
		exit(1);
	}
	pid = fork();
	if (pid == 0) {
		void *h = dlopen(engine, RTLD_LAZY | RTLD_LOCAL);
		run_fn run = h ? (run_fn) dlsym(h, "gpubind_engine_run") : NULL;

		_exit(run ? run(req, p[1]) & 0xff : 101);
	}
	close(p[1]);
	*out = drain(p[0]);
	close(p[0]);
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "gpubind: fork child status %d\n", st);
		exit(1);
	}
	return now_ms() - t0;
}

static double run_spawn(const char *self, const char *engine, const char *req,
			size_t *out)
{
	int p[2], in[2], st;
	double t0 = now_ms();
	pid_t pid;
	posix_spawn_file_actions_t fa;
	char ppid[24];
	char *argv[] = { (char *) self, "--launcher", (char *) engine, NULL };
	char *goargv[] = { (char *) self, "plan", ppid, "10000", NULL };
	char *goenv[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "GOGC=off", NULL };

	snprintf(ppid, sizeof(ppid), "%d", (int) getpid());

	if (pipe2(p, O_CLOEXEC) || pipe2(in, O_CLOEXEC)) {
		perror("gpubind: pipe2");
		exit(1);
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, p[1], 3);
	if ((errno = posix_spawn(&pid, self, &fa, NULL, engine ? argv : goargv,
				 engine ? environ : goenv))) {
		perror("gpubind: posix_spawn");
		exit(1);
	}
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]);
	close(p[1]);
	if (write(in[1], req, strlen(req)) != (ssize_t) strlen(req)) {
		perror("gpubind: write");
		exit(1);
	}
	close(in[1]);
	*out = drain(p[0]);
	close(p[0]);
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "gpubind: spawned launcher status %d\n", st);
		exit(1);
	}
	return now_ms() - t0;
}

static void *idle(void *arg)
{
	(void) arg;
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv)
{
	static char req[1 << 16];
	double *tf, *ts, *tg;
	size_t outf = 0, outs = 0, outg = 0, len;
	const char *golauncher = argc > 6 ? argv[6] : NULL;
	int n, threads = 0, rss = 0;
	FILE *f;
	char self[4096];
	ssize_t sl;

	if (argc == 3 && !strcmp(argv[1], "--launcher"))
		return launcher(argv[2]);
	if (argc < 4) {
		fprintf(stderr, "gpubind: usage: %s ENGINE.so REQUESTFILE N [THREADS [RSS_MB]]\n", argv[0]);
		return 2;
	}
	if (!(f = fopen(argv[2], "r"))) {
		perror("gpubind: request file");
		return 1;
	}
	len = fread(req, 1, sizeof(req) - 1, f);
	req[len] = '\0';
	fclose(f);
	n = atoi(argv[3]);
	if (argc > 4)
		threads = atoi(argv[4]);
	if (argc > 5)
		rss = atoi(argv[5]);
	if (n < 1 || n > 10000) {
		fprintf(stderr, "gpubind: N must be 1..10000\n");
		return 2;
	}
	for (int i = 0; i < threads; i++) {
		pthread_t t;

		pthread_create(&t, NULL, idle, NULL);
	}
	if (rss > 0) {
		char *m = malloc((size_t) rss << 20);

		if (m)
			memset(m, 1, (size_t) rss << 20);
	}
	sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (sl < 0) {
		perror("gpubind: readlink");
		return 1;
	}
	self[sl] = '\0';
	tf = calloc(n, sizeof(*tf));
	ts = calloc(n, sizeof(*ts));
	tg = calloc(n, sizeof(*tg));
	(void) run_fork(argv[1], req, &outf); /* warm caches */
	(void) run_spawn(self, argv[1], req, &outs);
	if (golauncher)
		(void) run_spawn(golauncher, NULL, req, &outg);
	for (int i = 0; i < n; i++) { /* alternated */
		tf[i] = run_fork(argv[1], req, &outf);
		ts[i] = run_spawn(self, argv[1], req, &outs);
		if (golauncher)
			tg[i] = run_spawn(golauncher, NULL, req, &outg);
	}
	qsort(tf, n, sizeof(*tf), cmp);
	qsort(ts, n, sizeof(*ts), cmp);
	qsort(tg, n, sizeof(*tg), cmp);
	printf("fork  median %.2f ms min %.2f (table %zu bytes)\n", tf[n / 2], tf[0], outf);
	printf("spawn median %.2f ms min %.2f (table %zu bytes)\n", ts[n / 2], ts[0], outs);
	printf("spawn - fork %.2f ms per step (%d runs alternated, parent %d threads, %d MB touched)\n",
	       ts[n / 2] - tf[n / 2], n, threads, rss);
	if (golauncher) {
		printf("goprog median %.2f ms min %.2f (table %zu bytes)\n", tg[n / 2], tg[0], outg);
		printf("goprog / spawn %.3f (Go program against C launcher dlopening the engine)\n",
		       tg[n / 2] / ts[n / 2]);
	}
	return 0;
}
