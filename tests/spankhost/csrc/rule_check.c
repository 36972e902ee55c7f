/*
 * rule_check: the plugin's table parser and per-task rule, outside Slurm.
 * It asks an engine for a plan (dlopen + gpubind_engine_run into a pipe,
 * as the plugin's child does), then resolves every task with the C rule
 * from a given CPU layout and prints one JSON object per task, in the
 * shape of `gpubind plan --json`, so that a test can compare the two.
 *
 * usage: rule_check ENGINE REQUEST_FILE BIND_TYPE TASK_CPUS
 *   BIND_TYPE  mask_cpu:, map_cpu: or none (no list, only each task's own mask)
 *   TASK_CPUS  CPU list per task, ";"-separated, e.g. "0;1;0;1"; "" for
 *              unknown (the task line is taken, as `gpubind plan` without
 *              --task-cpus)
 * or:    rule_check --table TABLE_FILE BIND_TYPE TASK_CPUS
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "table.h"

static char *slurp_fd(int fd, size_t *len)
{
	size_t cap = 65536;
	char *buf = malloc(cap);
	ssize_t n;

	*len = 0;
	while (buf && (n = read(fd, buf + *len, cap - *len)) > 0) {
		*len += n;
		if (*len == cap) {
			char *x = realloc(buf, cap * 2);

			if (!x) {
				free(buf);
				return NULL;
			}
			buf = x;
			cap *= 2;
		}
	}
	return buf;
}

static char *slurp(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY);
	char *b;

	if (fd < 0) {
		fprintf(stderr, "rule_check: %s: %s\n", path, strerror(errno));
		exit(2);
	}
	b = slurp_fd(fd, len);
	close(fd);
	return b;
}

/* Run the engine in a child (like the plugin) and return its output. */
static char *engine_plan(const char *engine, const char *req, size_t *len)
{
	int p[2];
	pid_t pid;
	char *out;
	int st;

	if (pipe(p))
		exit(2);
	pid = fork();
	if (pid == 0) {
		void *h = dlopen(engine, RTLD_LAZY | RTLD_LOCAL);
		int (*run)(const char *, int);

		close(p[0]);
		if (!h) {
			fprintf(stderr, "rule_check: %s\n", dlerror());
			_exit(2);
		}
		run = (int (*)(const char *, int)) dlsym(h, "gpubind_engine_run");
		_exit(run && run(req, p[1]) == 0 ? 0 : 1);
	}
	close(p[1]);
	out = slurp_fd(p[0], len);
	close(p[0]);
	waitpid(pid, &st, 0);
	return out;
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		putchar(*s);
	}
	putchar('"');
}

int main(int argc, char **argv)
{
	struct gb_table t;
	char err[512], *text, *layout, *save, *tok;
	const char *type;
	size_t len;
	cpu_set_t masks[1024];
	int n = 0;
	char list[65536] = "";
	size_t off = 0;

	if (argc != 5) {
		fprintf(stderr, "usage: rule_check ENGINE REQUEST BIND_TYPE TASK_CPUS\n"
				"       rule_check --table TABLE BIND_TYPE TASK_CPUS\n");
		return 2;
	}
	if (!strcmp(argv[1], "--table")) {
		text = slurp(argv[2], &len);
	} else {
		size_t rl;
		char *req = slurp(argv[2], &rl);

		req = realloc(req, rl + 1);
		req[rl] = '\0';
		text = engine_plan(argv[1], req, &len);
	}
	if (!text || gb_table_parse(text, len, &t, err, sizeof(err))) {
		fprintf(stderr, "rule_check: %s\n", text ? err : "no plan");
		return 1;
	}
	if (t.status == GB_STATUS_ERROR) {
		for (int i = 0; i < t.nmessages; i++)
			fprintf(stderr, "rule_check: plan error: %s\n", t.messages[i]);
		return 1;
	}
	type = strcmp(argv[3], "none") ? argv[3] : NULL;
	layout = strdup(argv[4]);
	for (tok = strtok_r(layout, ";", &save); tok && n < 1024;
	     tok = strtok_r(NULL, ";", &save), n++) {
		if (gb_parse_cpulist(tok, &masks[n])) {
			fprintf(stderr, "rule_check: bad CPU list %s\n", tok);
			return 2;
		}
		/* The list Slurm writes for mask_cpu: hex masks, low 64 CPUs. */
		unsigned long long m = 0;

		for (int c = 0; c < 64; c++)
			if (CPU_ISSET(c, &masks[n]))
				m |= 1ULL << c;
		off += snprintf(list + off, sizeof(list) - off, "%s0x%llx",
				n ? "," : "", m);
	}
	for (int lid = 0; lid < t.ntasks; lid++) {
		struct gb_result r;
		const cpu_set_t *own = lid < n ? &masks[lid] : NULL;
		char cpus[4096] = "", env[8192];
		cpu_set_t shown;

		if (gb_rule_apply(&t, lid, type, type ? list : NULL, own, &r,
				  err, sizeof(err))) {
			fprintf(stderr, "rule_check: task %d: %s\n", lid, err);
			return 1;
		}
		printf("{\"task\":%d,\"visible\":\"", lid);
		for (int i = 0; i < r.ngpus; i++)
			printf("%s%s", i ? "," : "", t.gpus[r.gpus[i]].visible);
		printf("\",\"gpus\":[");
		for (int i = 0; i < r.ngpus; i++) {
			const struct gb_gpu *g = &t.gpus[r.gpus[i]];

			printf("%s{\"index\":%d,\"pci_bus_id\":", i ? "," : "", g->nvml);
			json_str(g->busid);
			printf(",\"uuid\":");
			json_str(g->uuid);
			printf(",\"numa\":%d}", g->numa);
		}
		/* The CPUs the task ends with, as the plugin sets them. */
		CPU_ZERO(&shown);
		if (own)
			shown = *own;
		if (r.set_cpus) {
			cpu_set_t in;

			CPU_AND(&in, &r.cpus, &shown);
			shown = !own ? r.cpus : CPU_COUNT(&in) ? in : *own;
		}
		if (CPU_COUNT(&shown))
			gb_format_cpulist(&shown, cpus, sizeof(cpus));
		printf("],\"cpus\":");
		json_str(cpus);
		printf(",\"env\":{");
		if (r.ngpus && gb_result_env(&t, &r, env, sizeof(env)) == 0) {
			int first = 1;

			for (char *p = env, *nl; *p; p = nl + 1) {
				char *eq = strchr(p, '=');

				nl = strchr(p, '\n');
				*nl = '\0';
				*eq = '\0';
				printf("%s", first ? "" : ",");
				json_str(p);
				putchar(':');
				json_str(eq + 1);
				first = 0;
			}
		}
		printf("},\"by_table\":%s}\n", r.by_table ? "true" : "false");
	}
	gb_table_free(&t);
	free(text);
	free(layout);
	return 0;
}
