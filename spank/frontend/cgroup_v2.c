/*
 * cgroup v2 backend: a BPF_PROG_TYPE_CGROUP_DEVICE program per task,
 * assembled by hand (like runc's devicefilter) and loaded with bpf(2).
 *
 * Why not github.com/cilium/ebpf: this code runs inside slurmstepd (and in
 * the clone(CLONE_VM) children of contain_spank), where no Go runtime may
 * live (DESIGN.md section 3). So it is plain C, and the program is a few
 * dozen instructions written out below.
 *
 * The problem it solves: Slurm attaches its job and step device programs
 * with BPF_F_ALLOW_OVERRIDE. A program attached in a cgroup below such a
 * parent does not add to the parent's program, it replaces it for that
 * subtree. A plain "deny other GPUs" program would therefore drop Slurm's
 * rules and open other jobs' GPUs. Our program instead
 *
 *   1. denies (returns 0) every NVIDIA GPU minor 195:0-253 that is not in
 *      the task's "minors" array map, and otherwise
 *   2. tail-calls the program that was in force for the task before
 *      (Slurm's step or task program, read from the kernel by id and put
 *      in a one-slot prog array), so that program decides everything else;
 *   3. denies when the tail call fails (empty slot): safe by default.
 *
 * So access = ours AND the previous one: the intersection, whatever
 * Slurm's rules are, without reading them back. Where nothing was in
 * force, or the nearest program sits in an ALLOW_MULTI cgroup (which keeps
 * running anyway), the slot holds a one-line "allow" program.
 *
 * Placement: a child cgroup of the task's cgroup, attached with
 * BPF_F_ALLOW_MULTI (programs attached below it can only narrow further).
 * When Slurm put an exclusive (flags=0) program on the task's own cgroup,
 * nothing can be attached below it; then ours replaces it there (same
 * flags, an atomic swap in the kernel), tail-calls it, and the original is
 * put back at cleanup. An exclusive program higher up covers other tasks
 * too: isolate is refused. After attaching, the effective program list is
 * read back and every program that was in force before must still be in
 * force or be our tail-call target; otherwise everything is undone and
 * isolate is refused.
 */
#include "cgroup_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define INSN(c, d, s, o, i)                                              \
	((struct bpf_insn){.code = (c), .dst_reg = (d), .src_reg = (s),   \
			   .off = (o), .imm = (i)})
#define MOV64_REG(d, s) INSN(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV64_IMM(d, i) INSN(BPF_ALU64 | BPF_MOV | BPF_K, d, 0, 0, i)
#define ADD64_IMM(d, i) INSN(BPF_ALU64 | BPF_ADD | BPF_K, d, 0, 0, i)
#define AND32_IMM(d, i) INSN(BPF_ALU | BPF_AND | BPF_K, d, 0, 0, i)
#define LDX_W(d, s, o) INSN(BPF_LDX | BPF_W | BPF_MEM, d, s, o, 0)
#define STX_W(d, s, o) INSN(BPF_STX | BPF_W | BPF_MEM, d, s, o, 0)
#define JMP_IMM(op, d, i, o) INSN(BPF_JMP | (op) | BPF_K, d, 0, o, i)
#define LD_MAP_FD1(d, fd) INSN(BPF_LD | BPF_DW | BPF_IMM, d, BPF_PSEUDO_MAP_FD, 0, fd)
#define LD_MAP_FD2 INSN(0, 0, 0, 0, 0)
#define CALL(f) INSN(BPF_JMP | BPF_CALL, 0, 0, 0, f)
#define EXIT INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)

#define MAX_QUERY 64

static long sys_bpf(int cmd, union bpf_attr *attr)
{
	return syscall(__NR_bpf, cmd, attr, sizeof(*attr));
}

static char verifier_log[16384];

static int load_prog(const struct bpf_insn *insns, unsigned n,
		     const char *name, char *err, size_t errlen)
{
	union bpf_attr a;
	int fd;

	memset(&a, 0, sizeof(a));
	a.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
	a.insns = (unsigned long)insns;
	a.insn_cnt = n;
	a.license = (unsigned long)"Dual MIT/GPL";
	snprintf(a.prog_name, sizeof(a.prog_name), "%s", name);
	fd = (int)sys_bpf(BPF_PROG_LOAD, &a);
	if (fd >= 0)
		return fd;
	/* Load again with the verifier's log, to say why. */
	verifier_log[0] = '\0';
	a.log_level = 1;
	a.log_buf = (unsigned long)verifier_log;
	a.log_size = sizeof(verifier_log);
	fd = (int)sys_bpf(BPF_PROG_LOAD, &a);
	if (fd >= 0)
		return fd;
	{
		int e = errno;
		size_t l = strlen(verifier_log);
		const char *last;

		while (l && verifier_log[l - 1] == '\n')
			verifier_log[--l] = '\0';
		last = strrchr(verifier_log, '\n');
		return gb_cg_errf(err, errlen, GB_CG_ERROR,
				  "isolate: loading BPF device program %s: %s%s%s",
				  name, strerror(e), l ? "; verifier: " : "",
				  last ? last + 1 : verifier_log);
	}
}

static int create_map(enum bpf_map_type type, unsigned entries,
		      const char *name, char *err, size_t errlen)
{
	union bpf_attr a;
	int fd;

	memset(&a, 0, sizeof(a));
	a.map_type = type;
	a.key_size = 4;
	a.value_size = 4;
	a.max_entries = entries;
	snprintf(a.map_name, sizeof(a.map_name), "%s", name);
	fd = (int)sys_bpf(BPF_MAP_CREATE, &a);
	if (fd < 0)
		return gb_cg_errf(err, errlen, GB_CG_ERROR,
				  "isolate: creating BPF map %s: %s", name,
				  strerror(errno));
	return fd;
}

static int map_update(int map_fd, uint32_t key, uint32_t value)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.map_fd = (uint32_t)map_fd;
	a.key = (unsigned long)&key;
	a.value = (unsigned long)&value;
	a.flags = BPF_ANY;
	return (int)sys_bpf(BPF_MAP_UPDATE_ELEM, &a);
}

/* No more writes from user space: the rules are fixed once applied. */
static int map_freeze(int map_fd)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.map_fd = (uint32_t)map_fd;
	if (sys_bpf(BPF_MAP_FREEZE, &a) == 0)
		return 0;
	/* Older kernels (< 5.2) or map types without freeze: not fatal. */
	return (errno == EINVAL || errno == EOPNOTSUPP || errno == 524) ? 0
									 : -1;
}

static int prog_fd_by_id(uint32_t id)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.prog_id = id;
	return (int)sys_bpf(BPF_PROG_GET_FD_BY_ID, &a);
}

static int attach(int cg_fd, int prog_fd, unsigned flags)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.target_fd = (uint32_t)cg_fd;
	a.attach_bpf_fd = (uint32_t)prog_fd;
	a.attach_type = BPF_CGROUP_DEVICE;
	a.attach_flags = flags;
	return (int)sys_bpf(BPF_PROG_ATTACH, &a);
}

static int detach(int cg_fd, int prog_fd)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.target_fd = (uint32_t)cg_fd;
	a.attach_bpf_fd = (uint32_t)prog_fd;
	a.attach_type = BPF_CGROUP_DEVICE;
	return (int)sys_bpf(BPF_PROG_DETACH, &a);
}

/* Programs attached at (effective = 0) or in force for (1) cgroup dir. */
static int query(const char *dir, int effective, uint32_t *ids,
		 uint32_t *cnt, uint32_t *flags, char *err, size_t errlen)
{
	union bpf_attr a;
	int fd, e;
	long rc;

	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return gb_cg_errf(err, errlen, GB_CG_ERROR, "open %s: %s", dir,
				  strerror(errno));
	memset(&a, 0, sizeof(a));
	a.query.target_fd = (uint32_t)fd;
	a.query.attach_type = BPF_CGROUP_DEVICE;
	a.query.query_flags = effective ? BPF_F_QUERY_EFFECTIVE : 0;
	a.query.prog_ids = (unsigned long)ids;
	a.query.prog_cnt = MAX_QUERY;
	rc = sys_bpf(BPF_PROG_QUERY, &a);
	e = errno;
	close(fd);
	if (rc < 0)
		return gb_cg_errf(err, errlen, GB_CG_ERROR,
				  "isolate: BPF_PROG_QUERY on %s: %s%s", dir,
				  strerror(e),
				  e == ENOSPC ? " (more than 64 programs)" : "");
	*cnt = a.query.prog_cnt;
	if (flags)
		*flags = a.query.attach_flags;
	return GB_CG_OK;
}

/*
 * Our program. R6 keeps the context across the helper calls (callee-saved).
 * Context: access_type (type in the low 16 bits), major, minor.
 */
static unsigned build_task_prog(struct bpf_insn *p, int minors_fd, int tail_fd)
{
	unsigned n = 0, j_type, j_major, j_minor, j_null, j_zero, tail, deny;

	p[n++] = MOV64_REG(BPF_REG_6, BPF_REG_1);
	p[n++] = LDX_W(BPF_REG_2, BPF_REG_6, 0);
	p[n++] = AND32_IMM(BPF_REG_2, 0xffff);
	j_type = n;
	p[n++] = JMP_IMM(BPF_JNE, BPF_REG_2, BPF_DEVCG_DEV_CHAR, 0);
	p[n++] = LDX_W(BPF_REG_3, BPF_REG_6, 4);
	j_major = n;
	p[n++] = JMP_IMM(BPF_JNE, BPF_REG_3, GB_CG_NVIDIA_MAJOR, 0);
	p[n++] = LDX_W(BPF_REG_4, BPF_REG_6, 8);
	j_minor = n;
	p[n++] = JMP_IMM(BPF_JGT, BPF_REG_4, GB_CG_MAX_GPU_MINOR, 0);
	/* A GPU minor: allowed only if minors[minor] != 0. */
	p[n++] = STX_W(BPF_REG_10, BPF_REG_4, -4);
	p[n++] = MOV64_REG(BPF_REG_2, BPF_REG_10);
	p[n++] = ADD64_IMM(BPF_REG_2, -4);
	p[n++] = LD_MAP_FD1(BPF_REG_1, minors_fd);
	p[n++] = LD_MAP_FD2;
	p[n++] = CALL(BPF_FUNC_map_lookup_elem);
	j_null = n;
	p[n++] = JMP_IMM(BPF_JEQ, BPF_REG_0, 0, 0);
	p[n++] = LDX_W(BPF_REG_0, BPF_REG_0, 0);
	j_zero = n;
	p[n++] = JMP_IMM(BPF_JEQ, BPF_REG_0, 0, 0);
	/* Everything else: the program that was in force decides. */
	tail = n;
	p[n++] = MOV64_REG(BPF_REG_1, BPF_REG_6);
	p[n++] = LD_MAP_FD1(BPF_REG_2, tail_fd);
	p[n++] = LD_MAP_FD2;
	p[n++] = MOV64_IMM(BPF_REG_3, 0);
	p[n++] = CALL(BPF_FUNC_tail_call);
	/* Tail call failed (empty slot): deny. */
	deny = n;
	p[n++] = MOV64_IMM(BPF_REG_0, 0);
	p[n++] = EXIT;
	p[j_type].off = (short)(tail - j_type - 1);
	p[j_major].off = (short)(tail - j_major - 1);
	p[j_minor].off = (short)(tail - j_minor - 1);
	p[j_null].off = (short)(deny - j_null - 1);
	p[j_zero].off = (short)(deny - j_zero - 1);
	return n;
}

int gb_cg_v2_prepare(struct gb_cg *cg, char *err, size_t errlen)
{
	struct bpf_insn allow[2] = {MOV64_IMM(BPF_REG_0, 1), EXIT};
	struct bpf_insn p[32];
	int i;

	cg->allow_fd = load_prog(allow, 2, "gpubind_allow", err, errlen);
	if (cg->allow_fd < 0)
		return GB_CG_ERROR;
	for (i = 0; i < cg->ntasks; i++) {
		struct gb_cg_task *t = &cg->tasks[i];
		unsigned n;

		t->minors_fd = create_map(BPF_MAP_TYPE_ARRAY, GB_CG_NMINORS,
					  "gpubind_minors", err, errlen);
		if (t->minors_fd < 0)
			return GB_CG_ERROR;
		t->tail_fd = create_map(BPF_MAP_TYPE_PROG_ARRAY, 1,
					"gpubind_tail", err, errlen);
		if (t->tail_fd < 0)
			return GB_CG_ERROR;
		n = build_task_prog(p, t->minors_fd, t->tail_fd);
		t->prog_fd = load_prog(p, n, "gpubind_dev", err, errlen);
		if (t->prog_fd < 0)
			return GB_CG_ERROR;
	}
	return GB_CG_OK;
}

void gb_cg_v2_close(struct gb_cg *cg)
{
	int i;

	if (!cg)
		return;
	if (cg->tasks) {
		for (i = 0; i < cg->ntasks; i++) {
			struct gb_cg_task *t = &cg->tasks[i];
			if (t->prog_fd >= 0)
				close(t->prog_fd);
			if (t->tail_fd >= 0)
				close(t->tail_fd);
			if (t->minors_fd >= 0)
				close(t->minors_fd);
			t->prog_fd = t->tail_fd = t->minors_fd = -1;
		}
	}
	if (cg->allow_fd >= 0)
		close(cg->allow_fd);
	cg->allow_fd = -1;
}

static int is_root_dir(const struct gb_cg *cg, const char *dir)
{
	return strcmp(dir, cg->unified.dir) == 0;
}

/* dir minus its last component, in place; 0 when there is none. */
static int up(char *dir)
{
	char *s = strrchr(dir, '/');

	if (!s || s == dir)
		return 0;
	*s = '\0';
	return 1;
}

/* dir is a Slurm task cgroup: its last component is task_<digits>. */
static int is_slurm_task_dir(const char *dir)
{
	const char *base = strrchr(dir, '/');

	base = base ? base + 1 : dir;
	if (strncmp(base, "task_", 5) || !base[5])
		return 0;
	for (base += 5; *base; base++)
		if (*base < '0' || *base > '9')
			return 0;
	return 1;
}

/* The only pid in dir's cgroup.procs is pid (a per-task cgroup). */
static int only_pid(const char *dir, pid_t pid, char *err, size_t errlen)
{
	char path[GB_CG_PATHLEN + 16], buf[4096], *s, *end;
	int rc;

	rc = gb_cg_join(path, sizeof(path), dir, "cgroup.procs", err, errlen);
	if (!rc)
		rc = gb_cg_read_file(path, buf, sizeof(buf), err, errlen);
	if (rc)
		return 0;
	for (s = buf; *s; s = end) {
		long v = strtol(s, &end, 10);
		if (end == s)
			break;
		if (v != (long)pid)
			return 0;
		while (*end == '\n')
			end++;
	}
	return 1;
}

struct nearest {
	char dir[GB_CG_PATHLEN];
	uint32_t flags;
	uint32_t cnt;
	uint32_t ids[MAX_QUERY];
};

/* The nearest cgroup at or above dir (up to the mount) with programs. */
static int find_nearest(const struct gb_cg *cg, const char *dir,
			struct nearest *n, char *err, size_t errlen)
{
	char cur[GB_CG_PATHLEN];
	int rc;

	snprintf(cur, sizeof(cur), "%s", dir);
	for (;;) {
		rc = query(cur, 0, n->ids, &n->cnt, &n->flags, err, errlen);
		if (rc)
			return rc;
		if (n->cnt > 0) {
			snprintf(n->dir, sizeof(n->dir), "%s", cur);
			return GB_CG_OK;
		}
		if (is_root_dir(cg, cur) || !up(cur))
			break;
	}
	n->dir[0] = '\0';
	n->cnt = 0;
	return GB_CG_OK;
}

static int contains(const uint32_t *ids, uint32_t cnt, uint32_t id)
{
	for (uint32_t i = 0; i < cnt; i++)
		if (ids[i] == id)
			return 1;
	return 0;
}

int gb_cg_v2_apply(struct gb_cg *cg, struct gb_cg_task *t, int local_id,
		   const char *name, pid_t pid, const unsigned char *allow,
		   const cpu_set_t *cpus, const cpu_set_t *mems, char *err,
		   size_t errlen)
{
	uint32_t before[MAX_QUERY], after[MAX_QUERY], nbefore = 0, nafter = 0;
	uint32_t target_id = 0;
	struct nearest near;
	int rc, target_fd = -1, cg_fd = -1, replace = 0, cpuset_ok;

	rc = gb_cg_pid_dir(pid, &cg->unified, NULL, t->v2_parent,
			   sizeof(t->v2_parent), err, errlen);
	if (rc)
		return rc;
	t->in_place = is_slurm_task_dir(t->v2_parent) &&
		      only_pid(t->v2_parent, pid, NULL, 0);
	if (t->in_place)
		t->v2_dir[0] = '\0';
	else if ((rc = gb_cg_join(t->v2_dir, sizeof(t->v2_dir), t->v2_parent,
				  name, err, errlen)))
		return rc;
	/* A cgroup has cpuset files only if its parent enables cpuset. */
	cpuset_ok = 0;
	if ((cpus || mems) && t->in_place) {
		char cf[GB_CG_PATHLEN + 32];

		rc = gb_cg_join(cf, sizeof(cf), t->v2_parent, "cpuset.cpus",
				err, errlen);
		if (rc)
			return rc;
		cpuset_ok = access(cf, W_OK) == 0;
		if (!cpuset_ok && !(cg->flags & GB_CG_ISOLATE))
			return gb_cg_errf(err, errlen, GB_CG_UNSUPPORTED,
					  "cpus: %s has no cpuset controller "
					  "(its parent does not enable cpuset in "
					  "cgroup.subtree_control; Slurm's "
					  "ConstrainCores=yes does); CPUs not "
					  "narrowed by cgroup", t->v2_parent);
	} else if (cpus || mems) {
		char sc[GB_CG_PATHLEN + 32], ctl[1024], *tok, *save = NULL;

		rc = gb_cg_join(sc, sizeof(sc), t->v2_parent,
				"cgroup.subtree_control", err, errlen);
		if (rc)
			return rc;
		if (gb_cg_read_file(sc, ctl, sizeof(ctl), NULL, 0) == GB_CG_OK)
			for (tok = strtok_r(ctl, " \n", &save); tok;
			     tok = strtok_r(NULL, " \n", &save))
				if (strcmp(tok, "cpuset") == 0)
					cpuset_ok = 1;
		if (!cpuset_ok && !(cg->flags & GB_CG_ISOLATE))
			return gb_cg_errf(err, errlen, GB_CG_UNSUPPORTED,
					  "cpus: the cpuset controller is not "
					  "enabled in %s/cgroup.subtree_control "
					  "(cgroup v2 allows that only where no "
					  "process lives); CPUs not narrowed by "
					  "cgroup", t->v2_parent);
	}

	if (cg->flags & GB_CG_ISOLATE) {
		if (t->prog_fd < 0)
			return gb_cg_errf(err, errlen, GB_CG_ERROR,
					  "isolate: task %d has no prepared "
					  "program", local_id);
		rc = query(t->v2_parent, 1, before, &nbefore, NULL, err,
			   errlen);
		if (rc)
			return rc;
		rc = find_nearest(cg, t->v2_parent, &near, err, errlen);
		if (rc)
			return rc;
		if (near.cnt == 0 && nbefore > 0)
			return gb_cg_errf(err, errlen, GB_CG_REFUSED,
					  "isolate: %d device program(s) "
					  "apply to %s from above the mounted "
					  "cgroup2 tree at %s; cannot keep "
					  "them", (int)nbefore, t->v2_parent,
					  cg->unified.dir);
		if (near.cnt > 0 && !(near.flags & BPF_F_ALLOW_MULTI)) {
			/* Overridable or exclusive: that one is replaced
			 * for our subtree, so we must tail-call it. */
			if (near.cnt != 1)
				return gb_cg_errf(err, errlen, GB_CG_REFUSED,
						  "isolate: %s has %u device "
						  "programs without "
						  "ALLOW_MULTI", near.dir,
						  near.cnt);
			target_id = near.ids[0];
			if (!(near.flags & BPF_F_ALLOW_OVERRIDE)) {
				if (strcmp(near.dir, t->v2_parent) != 0 ||
				    !only_pid(t->v2_parent, pid, NULL, 0))
					return gb_cg_errf(
						err, errlen, GB_CG_REFUSED,
						"isolate: %s has an exclusive "
						"device program (attach "
						"flags 0) that also covers "
						"other processes; nothing can "
						"be attached below it and it "
						"cannot be replaced for this "
						"task alone", near.dir);
				replace = 1;
			}
			target_fd = prog_fd_by_id(target_id);
			if (target_fd < 0)
				return gb_cg_errf(err, errlen, GB_CG_ERROR,
						  "isolate: BPF program id %u "
						  "on %s: %s", target_id,
						  near.dir, strerror(errno));
		}
		for (uint32_t m = 0; m < GB_CG_NMINORS; m++) {
			if (allow[m] && map_update(t->minors_fd, m, 1) < 0) {
				rc = gb_cg_errf(err, errlen, GB_CG_ERROR,
						"isolate: BPF map update: %s",
						strerror(errno));
				goto out;
			}
		}
		if (map_update(t->tail_fd, 0,
			       (uint32_t)(target_fd >= 0 ? target_fd
							 : cg->allow_fd)) <
		    0) {
			rc = gb_cg_errf(err, errlen, GB_CG_ERROR,
					"isolate: BPF prog array update "
					"(program id %u): %s", target_id,
					strerror(errno));
			goto out;
		}
		if (map_freeze(t->minors_fd) < 0 ||
		    map_freeze(t->tail_fd) < 0) {
			rc = gb_cg_errf(err, errlen, GB_CG_ERROR,
					"isolate: BPF_MAP_FREEZE: %s",
					strerror(errno));
			goto out;
		}
	}

	if (!t->in_place) {
		rc = gb_cg_mkdir_fresh(t->v2_dir, err, errlen);
		if (rc) {
			t->v2_dir[0] = '\0';
			goto out;
		}
	}
	t->applied = 1;

	if (cg->flags & GB_CG_ISOLATE) {
		const char *at = (replace || t->in_place) ? t->v2_parent
							  : t->v2_dir;
		const char *check = at;

		cg_fd = open(at, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (cg_fd < 0) {
			rc = gb_cg_errf(err, errlen, GB_CG_ERROR, "open %s: %s",
					at, strerror(errno));
			goto out;
		}
		if (attach(cg_fd, t->prog_fd,
			   replace ? 0 : BPF_F_ALLOW_MULTI) < 0) {
			/* Nothing of ours is attached: no detach at cleanup. */
			if (t->in_place)
				t->applied = 0;
			rc = gb_cg_errf(err, errlen,
					errno == EPERM ? GB_CG_REFUSED
						       : GB_CG_ERROR,
					"isolate: attaching the device program "
					"to %s: %s", at, strerror(errno));
			goto out;
		}
		if (replace) {
			t->replaced = 1;
			t->replaced_id = target_id;
		}
		t->attached = 1;
		/* Post-condition: all that was in force still is, or is
		 * our tail-call target. Otherwise undo and refuse. */
		rc = query(check, 1, after, &nafter, NULL, err, errlen);
		if (rc == GB_CG_OK) {
			for (uint32_t i = 0; i < nbefore; i++) {
				if (contains(after, nafter, before[i]) ||
				    (target_id && before[i] == target_id))
					continue;
				rc = gb_cg_errf(err, errlen, GB_CG_REFUSED,
						"isolate: after attaching to "
						"%s, device program id %u that "
						"applied to %s no longer "
						"applies; undone", at,
						before[i], t->v2_parent);
				break;
			}
		}
		if (rc != GB_CG_OK) {
			/* Undo; if that fails, cleanup's rmdir/restore does. */
			if (!replace) {
				if (detach(cg_fd, t->prog_fd) == 0)
					t->attached = 0;
			} else if (attach(cg_fd, target_fd, 0) == 0) {
				t->replaced = 0;
				t->attached = 0;
			}
			goto out;
		}
	}

	if (cpuset_ok) {
		char pc[GB_CG_PATHLEN + 32], pm[GB_CG_PATHLEN + 32];

		/* In place: within what task_N has; else within the parent. */
		if ((rc = gb_cg_join(pc, sizeof(pc), t->v2_parent,
				     "cpuset.cpus.effective", err, errlen)) ||
		    (rc = gb_cg_join(pm, sizeof(pm), t->v2_parent,
				     "cpuset.mems.effective", err, errlen)) ||
		    (rc = gb_cg_narrow_cpuset(t->in_place ? t->v2_parent
							  : t->v2_dir,
					      pc, pm, cpus, mems, err, errlen)))
			goto out;
	}
	if (!t->in_place) {
		rc = gb_cg_move_pid(t->v2_dir, pid, err, errlen);
		if (rc)
			goto out;
	}
	if ((cpus || mems) && !cpuset_ok)
		rc = gb_cg_errf(err, errlen, GB_CG_UNSUPPORTED,
				"cpus: the cpuset controller is not enabled "
				"in %s/cgroup.subtree_control (cgroup v2 "
				"allows that only where no process lives); "
				"CPUs not narrowed by cgroup", t->v2_parent);
out:
	if (cg_fd >= 0)
		close(cg_fd);
	if (target_fd >= 0)
		close(target_fd);
	return rc;
}

int gb_cg_v2_cleanup(struct gb_cg *cg, struct gb_cg_task *t, char *err,
		     size_t errlen)
{
	(void)cg;
	/* In place, a program of ours that replaced none: detach it. Slurm
	 * may have removed task_N already (ENOENT), which detaches it too. */
	if (t->in_place && t->attached && !t->replaced) {
		int cfd = open(t->v2_parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (cfd < 0 && errno != ENOENT)
			return gb_cg_errf(err, errlen, GB_CG_ERROR,
					  "open %s: %s", t->v2_parent,
					  strerror(errno));
		if (cfd >= 0) {
			int e = detach(cfd, t->prog_fd) ? errno : 0;

			close(cfd);
			if (e && e != ENOENT)
				return gb_cg_errf(err, errlen, GB_CG_ERROR,
						  "detaching the device program "
						  "from %s: %s", t->v2_parent,
						  strerror(e));
		}
		t->attached = 0;
	}
	/* rmdir also detaches what is attached there. */
	if (t->v2_dir[0]) {
		if (gb_cg_rmdir(t->v2_dir, err, errlen) != GB_CG_OK)
			return GB_CG_ERROR;
		t->v2_dir[0] = '\0';
	}
	if (t->replaced) {
		int pfd, cfd, rc = GB_CG_OK;

		cfd = open(t->v2_parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (cfd < 0) {
			if (errno == ENOENT) {  /* Slurm removed it already */
				t->replaced = 0;
				return GB_CG_OK;
			}
			return gb_cg_errf(err, errlen, GB_CG_ERROR,
					  "open %s: %s", t->v2_parent,
					  strerror(errno));
		}
		pfd = prog_fd_by_id(t->replaced_id);
		if (pfd < 0) {
			rc = gb_cg_errf(err, errlen, GB_CG_ERROR,
					"restoring device program id %u on "
					"%s: %s", t->replaced_id,
					t->v2_parent, strerror(errno));
		} else {
			if (attach(cfd, pfd, 0) < 0)
				rc = gb_cg_errf(err, errlen, GB_CG_ERROR,
						"restoring device program id "
						"%u on %s: %s", t->replaced_id,
						t->v2_parent, strerror(errno));
			close(pfd);
		}
		close(cfd);
		if (rc)
			return rc;
		t->replaced = 0;
	}
	return GB_CG_OK;
}
