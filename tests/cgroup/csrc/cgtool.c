/*
 * cgtool: drives the plugin's cgroup code (spank/frontend/cgroup/) the way
 * slurmstepd does, on real cgroups, for tests/cgroup (Go) and
 * tests/gpu/cgroup_gpu.sh. Needs root for everything but "probe".
 *
 *   cgtool task [options] -- CMD ARGS...
 *       gb_cg_prepare; fork a child that blocks on a pipe (like a Slurm
 *       task before exec); optionally move it into "Slurm's" cgroups;
 *       gb_cg_apply (in the parent, or in a clone(CLONE_VM) child with
 *       --clone-vm, like contain_spank); unblock; the child execs CMD; wait;
 *       gb_cg_task_exit; gb_cg_fini. Prints "apply rc=N ...", "path P",
 *       "exit N", "cleanup rc=N ...".
 *       --version 0|1|2 --job J --step S --task T --ntasks N
 *       --isolate --cpus-flag --step-minors 0,1 --minors 0 --cpus 0-1
 *       --mems 0 --mig --slurm-v2 DIR --slurm-v1-devices DIR
 *       --slurm-v1-cpuset DIR --clone-vm --mountinfo FILE
 *   cgtool probe DEVDIR MINOR...
 *       open DEVDIR/nvidiaN for each: prints "nvidiaN ENXIO|EPERM|OK|E..."
 *       and "affinity LIST" (sched_getaffinity).
 *   cgtool slurmprog DIR override|none|multi DENYMINORS
 *       attach a Slurm-like device program (allow all, deny c 195:M for
 *       each listed minor) to cgroup DIR; prints "id N".
 *   cgtool query DIR        ids of programs attached at DIR, with flags
 *   cgtool progs            every BPF program and map id: "prog ID" /
 *                           "map ID" (leftover checks; opens nothing)
 *   cgtool prognames        every BPF program: "prog ID NAME"
 *   cgtool describe [MOUNTINFO]   the hierarchies the plugin would use
 *   cgtool access DIR       minors of DIR/nvidiaN that access(2) allows: "access m,m"
 */
#include "cgroup.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long sys_bpf(int cmd, union bpf_attr *a)
{
	return syscall(__NR_bpf, cmd, a, sizeof(*a));
}

static void die(const char *fmt, const char *arg)
{
	fprintf(stderr, "gpubind: cgtool: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	exit(2);
}

static int parse_ints(const char *s, int *out, int max)
{
	int n = 0;
	char *end;

	if (!*s || strcmp(s, "-") == 0)
		return 0;
	for (;;) {
		long v = strtol(s, &end, 10);
		if (end == s || n >= max)
			die("bad number list \"%s\"", s);
		out[n++] = (int)v;
		if (*end == '\0')
			return n;
		if (*end != ',')
			die("bad number list \"%s\"", s);
		s = end + 1;
	}
}

static int parse_set(const char *s, cpu_set_t *set)
{
	int v[1024], n = 0, i;
	const char *p = s;

	CPU_ZERO(set);
	/* ranges "0-3,8" */
	while (*p) {
		char *end;
		long a = strtol(p, &end, 10), b;
		if (end == p)
			die("bad list \"%s\"", s);
		b = a;
		if (*end == '-') {
			p = end + 1;
			b = strtol(p, &end, 10);
			if (end == p)
				die("bad list \"%s\"", s);
		}
		for (; a <= b && n < 1024; a++)
			v[n++] = (int)a;
		p = end;
		if (*p == ',')
			p++;
		else if (*p)
			die("bad list \"%s\"", s);
	}
	for (i = 0; i < n; i++)
		CPU_SET(v[i], set);
	return 0;
}

static int write_pid(const char *dir, pid_t pid)
{
	char path[2048], text[32];
	int fd, n;

	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	n = snprintf(text, sizeof(text), "%ld", (long)pid);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, text, (size_t)n) != n) {
		fprintf(stderr, "gpubind: cgtool: move %ld to %s: %s\n",
			(long)pid, path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

struct apply_args {
	struct gb_cg *cg;
	int task;
	pid_t pid;
	int *minors;
	int nminors;
	cpu_set_t *cpus, *mems;
	int rc;
	char err[1024];
};

static int do_apply(void *p)
{
	struct apply_args *a = p;

	a->rc = gb_cg_apply(a->cg, a->task, a->pid, a->minors, a->nminors,
			    a->cpus, a->mems, a->err, sizeof(a->err));
	return 0;
}

static long now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}

/* "bpf prog ID" / "bpf map ID" for an fd (nothing for -1). */
static void print_obj(const char *kind, int fd)
{
	union bpf_attr a;
	struct bpf_prog_info pi;
	struct bpf_map_info mi;

	if (fd < 0)
		return;
	memset(&a, 0, sizeof(a));
	a.info.bpf_fd = (unsigned)fd;
	if (kind[0] == 'p') {
		memset(&pi, 0, sizeof(pi));
		a.info.info_len = sizeof(pi);
		a.info.info = (unsigned long)&pi;
	} else {
		memset(&mi, 0, sizeof(mi));
		a.info.info_len = sizeof(mi);
		a.info.info = (unsigned long)&mi;
	}
	if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &a) < 0)
		die("BPF_OBJ_GET_INFO_BY_FD: %s", strerror(errno));
	printf("bpf %s %u\n", kind, kind[0] == 'p' ? pi.id : mi.id);
}

struct exit_args {
	struct gb_cg *cg;
	int task, rc;
	char *err;
};

static int do_exit(void *p)
{
	struct exit_args *x = p;

	x->rc = gb_cg_task_exit(x->cg, x->task, x->err, 1024);
	return 0;
}

static int cmd_task(int argc, char **argv)
{
	struct gb_cg_config cfg;
	struct gb_cg *cg = NULL;
	int step_minors[256], minors[256], nminors = 0, i, pfd[2], status;
	int clone_vm = 0, rc;
	cpu_set_t cpus, mems;
	int have_cpus = 0, have_mems = 0;
	const char *slurm_v2 = NULL, *slurm_dev = NULL, *slurm_cpuset = NULL;
	char err[1024], c = 'x';
	struct apply_args a;
	pid_t pid;
	long t0, t_prep, t_apply, t_exit;

	memset(&cfg, 0, sizeof(cfg));
	memset(&a, 0, sizeof(a));
	cfg.job_id = 1;
	cfg.ntasks = 1;
	cfg.step_minors = step_minors;
	for (i = 2; i < argc; i++) {
		const char *o = argv[i], *v = (i + 1 < argc) ? argv[i + 1] : NULL;
		if (strcmp(o, "--") == 0) {
			i++;
			break;
		}
		if (strcmp(o, "--isolate") == 0) {
			cfg.flags |= GB_CG_ISOLATE;
			continue;
		}
		if (strcmp(o, "--cpus-flag") == 0) {
			cfg.flags |= GB_CG_CPUS;
			continue;
		}
		if (strcmp(o, "--mig") == 0) {
			cfg.mig = 1;
			continue;
		}
		if (strcmp(o, "--amd") == 0) {
			cfg.amd = 1;  /* minors are DRM (226) render and card minors */
			continue;
		}
		if (strcmp(o, "--clone-vm") == 0) {
			clone_vm = 1;
			continue;
		}
		if (!v)
			die("option %s needs a value", o);
		i++;
		if (strcmp(o, "--version") == 0)
			cfg.version = atoi(v);
		else if (strcmp(o, "--job") == 0)
			cfg.job_id = (uint32_t)strtoul(v, NULL, 10);
		else if (strcmp(o, "--step") == 0)
			cfg.step_id = (uint32_t)strtoul(v, NULL, 10);
		else if (strcmp(o, "--ntasks") == 0)
			cfg.ntasks = atoi(v);
		else if (strcmp(o, "--task") == 0)
			a.task = atoi(v);
		else if (strcmp(o, "--step-minors") == 0)
			cfg.nstep_minors = parse_ints(v, step_minors, 256);
		else if (strcmp(o, "--minors") == 0)
			nminors = parse_ints(v, minors, 256);
		else if (strcmp(o, "--cpus") == 0)
			have_cpus = !parse_set(v, &cpus);
		else if (strcmp(o, "--mems") == 0)
			have_mems = !parse_set(v, &mems);
		else if (strcmp(o, "--slurm-v2") == 0)
			slurm_v2 = v;
		else if (strcmp(o, "--slurm-v1-devices") == 0)
			slurm_dev = v;
		else if (strcmp(o, "--slurm-v1-cpuset") == 0)
			slurm_cpuset = v;
		else if (strcmp(o, "--mountinfo") == 0)
			cfg.mountinfo = v;
		else
			die("unknown option %s", o);
	}
	if (i >= argc)
		die("%s", "task: missing -- CMD");

	t0 = now_us();
	rc = gb_cg_prepare(&cg, &cfg, err, sizeof(err));
	t_prep = now_us() - t0;
	printf("prepare rc=%d %s\n", rc, rc ? err : gb_cg_describe(cg));
	if (rc)
		return 0;
	/* The BPF objects prepare made, for the tests' leftover checks. */
	print_obj("prog", cg->allow_fd);
	for (int k = 0; k < cg->ntasks; k++) {
		print_obj("prog", cg->tasks[k].prog_fd);
		print_obj("map", cg->tasks[k].minors_fd);
		print_obj("map", cg->tasks[k].tail_fd);
	}
	fflush(stdout);

	if (pipe2(pfd, O_CLOEXEC) < 0)
		die("pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		/* A Slurm task: wait for the parent, then exec. */
		close(pfd[1]);
		if (read(pfd[0], &c, 1) != 1)
			_exit(100);
		execvp(argv[i], argv + i);
		fprintf(stderr, "gpubind: cgtool: exec %s: %s\n", argv[i],
			strerror(errno));
		_exit(101);
	}
	close(pfd[0]);
	/* "Slurm" moves the task into its task cgroups first. */
	if ((slurm_v2 && write_pid(slurm_v2, pid) < 0) ||
	    (slurm_dev && write_pid(slurm_dev, pid) < 0) ||
	    (slurm_cpuset && write_pid(slurm_cpuset, pid) < 0)) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return 1;
	}
	a.cg = cg;
	a.pid = pid;
	a.minors = minors;
	a.nminors = nminors;
	a.cpus = have_cpus ? &cpus : NULL;
	a.mems = have_mems ? &mems : NULL;
	a.err[0] = '\0';
	t0 = now_us();
	if (clone_vm) {
		/* contain_spank: task_post_fork runs in a clone(CLONE_VM) child. */
		static char stack[256 * 1024];
		pid_t cp = clone(do_apply, stack + sizeof(stack),
				 CLONE_VM | SIGCHLD, &a);
		if (cp < 0 || waitpid(cp, &status, 0) != cp)
			die("clone: %s", strerror(errno));
	} else {
		do_apply(&a);
	}
	t_apply = now_us() - t0;
	printf("apply rc=%d %s\n", a.rc, a.err);
	printf("path %s\n", gb_cg_task_path(cg, a.task));
	for (int k = 0; k < cg->ntasks; k++) {
		const struct gb_cg_task *tk = &cg->tasks[k];
		const char *d[3] = {tk->dev_dir, tk->cpuset_dir, tk->v2_dir};
		for (int j = 0; j < 3; j++)
			if (tk->applied && d[j][0])
				printf("dir %s\n", d[j]);
	}
	fflush(stdout);
	if (write(pfd[1], &c, 1) != 1)
		die("unblock: %s", strerror(errno));
	close(pfd[1]);
	if (waitpid(pid, &status, 0) != pid)
		die("waitpid: %s", strerror(errno));
	printf("exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status)
					      : 128 + WTERMSIG(status));
	err[0] = '\0';
	t0 = now_us();
	if (clone_vm) {
		static char stack2[256 * 1024];
		struct exit_args x = {cg, a.task, 0, err};
		pid_t cp = clone(do_exit, stack2 + sizeof(stack2),
				 CLONE_VM | SIGCHLD, &x);
		if (cp < 0 || waitpid(cp, &status, 0) != cp)
			die("clone: %s", strerror(errno));
		rc = x.rc;
	} else {
		rc = gb_cg_task_exit(cg, a.task, err, sizeof(err));
	}
	t_exit = now_us() - t0;
	printf("cleanup rc=%d %s\n", rc, err);
	rc = gb_cg_fini(cg, err, sizeof(err));
	printf("fini rc=%d %s\n", rc, err);
	printf("timing prepare_us=%ld apply_us=%ld exit_us=%ld\n", t_prep,
	       t_apply, t_exit);
	return 0;
}

static int cmd_probe(int argc, char **argv)
{
	cpu_set_t set;
	int i;

	for (i = 3; i < argc; i++) {
		char path[4096];
		int fd;
		const char *name = argv[i];

		if (strchr(name, '/'))
			snprintf(path, sizeof(path), "%s", name);
		else if (name[0] >= '0' && name[0] <= '9')
			snprintf(path, sizeof(path), "%s/nvidia%s", argv[2],
				 name);
		else
			snprintf(path, sizeof(path), "%s/%s", argv[2], name);
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd >= 0) {
			printf("%s OK\n", name);
			close(fd);
		} else if (errno == ENXIO || errno == ENODEV) {
			printf("%s ENXIO\n", name);
		} else if (errno == EPERM) {
			printf("%s EPERM\n", name);
		} else {
			printf("%s E%d\n", name, errno);
		}
	}
	if (sched_getaffinity(0, sizeof(set), &set) == 0) {
		int first = 1;
		printf("affinity ");
		for (i = 0; i < CPU_SETSIZE; i++)
			if (CPU_ISSET(i, &set)) {
				printf("%s%d", first ? "" : ",", i);
				first = 0;
			}
		printf("\n");
	}
	return 0;
}

#define INSN(c, d, s, o, i)                                              \
	((struct bpf_insn){.code = (c), .dst_reg = (d), .src_reg = (s),   \
			   .off = (o), .imm = (i)})

/* A program like Slurm's: allow everything but the listed GPU minors. */
static int cmd_slurmprog(int argc, char **argv)
{
	struct bpf_insn p[300];
	int deny[256], nd, n = 0, i, fd, cgfd;
	unsigned flags;
	union bpf_attr a;
	struct bpf_prog_info info;
	int jt[260], nj = 0;

	if (argc < 5)
		die("%s", "slurmprog DIR override|none|multi MINORS");
	if (strcmp(argv[3], "override") == 0)
		flags = BPF_F_ALLOW_OVERRIDE;
	else if (strcmp(argv[3], "multi") == 0)
		flags = BPF_F_ALLOW_MULTI;
	else if (strcmp(argv[3], "none") == 0)
		flags = 0;
	else
		die("bad flags %s", argv[3]);
	nd = parse_ints(argv[4], deny, 256);
	p[n++] = INSN(BPF_LDX | BPF_W | BPF_MEM, 2, 1, 0, 0);
	p[n++] = INSN(BPF_ALU | BPF_AND | BPF_K, 2, 0, 0, 0xffff);
	jt[nj++] = n;
	p[n++] = INSN(BPF_JMP | BPF_JNE | BPF_K, 2, 0, 0, BPF_DEVCG_DEV_CHAR);
	p[n++] = INSN(BPF_LDX | BPF_W | BPF_MEM, 3, 1, 4, 0);
	jt[nj++] = n;
	p[n++] = INSN(BPF_JMP | BPF_JNE | BPF_K, 3, 0, 0, 195);
	p[n++] = INSN(BPF_LDX | BPF_W | BPF_MEM, 4, 1, 8, 0);
	for (i = 0; i < nd; i++) {
		/* if minor == deny[i]: r0 = 0; exit */
		p[n++] = INSN(BPF_JMP | BPF_JNE | BPF_K, 4, 0, 2, deny[i]);
		p[n++] = INSN(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0);
		p[n++] = INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
	}
	for (i = 0; i < nj; i++)
		p[jt[i]].off = (short)(n - jt[i] - 1);
	p[n++] = INSN(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 1);
	p[n++] = INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);

	memset(&a, 0, sizeof(a));
	a.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
	a.insns = (unsigned long)p;
	a.insn_cnt = (unsigned)n;
	a.license = (unsigned long)"Dual MIT/GPL";
	snprintf(a.prog_name, sizeof(a.prog_name), "slurm_emul");
	fd = (int)sys_bpf(BPF_PROG_LOAD, &a);
	if (fd < 0)
		die("load: %s", strerror(errno));
	cgfd = open(argv[2], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cgfd < 0)
		die("open: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.target_fd = (unsigned)cgfd;
	a.attach_bpf_fd = (unsigned)fd;
	a.attach_type = BPF_CGROUP_DEVICE;
	a.attach_flags = flags;
	if (sys_bpf(BPF_PROG_ATTACH, &a) < 0)
		die("attach: %s", strerror(errno));
	memset(&info, 0, sizeof(info));
	memset(&a, 0, sizeof(a));
	a.info.bpf_fd = (unsigned)fd;
	a.info.info_len = sizeof(info);
	a.info.info = (unsigned long)&info;
	if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &a) < 0)
		die("info: %s", strerror(errno));
	printf("id %u\n", info.id);
	return 0;
}

static int cmd_query(int argc, char **argv)
{
	union bpf_attr a;
	uint32_t ids[64];
	int fd;

	if (argc < 3)
		die("%s", "query DIR");
	fd = open(argv[2], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		die("open: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.query.target_fd = (unsigned)fd;
	a.query.attach_type = BPF_CGROUP_DEVICE;
	a.query.prog_ids = (unsigned long)ids;
	a.query.prog_cnt = 64;
	if (sys_bpf(BPF_PROG_QUERY, &a) < 0)
		die("query: %s", strerror(errno));
	printf("flags %u\n", a.query.attach_flags);
	for (unsigned i = 0; i < a.query.prog_cnt; i++)
		printf("id %u\n", ids[i]);
	return 0;
}

/*
 * Every BPF program and map id, from BPF_{PROG,MAP}_GET_NEXT_ID only. It never opens
 * an object: an fd taken by id on a prog array that is being released can leak the map
 * (prog_array_map_clear takes a reference and schedule_work()s; a second release while
 * the work is pending loses that reference). bpftool map show does open them.
 */
static int cmd_progs(void)
{
	union bpf_attr a;
	uint32_t id;
	int cmds[2] = {BPF_PROG_GET_NEXT_ID, BPF_MAP_GET_NEXT_ID};
	const char *kind[2] = {"prog", "map"};

	for (int k = 0; k < 2; k++) {
		id = 0;
		for (;;) {
			memset(&a, 0, sizeof(a));
			a.start_id = id;
			if (sys_bpf(cmds[k], &a) < 0) {
				if (errno != ENOENT)
					die("GET_NEXT_ID: %s", strerror(errno));
				break;
			}
			id = a.next_id;
			printf("%s %u\n", kind[k], id);
		}
	}
	return 0;
}

/* "prog ID NAME" for every loaded BPF program: finds the plugin's by name. */
static int cmd_prognames(void)
{
	union bpf_attr a;
	uint32_t id = 0;

	for (;;) {
		struct bpf_prog_info info;
		int fd;

		memset(&a, 0, sizeof(a));
		a.start_id = id;
		if (sys_bpf(BPF_PROG_GET_NEXT_ID, &a) < 0) {
			if (errno != ENOENT)
				die("GET_NEXT_ID: %s", strerror(errno));
			break;
		}
		id = a.next_id;
		memset(&a, 0, sizeof(a));
		a.prog_id = id;
		fd = (int)sys_bpf(BPF_PROG_GET_FD_BY_ID, &a);
		if (fd < 0)
			continue; /* gone meanwhile */
		memset(&info, 0, sizeof(info));
		memset(&a, 0, sizeof(a));
		a.info.bpf_fd = (uint32_t)fd;
		a.info.info_len = sizeof(info);
		a.info.info = (unsigned long)&info;
		if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &a) == 0)
			printf("prog %u %s\n", id, info.name[0] ? info.name : "-");
		close(fd);
	}
	return 0;
}

static int cmd_describe(int argc, char **argv)
{
	struct gb_cg_config cfg;
	struct gb_cg *cg;
	char err[1024];
	int rc;

	memset(&cfg, 0, sizeof(cfg));
	cfg.ntasks = 1;
	cfg.flags = GB_CG_CPUS;  /* no BPF load */
	cfg.mountinfo = argc > 2 ? argv[2] : NULL;
	for (int v = 1; v <= 2; v++) {
		cfg.version = v;
		rc = gb_cg_prepare(&cg, &cfg, err, sizeof(err));
		printf("v%d rc=%d %s\n", v, rc, rc ? err : gb_cg_describe(cg));
		gb_cg_fini(cg, err, sizeof(err));
	}
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		die("%s", "usage: cgtool task|probe|slurmprog|query|progs|describe ...");
	if (strcmp(argv[1], "task") == 0)
		return cmd_task(argc, argv);
	if (strcmp(argv[1], "probe") == 0 && argc >= 3)
		return cmd_probe(argc, argv);
	if (strcmp(argv[1], "slurmprog") == 0)
		return cmd_slurmprog(argc, argv);
	if (strcmp(argv[1], "query") == 0)
		return cmd_query(argc, argv);
	if (strcmp(argv[1], "progs") == 0)
		return cmd_progs();
	if (strcmp(argv[1], "prognames") == 0)
		return cmd_prognames();
	if (strcmp(argv[1], "describe") == 0)
		return cmd_describe(argc, argv);
	if (strcmp(argv[1], "access") == 0 && argc == 3) {
		/* What a task child learns in task_init (gb_result_restrict):
		 * access(2) on each nvidiaN of DIR asks the device cgroup. */
		char p[4096];
		int first = 1;

		printf("access");
		for (int m = 0; m < 256; m++) {
			snprintf(p, sizeof(p), "%s/nvidia%d", argv[2], m);
			if (access(p, F_OK) == 0 && access(p, R_OK | W_OK) == 0) {
				printf("%s%d", first ? " " : ",", m);
				first = 0;
			}
		}
		printf("\n");
		return 0;
	}
	die("unknown command %s", argv[1]);
	return 2;
}
