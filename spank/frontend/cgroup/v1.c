/*
 * cgroup v1 backend: a child of the task's current devices cgroup with
 * "c 195:N rwm" denied for every GPU minor but the task's own (AMD: "c
 * 226:N rwm" for the step's other GPUs' render and card minors), and a
 * child of its current cpuset cgroup with narrowed cpus/mems.
 *
 * A v1 child starts with a copy of its parent's device rules, and a deny
 * only removes access, so nvidiactl, nvidia-uvm, nvidia-caps and every
 * other device keep exactly the parent's (Slurm's) rule. A cpuset child
 * must get cpus and mems before a task can move in (ENOSPC otherwise).
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int deny_minors(const struct gb_cg *cg, const char *dir,
		       const unsigned char *allow, char *err, size_t errlen)
{
	char path[GB_CG_PATHLEN + 16], rule[32];
	int fd, m, rc;

	rc = gb_cg_join(path, sizeof(path), dir, "devices.deny", err, errlen);
	if (rc)
		return rc;
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return gb_errf(err, errlen, GB_CG_ERROR, "open %s: %s",
			       path, strerror(errno));
	/* One rule per write(2): the kernel parses each write as one rule. */
	for (m = 0; (unsigned)m <= cg->max_minor; m++) {
		int n;

		if (allow[m])
			continue;
		n = snprintf(rule, sizeof(rule), "c %u:%d rwm", cg->major, m);
		if (write(fd, rule, (size_t)n) != n) {
			int e = errno;
			close(fd);
			return gb_errf(err, errlen, GB_CG_ERROR,
				       "write \"%s\" to %s: %s", rule, path,
				       strerror(e));
		}
	}
	if (close(fd) < 0)
		return gb_errf(err, errlen, GB_CG_ERROR, "close %s: %s",
			       path, strerror(errno));
	return GB_CG_OK;
}

/* Does "c 195:*", "c *:*", "c 195:M" (M denied) allow a minor not in allow?
 * (AMD: major 226.) */
static int allows_denied(const struct gb_cg *cg, const char *line,
			 const unsigned char *allow)
{
	char type, maj[16], min[16];
	long m;

	if (sscanf(line, "%c %15[^:]:%15s", &type, maj, min) != 3 ||
	    (type != 'c' && type != 'a'))
		return 0;
	if (strcmp(maj, "*") && atol(maj) != (long)cg->major)
		return 0;
	if (!strcmp(min, "*")) {
		for (m = 0; m <= (long)cg->max_minor; m++)
			if (!allow[m])
				return 1;
		return 0;
	}
	m = atol(min);
	return m >= 0 && m <= (long)cg->max_minor && !allow[m];
}

/*
 * devices.deny is silently a no-op where the cgroup's allow list has a
 * wildcard covering the minor ("c 195:* rwm": v1 cannot carve one device
 * out of it). Read the list back: it shows "a *:* rwm" for a cgroup that
 * allows by default (our denials are then exceptions and hold), else the
 * devices it allows, and none of the denied GPUs may be among them.
 */
static int check_denied(const struct gb_cg *cg, const char *dir,
			const unsigned char *allow, char *err, size_t errlen)
{
	char path[GB_CG_PATHLEN + 16], list[32768];
	int rc;

	rc = gb_cg_join(path, sizeof(path), dir, "devices.list", err, errlen);
	if (!rc)
		rc = gb_cg_read_file(path, list, sizeof(list), err, errlen);
	if (rc)
		return rc;
	if (!strncmp(list, "a *:* rwm\n", 10))
		return GB_CG_OK;
	for (char *p = list, *nl; *p; p = nl + 1) {
		nl = strchr(p, '\n');
		if (nl)
			*nl = '\0';
		if (allows_denied(cg, p, allow))
			return gb_errf(err, errlen, GB_CG_REFUSED,
				       "%s still allows \"%s\" after the "
				       "denials: its parent's rule is a "
				       "wildcard that cgroup v1 cannot "
				       "narrow (allow GPU device nodes "
				       "one minor at a time)", path, p);
		if (!nl)
			break;
	}
	return GB_CG_OK;
}

/* One of t's cgroups, made fresh; cleared when that fails (nothing to undo). */
static int mkdir_task(struct gb_cg_task *t, char *dir, char *err,
		      size_t errlen)
{
	int rc = gb_cg_mkdir_fresh(dir, err, errlen);

	if (rc) {
		dir[0] = '\0';
		return rc;
	}
	t->applied = 1;
	return 0;
}

static int v1_apply(struct gb_cg *cg, const struct gb_cg_apply_args *a,
		    char *err, size_t errlen)
{
	char parent[GB_CG_PATHLEN], pc[GB_CG_PATHLEN + 32],
		pm[GB_CG_PATHLEN + 32];
	struct gb_cg_task *t = a->task;
	const char *name = a->name;
	const unsigned char *allow = a->allow;
	const cpu_set_t *cpus = a->cpus, *mems = a->mems;
	pid_t pid = a->pid;
	int rc;

	if (cg->flags & GB_CG_ISOLATE) {
		rc = gb_cg_pid_dir(pid, &cg->mnt.devices, "devices", parent,
				   sizeof(parent), err, errlen);
		if (rc)
			return rc;
		rc = gb_cg_join(t->dev_dir, sizeof(t->dev_dir), parent, name,
				err, errlen);
		if (rc)
			return rc;
		rc = mkdir_task(t, t->dev_dir, err, errlen);
		if (rc)
			return rc;
		rc = deny_minors(cg, t->dev_dir, allow, err, errlen);
		if (!rc)
			rc = check_denied(cg, t->dev_dir, allow, err, errlen);
		if (rc)
			return rc;
		rc = gb_cg_move_pid(t->dev_dir, pid, err, errlen);
		if (rc)
			return rc;
	}
	if (!cpus && !mems)
		return GB_CG_OK;
	if (!cg->mnt.cpuset.found)
		return gb_errf(err, errlen, GB_CG_UNSUPPORTED,
			       "cpus: no cgroup v1 cpuset hierarchy is "
			       "mounted; CPUs not narrowed by cgroup");
	rc = gb_cg_pid_dir(pid, &cg->mnt.cpuset, "cpuset", parent, sizeof(parent),
			   err, errlen);
	if (rc)
		return rc;
	if ((rc = gb_cg_join(pc, sizeof(pc), parent, "cpuset.cpus", err,
			     errlen)) ||
	    (rc = gb_cg_join(pm, sizeof(pm), parent, "cpuset.mems", err,
			     errlen)) ||
	    (rc = gb_cg_join(t->cpuset_dir, sizeof(t->cpuset_dir), parent,
			     name, err, errlen)))
		return rc;
	rc = mkdir_task(t, t->cpuset_dir, err, errlen);
	if (rc)
		return rc;
	rc = gb_cg_narrow_cpuset(t->cpuset_dir, pc, pm, cpus, mems, err,
				 errlen);
	if (rc)
		return rc;
	return gb_cg_move_pid(t->cpuset_dir, pid, err, errlen);
}

static int v1_cleanup(struct gb_cg *cg, struct gb_cg_task *t, char *err,
		      size_t errlen)
{
	int rc = GB_CG_OK;

	(void)cg;
	if (t->dev_dir[0]) {
		if (gb_cg_rmdir(t->dev_dir, err, errlen) == GB_CG_OK)
			t->dev_dir[0] = '\0';
		else
			rc = GB_CG_ERROR;
	}
	if (t->cpuset_dir[0]) {
		char e2[512];
		if (gb_cg_rmdir(t->cpuset_dir, e2, sizeof(e2)) == GB_CG_OK) {
			t->cpuset_dir[0] = '\0';
		} else {
			if (rc == GB_CG_OK && err && errlen)
				snprintf(err, errlen, "%s", e2);
			rc = GB_CG_ERROR;
		}
	}
	return rc;
}

/* v1 loads nothing before fork: the rules are files written in apply. */
static int v1_prepare(struct gb_cg *cg, char *err, size_t errlen)
{
	(void)cg;
	(void)err;
	(void)errlen;
	return GB_CG_OK;
}

static void v1_close(struct gb_cg *cg)
{
	(void)cg;
}

static void v1_describe(const struct gb_cg_mounts *mnt, char *buf, size_t len)
{
	snprintf(buf, len, "cgroup v1 (devices at %s, cpuset at %s)",
		 mnt->devices.found ? mnt->devices.dir : "-",
		 mnt->cpuset.found ? mnt->cpuset.dir : "-");
}

static const char *v1_task_path(const struct gb_cg_task *t)
{
	return t->dev_dir[0] ? t->dev_dir : t->cpuset_dir;
}

const struct gb_cg_ops gb_cg_v1_ops = {
	.prepare = v1_prepare,
	.apply = v1_apply,
	.cleanup = v1_cleanup,
	.close = v1_close,
	.describe = v1_describe,
	.task_path = v1_task_path,
};
