/*
 * cgroup v2 backend: a BPF_PROG_TYPE_CGROUP_DEVICE program per task. In
 * three layers, like runc's device filter:
 *   v2_prog.c  builds the program (pure; golden-tested listing);
 *   v2_bpf.c   bpf(2): load, maps, attach/detach, query;
 *   v2.c       this file: the policy, i.e. where the program goes, what it
 *              tail-calls, and the checks before and after.
 *
 * Why not github.com/cilium/ebpf: this code runs inside slurmstepd (and in
 * the clone(CLONE_VM) children of contain_spank), where no Go runtime may
 * live (docs/admin.md, "Why two libraries"). So it is plain C, and the
 * program is a few dozen instructions.
 *
 * The problem it solves: Slurm attaches its job and step device programs
 * with BPF_F_ALLOW_OVERRIDE. A program attached in a cgroup below such a
 * parent does not add to the parent's program, it replaces it for that
 * subtree. A plain "deny other GPUs" program would therefore drop Slurm's
 * rules and open other jobs' GPUs. Our program instead
 *
 *   1. denies (returns 0) every NVIDIA GPU minor 195:0-253 that is not in
 *      the task's "minors" array map (AMD: every DRM minor 226:0-255 not
 *      in it, and the map holds all of them but the step's other GPUs'
 *      render and card minors), and otherwise
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
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- prepare and close: load the programs before fork ------------------ */

static int load_built(const struct gb_devprog *p, int built, const char *name,
		      char *err, size_t errlen)
{
	if (built < 0)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "isolate: building BPF device program %s: "
			       "does not fit (%u instructions)", name, p->n);
	return gb_bpf_prog_load(p, name, err, errlen);
}

/* Only isolate needs programs; cpus alone writes cpuset files in apply. */
static int v2_prepare(struct gb_cg *cg, char *err, size_t errlen)
{
	struct gb_devprog p;
	int i;

	if (!(cg->flags & GB_CG_ISOLATE))
		return GB_CG_OK;
	cg->allow_fd = load_built(&p, gb_devprog_allow_all(&p), "gpubind_allow",
				  err, errlen);
	if (cg->allow_fd < 0)
		return GB_CG_ERROR;
	for (i = 0; i < cg->ntasks; i++) {
		struct gb_cg_task *t = &cg->tasks[i];
		struct gb_devprog_spec spec = {
			.major = cg->major,
			.max_minor = cg->max_minor,
		};

		t->minors_fd = gb_bpf_map_create(BPF_MAP_TYPE_ARRAY,
						 cg->max_minor + 1,
						 "gpubind_minors", err, errlen);
		if (t->minors_fd < 0)
			return GB_CG_ERROR;
		t->tail_fd = gb_bpf_map_create(BPF_MAP_TYPE_PROG_ARRAY, 1,
					       "gpubind_tail", err, errlen);
		if (t->tail_fd < 0)
			return GB_CG_ERROR;
		spec.minors_map = t->minors_fd;
		spec.tail_map = t->tail_fd;
		t->prog_fd = load_built(&p, gb_devprog_task(&p, &spec),
					"gpubind_dev", err, errlen);
		if (t->prog_fd < 0)
			return GB_CG_ERROR;
	}
	return GB_CG_OK;
}

static void v2_close(struct gb_cg *cg)
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

/* ---- where the task's cgroup is ----------------------------------------- */

static int is_root_dir(const struct gb_cg *cg, const char *dir)
{
	return strcmp(dir, cg->mnt.unified.dir) == 0;
}

/* dir minus its last component, in place; 0 when there is none. */
static int strip_last_component(char *dir)
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

/*
 * dir is inside a Slurm step's cgroup: a component job_<digits> followed by a
 * step_<...> component (".../job_5/step_0/user/task_special").
 */
static int in_slurm_step(const char *dir)
{
	const char *p = dir;

	while ((p = strstr(p, "/job_"))) {
		const char *d = p + 5;

		while (*d >= '0' && *d <= '9')
			d++;
		if (d > p + 5 && !strncmp(d, "/step_", 6))
			return 1;
		p = d;
	}
	return 0;
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

/*
 * t->v2_parent: the cgroup Slurm put pid in. In place (a Slurm task cgroup
 * holding only pid): the rules go there. Otherwise t->v2_dir names the
 * plugin's own child cgroup (made later).
 */
static int place(struct gb_cg *cg, struct gb_cg_task *t, const char *name,
		 pid_t pid, char *err, size_t errlen)
{
	int rc;

	rc = gb_cg_pid_dir(pid, &cg->mnt.unified, NULL, t->v2_parent,
			   sizeof(t->v2_parent), err, errlen);
	if (rc)
		return rc;
	t->in_place = is_slurm_task_dir(t->v2_parent) &&
		      only_pid(t->v2_parent, pid, NULL, 0);
	if (t->in_place) {
		t->v2_dir[0] = '\0';
		return GB_CG_OK;
	}
	/*
	 * Never take a pid out of the cgroup where Slurm looks for it: Slurm's
	 * cgroup/v2 (step_get_pids: signals, the end of the step, accounting)
	 * reads each task cgroup's own cgroup.procs, not its children's.
	 */
	if (in_slurm_step(t->v2_parent))
		return gb_errf(err, errlen,
			       (cg->flags & GB_CG_ISOLATE) ? GB_CG_REFUSED
			       : GB_CG_UNSUPPORTED,
			       "the task is in %s, a cgroup of Slurm's that is "
			       "not its own task_N (proctrack/cgroup without "
			       "task/cgroup Constrain* or jobacct_gather/cgroup "
			       "puts every task of the step in one); moving it "
			       "would hide it from Slurm. Needed: task/cgroup "
			       "with ConstrainDevices=yes (cgroup.conf), or "
			       "jobacct_gather/cgroup, which give each task its "
			       "own task_N cgroup",
			       t->v2_parent);
	return gb_cg_join(t->v2_dir, sizeof(t->v2_dir), t->v2_parent, name,
			  err, errlen);
}

#define NO_CPUSET_CONTROLLER                                                 \
	"cpus: the cpuset controller is not enabled in "                     \
	"%s/cgroup.subtree_control (cgroup v2 allows that only where no "    \
	"process lives); CPUs not narrowed by cgroup"

/*
 * *ok: the cgroup the cpuset goes to will have cpuset files (a cgroup has
 * them only if its parent enables cpuset). Without them, and without
 * isolate to do anyway, the task is left alone: GB_CG_UNSUPPORTED.
 */
static int cpuset_reachable(const struct gb_cg *cg, const struct gb_cg_task *t,
			    int *ok, char *err, size_t errlen)
{
	char path[GB_CG_PATHLEN + 32], ctl[1024], *tok, *save = NULL;
	int rc, isolate = cg->flags & GB_CG_ISOLATE;

	*ok = 0;
	if (t->in_place) {
		rc = gb_cg_join(path, sizeof(path), t->v2_parent, "cpuset.cpus",
				err, errlen);
		if (rc)
			return rc;
		*ok = access(path, W_OK) == 0;
		if (!*ok && !isolate)
			return gb_errf(err, errlen, GB_CG_UNSUPPORTED,
				       "cpus: %s has no cpuset controller "
				       "(its parent does not enable cpuset in "
				       "cgroup.subtree_control; Slurm's "
				       "ConstrainCores=yes does); CPUs not "
				       "narrowed by cgroup", t->v2_parent);
		return GB_CG_OK;
	}
	rc = gb_cg_join(path, sizeof(path), t->v2_parent,
			"cgroup.subtree_control", err, errlen);
	if (rc)
		return rc;
	if (gb_cg_read_file(path, ctl, sizeof(ctl), NULL, 0) == GB_CG_OK)
		for (tok = strtok_r(ctl, " \n", &save); tok;
		     tok = strtok_r(NULL, " \n", &save))
			if (strcmp(tok, "cpuset") == 0)
				*ok = 1;
	if (!*ok && !isolate)
		return gb_errf(err, errlen, GB_CG_UNSUPPORTED,
			       NO_CPUSET_CONTROLLER, t->v2_parent);
	return GB_CG_OK;
}

/* ---- isolate: what the program must tail-call, and where it goes -------- */

struct nearest {
	char dir[GB_CG_PATHLEN];
	uint32_t flags;
	uint32_t cnt;
	uint32_t ids[GB_BPF_MAX_QUERY];
};

/* The nearest cgroup at or above dir (up to the mount) with programs. */
static int find_nearest(const struct gb_cg *cg, const char *dir,
			struct nearest *n, char *err, size_t errlen)
{
	char cur[GB_CG_PATHLEN];
	int rc;

	snprintf(cur, sizeof(cur), "%s", dir);
	for (;;) {
		rc = gb_bpf_query(cur, 0, n->ids, &n->cnt, &n->flags, err,
				  errlen);
		if (rc)
			return rc;
		if (n->cnt > 0) {
			snprintf(n->dir, sizeof(n->dir), "%s", cur);
			return GB_CG_OK;
		}
		if (is_root_dir(cg, cur) || !strip_last_component(cur))
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

/*
 * The program our one replaces for the task's subtree, if any: id and fd 0
 * and -1 when the nearest programs are ALLOW_MULTI (they keep running) or
 * there are none. replace: that program is exclusive (flags 0) on the
 * task's own cgroup, so ours takes its place there.
 */
struct target {
	uint32_t id;
	int fd;
	int replace;
};

static int choose_target(const struct gb_cg *cg, const struct gb_cg_task *t,
			 pid_t pid, uint32_t nbefore, struct target *tg,
			 char *err, size_t errlen)
{
	struct nearest near;
	int rc;

	rc = find_nearest(cg, t->v2_parent, &near, err, errlen);
	if (rc)
		return rc;
	if (near.cnt == 0 && nbefore > 0)
		return gb_errf(err, errlen, GB_CG_REFUSED,
			       "isolate: %d device program(s) apply to %s "
			       "from above the mounted cgroup2 tree at %s; "
			       "cannot keep them", (int)nbefore,
			       t->v2_parent, cg->mnt.unified.dir);
	if (near.cnt == 0 || (near.flags & BPF_F_ALLOW_MULTI))
		return GB_CG_OK;
	/* Overridable or exclusive: that one is replaced for our subtree, so
	 * we must tail-call it. */
	if (near.cnt != 1)
		return gb_errf(err, errlen, GB_CG_REFUSED,
			       "isolate: %s has %u device programs without "
			       "ALLOW_MULTI", near.dir, near.cnt);
	tg->id = near.ids[0];
	if (!(near.flags & BPF_F_ALLOW_OVERRIDE)) {
		if (strcmp(near.dir, t->v2_parent) != 0 ||
		    !only_pid(t->v2_parent, pid, NULL, 0))
			return gb_errf(err, errlen, GB_CG_REFUSED,
				       "isolate: %s has an exclusive device "
				       "program (attach flags 0) that also "
				       "covers other processes; nothing can "
				       "be attached below it and it cannot "
				       "be replaced for this task alone",
				       near.dir);
		tg->replace = 1;
	}
	tg->fd = gb_bpf_prog_fd_by_id(tg->id);
	if (tg->fd < 0)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "isolate: BPF program id %u on %s: %s", tg->id,
			       near.dir, strerror(errno));
	return GB_CG_OK;
}

/* The task's maps: its allowed minors, and the tail-call target. Frozen. */
static int fill_maps(const struct gb_cg *cg, const struct gb_cg_task *t,
		     const unsigned char *allow, const struct target *tg,
		     char *err, size_t errlen)
{
	uint32_t keys[GB_CG_NMINORS];
	unsigned n = gb_devprog_minors(allow, cg->max_minor, keys);

	for (unsigned i = 0; i < n; i++)
		if (gb_bpf_map_update(t->minors_fd, keys[i], 1) < 0)
			return gb_errf(err, errlen, GB_CG_ERROR,
				       "isolate: BPF map update: %s",
				       strerror(errno));
	if (gb_bpf_map_update(t->tail_fd, 0,
			      (uint32_t)(tg->fd >= 0 ? tg->fd : cg->allow_fd)) < 0)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "isolate: BPF prog array update (program id "
			       "%u): %s", tg->id, strerror(errno));
	if (gb_bpf_map_freeze(t->minors_fd) < 0 ||
	    gb_bpf_map_freeze(t->tail_fd) < 0)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "isolate: BPF_MAP_FREEZE: %s", strerror(errno));
	return GB_CG_OK;
}

/*
 * Before anything is made: the programs in force for the task (*before),
 * the target, and the filled maps. tg->fd is the caller's to close.
 */
static int isolate_prepare(const struct gb_cg *cg, struct gb_cg_task *t,
			   int local_id, pid_t pid, const unsigned char *allow,
			   uint32_t *before, uint32_t *nbefore,
			   struct target *tg, char *err, size_t errlen)
{
	int rc;

	if (t->prog_fd < 0)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "isolate: task %d has no prepared program",
			       local_id);
	rc = gb_bpf_query(t->v2_parent, 1, before, nbefore, NULL, err, errlen);
	if (!rc)
		rc = choose_target(cg, t, pid, *nbefore, tg, err, errlen);
	if (!rc)
		rc = fill_maps(cg, t, allow, tg, err, errlen);
	return rc;
}

/* Post-condition: all that was in force still is, or is our tail-call
 * target. */
static int verify_kept(const char *at, const struct gb_cg_task *t,
		       const uint32_t *before, uint32_t nbefore,
		       const struct target *tg, char *err, size_t errlen)
{
	uint32_t after[GB_BPF_MAX_QUERY], nafter = 0;
	int rc;

	rc = gb_bpf_query(at, 1, after, &nafter, NULL, err, errlen);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < nbefore; i++) {
		if (contains(after, nafter, before[i]) ||
		    (tg->id && before[i] == tg->id))
			continue;
		return gb_errf(err, errlen, GB_CG_REFUSED,
			       "isolate: after attaching to %s, device "
			       "program id %u that applied to %s no longer "
			       "applies; undone", at, before[i],
			       t->v2_parent);
	}
	return GB_CG_OK;
}

/* Attach the task's program (replacing tg's in place, or ALLOW_MULTI), then
 * verify_kept; when that fails, undo (or leave it to cleanup). */
static int attach_checked(struct gb_cg_task *t, const uint32_t *before,
			  uint32_t nbefore, const struct target *tg,
			  char *err, size_t errlen)
{
	const char *at = (tg->replace || t->in_place) ? t->v2_parent : t->v2_dir;
	int rc, e, cg_fd;

	cg_fd = open(at, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cg_fd < 0)
		return gb_errf(err, errlen, GB_CG_ERROR, "open %s: %s", at,
			       strerror(errno));
	if (gb_bpf_attach(cg_fd, t->prog_fd,
			  tg->replace ? 0 : BPF_F_ALLOW_MULTI) < 0) {
		e = errno;
		/* Nothing of ours is attached: no detach at cleanup. */
		if (t->in_place)
			t->applied = 0;
		close(cg_fd);
		return gb_errf(err, errlen,
			       e == EPERM ? GB_CG_REFUSED : GB_CG_ERROR,
			       "isolate: attaching the device program to "
			       "%s: %s", at, strerror(e));
	}
	if (tg->replace) {
		t->replaced = 1;
		t->replaced_id = tg->id;
	}
	t->attached = 1;
	rc = verify_kept(at, t, before, nbefore, tg, err, errlen);
	if (rc != GB_CG_OK) {
		/* Undo; if that fails, cleanup's rmdir/restore does. */
		if (!tg->replace) {
			if (gb_bpf_detach(cg_fd, t->prog_fd) == 0)
				t->attached = 0;
		} else if (gb_bpf_attach(cg_fd, tg->fd, 0) == 0) {
			t->replaced = 0;
			t->attached = 0;
		}
	}
	close(cg_fd);
	return rc;
}

/* ---- apply and cleanup --------------------------------------------------- */

/* The cpuset, where reachable, then (not in place) the move into v2_dir. */
static int narrow_and_move(struct gb_cg_task *t, pid_t pid, int cpuset_ok,
			   const cpu_set_t *cpus, const cpu_set_t *mems,
			   char *err, size_t errlen)
{
	char pc[GB_CG_PATHLEN + 32], pm[GB_CG_PATHLEN + 32];
	int rc;

	if (cpuset_ok) {
		/* In place: within what task_N has; else within the parent. */
		if ((rc = gb_cg_join(pc, sizeof(pc), t->v2_parent,
				     "cpuset.cpus.effective", err, errlen)) ||
		    (rc = gb_cg_join(pm, sizeof(pm), t->v2_parent,
				     "cpuset.mems.effective", err, errlen)) ||
		    (rc = gb_cg_narrow_cpuset(t->in_place ? t->v2_parent
							  : t->v2_dir,
					      pc, pm, cpus, mems, err, errlen)))
			return rc;
	}
	if (!t->in_place) {
		rc = gb_cg_move_pid(t->v2_dir, pid, err, errlen);
		if (rc)
			return rc;
	}
	if ((cpus || mems) && !cpuset_ok)
		return gb_errf(err, errlen, GB_CG_UNSUPPORTED,
			       NO_CPUSET_CONTROLLER, t->v2_parent);
	return GB_CG_OK;
}

static int v2_apply(struct gb_cg *cg, const struct gb_cg_apply_args *a,
		    char *err, size_t errlen)
{
	struct gb_cg_task *t = a->task;
	const cpu_set_t *cpus = a->cpus, *mems = a->mems;
	pid_t pid = a->pid;
	uint32_t before[GB_BPF_MAX_QUERY], nbefore = 0;
	struct target tg = {.id = 0, .fd = -1, .replace = 0};
	int rc, cpuset_ok = 0, isolate = cg->flags & GB_CG_ISOLATE;

	rc = place(cg, t, a->name, pid, err, errlen);
	if (!rc && (cpus || mems))
		rc = cpuset_reachable(cg, t, &cpuset_ok, err, errlen);
	if (rc)
		return rc;
	if (isolate) {
		rc = isolate_prepare(cg, t, a->local_id, pid, a->allow, before,
				     &nbefore, &tg, err, errlen);
		if (rc)
			goto out;
	}
	if (!t->in_place) {
		rc = gb_cg_mkdir_fresh(t->v2_dir, err, errlen);
		if (rc) {
			t->v2_dir[0] = '\0';
			goto out;
		}
	}
	t->applied = 1;
	if (isolate) {
		rc = attach_checked(t, before, nbefore, &tg, err, errlen);
		if (rc)
			goto out;
	}
	rc = narrow_and_move(t, pid, cpuset_ok, cpus, mems, err, errlen);
out:
	if (tg.fd >= 0)
		close(tg.fd);
	return rc;
}

/* In place, a program of ours that replaced none: detach it. Slurm may have
 * removed task_N already (ENOENT), which detaches it too. */
static int detach_in_place(struct gb_cg_task *t, char *err, size_t errlen)
{
	int cfd = open(t->v2_parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (cfd < 0 && errno != ENOENT)
		return gb_errf(err, errlen, GB_CG_ERROR, "open %s: %s",
			       t->v2_parent, strerror(errno));
	if (cfd >= 0) {
		int e = gb_bpf_detach(cfd, t->prog_fd) ? errno : 0;

		close(cfd);
		if (e && e != ENOENT)
			return gb_errf(err, errlen, GB_CG_ERROR,
				       "detaching the device program from "
				       "%s: %s", t->v2_parent, strerror(e));
	}
	t->attached = 0;
	return GB_CG_OK;
}

/* Put back, by id, the exclusive program ours replaced on task_N. */
static int restore_replaced(struct gb_cg_task *t, char *err, size_t errlen)
{
	int pfd, cfd, rc = GB_CG_OK;

	cfd = open(t->v2_parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cfd < 0) {
		if (errno == ENOENT) {  /* Slurm removed it already */
			t->replaced = 0;
			return GB_CG_OK;
		}
		return gb_errf(err, errlen, GB_CG_ERROR, "open %s: %s",
			       t->v2_parent, strerror(errno));
	}
	pfd = gb_bpf_prog_fd_by_id(t->replaced_id);
	if (pfd < 0) {
		rc = gb_errf(err, errlen, GB_CG_ERROR,
			     "restoring device program id %u on %s: %s",
			     t->replaced_id, t->v2_parent, strerror(errno));
	} else {
		if (gb_bpf_attach(cfd, pfd, 0) < 0)
			rc = gb_errf(err, errlen, GB_CG_ERROR,
				     "restoring device program id %u on "
				     "%s: %s", t->replaced_id, t->v2_parent,
				     strerror(errno));
		close(pfd);
	}
	close(cfd);
	if (rc)
		return rc;
	t->replaced = 0;
	return GB_CG_OK;
}

static int v2_cleanup(struct gb_cg *cg, struct gb_cg_task *t, char *err,
		      size_t errlen)
{
	int rc;

	(void)cg;
	if (t->in_place && t->attached && !t->replaced) {
		rc = detach_in_place(t, err, errlen);
		if (rc)
			return rc;
	}
	/* rmdir also detaches what is attached there. */
	if (t->v2_dir[0]) {
		if (gb_cg_rmdir(t->v2_dir, err, errlen) != GB_CG_OK)
			return GB_CG_ERROR;
		t->v2_dir[0] = '\0';
	}
	if (t->replaced)
		return restore_replaced(t, err, errlen);
	return GB_CG_OK;
}

static void v2_describe(const struct gb_cg_mounts *mnt, char *buf, size_t len)
{
	snprintf(buf, len, "cgroup v2 at %s (BPF device programs)",
		 mnt->unified.dir);
}

static const char *v2_task_path(const struct gb_cg_task *t)
{
	return t->in_place ? t->v2_parent : t->v2_dir;
}

const struct gb_cg_ops gb_cg_v2_ops = {
	.prepare = v2_prepare,
	.apply = v2_apply,
	.cleanup = v2_cleanup,
	.close = v2_close,
	.describe = v2_describe,
	.task_path = v2_task_path,
};
