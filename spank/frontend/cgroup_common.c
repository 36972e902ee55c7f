/*
 * Per-task cgroup binding: hierarchy discovery, small file helpers and the
 * dispatch to the v1 (cgroup_v1.c) and v2 (cgroup_v2.c) backends.
 * Only prepare allocates; everything later is system calls on fixed buffers.
 */
#include "cgroup_internal.h"
#include "table.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int gb_cg_write_file(const char *path, const char *text, char *err,
		     size_t errlen)
{
	size_t len = strlen(text);
	ssize_t n;
	int fd, e;

	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return gb_errf(err, errlen, GB_CG_ERROR, "open %s: %s",
			       path, strerror(errno));
	n = write(fd, text, len);
	e = errno;
	if (close(fd) < 0 && n == (ssize_t)len)
		return gb_errf(err, errlen, GB_CG_ERROR, "close %s: %s",
			       path, strerror(errno));
	if (n < 0)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "write \"%s\" to %s: %s", text, path,
			       strerror(e));
	if ((size_t)n != len)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "write \"%s\" to %s: short write", text, path);
	return GB_CG_OK;
}

int gb_cg_read_file(const char *path, char *buf, size_t len, char *err,
		    size_t errlen)
{
	size_t off = 0;
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return gb_errf(err, errlen, GB_CG_ERROR, "open %s: %s",
			       path, strerror(errno));
	for (;;) {
		if (off + 1 >= len) {
			close(fd);
			return gb_errf(err, errlen, GB_CG_ERROR,
				       "read %s: more than %zu bytes", path,
				       len - 1);
		}
		n = read(fd, buf + off, len - 1 - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			close(fd);
			return gb_errf(err, errlen, GB_CG_ERROR,
				       "read %s: %s", path, strerror(e));
		}
		if (n == 0)
			break;
		off += (size_t)n;
	}
	buf[off] = '\0';
	if (close(fd) < 0)
		return gb_errf(err, errlen, GB_CG_ERROR, "close %s: %s",
			       path, strerror(errno));
	return GB_CG_OK;
}

int gb_cg_join(char *buf, size_t len, const char *a, const char *b,
	       char *err, size_t errlen)
{
	size_t al = strlen(a);
	int n;

	/* No "//": "/mnt/" + "/x" and "/mnt" + "/" give "/mnt/x", "/mnt". */
	while (al > 1 && a[al - 1] == '/')
		al--;
	if (al == 1 && a[0] == '/')
		al = 0;
	while (b[0] == '/')
		b++;
	if (b[0] == '\0')
		n = snprintf(buf, len, "%.*s", (int)(al ? al : 1),
			     al ? a : "/");
	else
		n = snprintf(buf, len, "%.*s/%s", (int)al, a, b);
	if (n < 0 || (size_t)n >= len)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "path %s/%s is longer than %zu bytes", a, b,
			       len - 1);
	return GB_CG_OK;
}

/* Undo mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
	char *w = s;

	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' &&
		    s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*w++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
				      (s[3] - '0'));
			s += 4;
		} else {
			*w++ = *s++;
		}
	}
	*w = '\0';
}

static int has_token(const char *list, const char *tok)
{
	size_t n = strlen(tok);
	const char *p = list;

	while (*p) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (l == n && strncmp(p, tok, n) == 0)
			return 1;
		if (!e)
			break;
		p = e + 1;
	}
	return 0;
}

static int set_mount(struct gb_cg_mount *m, const char *root, const char *dir)
{
	if (m->found)
		return 0;  /* first mount wins */
	if (strlen(root) >= sizeof(m->root) || strlen(dir) >= sizeof(m->dir))
		return -1;
	strcpy(m->root, root);
	strcpy(m->dir, dir);
	m->found = 1;
	return 0;
}

/*
 * Find the v1 devices and cpuset hierarchies and the cgroup2 one in
 * mountinfo (fields: id parent dev root mountpoint opts [opt...] - fstype
 * source superopts).
 */
static int parse_mountinfo(struct gb_cg *cg, const char *path, char *err,
			   size_t errlen)
{
	char line[4096];
	FILE *f;
	int lineno = 0;

	f = fopen(path, "re");
	if (!f)
		return gb_errf(err, errlen, GB_CG_ERROR, "open %s: %s",
			       path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		char *fields[64], *save = NULL, *tok;
		int n = 0, dash = -1, i;

		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			fclose(f);
			return gb_errf(err, errlen, GB_CG_ERROR,
				       "%s line %d: longer than %zu bytes",
				       path, lineno, sizeof(line) - 1);
		}
		for (tok = strtok_r(line, " \n", &save); tok && n < 64;
		     tok = strtok_r(NULL, " \n", &save))
			fields[n++] = tok;
		for (i = 6; i < n; i++) {
			if (strcmp(fields[i], "-") == 0) {
				dash = i;
				break;
			}
		}
		if (n < 6 || dash < 0 || dash + 3 > n) {
			fclose(f);
			return gb_errf(err, errlen, GB_CG_ERROR,
				       "%s line %d: expected \"ID PARENT "
				       "DEV ROOT MOUNTPOINT OPTS ... - "
				       "FSTYPE SOURCE SUPEROPTS\"",
				       path, lineno);
		}
		unescape(fields[3]);
		unescape(fields[4]);
		if (strcmp(fields[dash + 1], "cgroup2") == 0) {
			if (set_mount(&cg->unified, fields[3], fields[4]) < 0)
				goto toolong;
		} else if (strcmp(fields[dash + 1], "cgroup") == 0) {
			const char *sopts = fields[dash + 3];
			static const char *const tracking[] = {
				"freezer", "cpuacct", "memory",
			};
			const char *co = "";

			for (i = 0; i < 3; i++)
				if (has_token(sopts, tracking[i]))
					co = tracking[i];
			if (has_token(sopts, "devices") && !cg->devices.found) {
				if (set_mount(&cg->devices, fields[3], fields[4]) < 0)
					goto toolong;
				strcpy(cg->devices.comount, co);
			}
			if (has_token(sopts, "cpuset") && !cg->cpuset.found) {
				if (set_mount(&cg->cpuset, fields[3], fields[4]) < 0)
					goto toolong;
				strcpy(cg->cpuset.comount, co);
			}
		}
		continue;
toolong:
		fclose(f);
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "%s line %d: cgroup mount path longer than "
			       "%d bytes", path, lineno, GB_CG_PATHLEN - 1);
	}
	if (ferror(f)) {
		fclose(f);
		return gb_errf(err, errlen, GB_CG_ERROR, "read %s: %s",
			       path, strerror(errno));
	}
	fclose(f);
	return GB_CG_OK;
}

int gb_cg_pid_dir(pid_t pid, const struct gb_cg_mount *m, const char *ctrl,
		  char *dir, size_t len, char *err, size_t errlen)
{
	char path[64], buf[8192], *line, *save = NULL;
	int rc;

	snprintf(path, sizeof(path), "/proc/%ld/cgroup", (long)pid);
	rc = gb_cg_read_file(path, buf, sizeof(buf), err, errlen);
	if (rc)
		return rc;
	for (line = strtok_r(buf, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		/* "ID:CONTROLLERS:PATH"; cgroup2 is "0::PATH". */
		char *c1 = strchr(line, ':'), *c2, *cgpath;
		size_t rl;
		int match;

		if (!c1 || !(c2 = strchr(c1 + 1, ':')))
			return gb_errf(err, errlen, GB_CG_ERROR,
				       "%s: line \"%s\" is not "
				       "ID:CONTROLLERS:PATH", path, line);
		*c2 = '\0';
		cgpath = c2 + 1;
		if (ctrl)
			match = has_token(c1 + 1, ctrl);
		else
			match = (c1 - line == 1 && line[0] == '0' &&
				 c1[1] == '\0');
		if (!match)
			continue;
		/* Strip the mount's root: paths are relative to the hierarchy. */
		rl = strlen(m->root);
		if (strcmp(m->root, "/") != 0) {
			if (strncmp(cgpath, m->root, rl) != 0 ||
			    (cgpath[rl] != '/' && cgpath[rl] != '\0'))
				return gb_errf(err, errlen, GB_CG_ERROR,
					       "pid %ld is in %s:%s, outside "
					       "the mounted part %s at %s",
					       (long)pid,
					       ctrl ? ctrl : "cgroup2",
					       cgpath, m->root, m->dir);
			cgpath += rl;
		}
		return gb_cg_join(dir, len, m->dir, cgpath, err, errlen);
	}
	return gb_errf(err, errlen, GB_CG_ERROR, "%s has no %s line", path,
		       ctrl ? ctrl : "cgroup2 (0::)");
}

/*
 * Moves the processes left in dir (what the task started and left running)
 * to its parent, the Slurm cgroup the plugin's one was made under. Slurm
 * still tracks them there, and removes that cgroup itself: a child cgroup
 * of ours left behind in it would make its rmdir fail and leak.
 */
static void evict(const char *dir)
{
	char path[GB_CG_PATHLEN + 16], parent[GB_CG_PATHLEN + 16];
	char pids[4096], *slash;

	if (gb_cg_join(path, sizeof(path), dir, "cgroup.procs", NULL, 0) ||
	    gb_cg_read_file(path, pids, sizeof(pids), NULL, 0))
		return; /* more than fit: the next round moves the rest */
	snprintf(parent, sizeof(parent), "%s", dir);
	slash = strrchr(parent, '/');
	if (!slash || slash == parent)
		return;
	*slash = '\0';
	for (char *p = pids, *nl; *p; p = nl + 1) {
		nl = strchr(p, '\n');
		if (!nl)
			break;
		*nl = '\0';
		/* A pid that exited meanwhile (ESRCH) needs nothing. */
		(void) gb_cg_move_pid(parent, (pid_t) atol(p), NULL, 0);
	}
}

int gb_cg_rmdir(const char *dir, char *err, size_t errlen)
{
	int e = 0;

	for (int round = 0; round < 3; round++) {
		if (rmdir(dir) == 0 || errno == ENOENT)
			return GB_CG_OK;
		e = errno;
		if (e != EBUSY)
			break;
		evict(dir);
	}
	return gb_errf(err, errlen, GB_CG_ERROR, "rmdir %s: %s", dir,
		       strerror(e));
}

/*
 * A leftover with our unique name (job, step, task) can only come from a
 * crashed earlier run of this very step: remove it, or fail.
 */
int gb_cg_mkdir_fresh(const char *dir, char *err, size_t errlen)
{
	if (mkdir(dir, 0755) == 0)
		return GB_CG_OK;
	if (errno == EEXIST) {
		if (rmdir(dir) < 0)
			return gb_errf(err, errlen, GB_CG_ERROR,
				       "%s exists from an earlier run and "
				       "cannot be removed: %s", dir,
				       strerror(errno));
		if (mkdir(dir, 0755) == 0)
			return GB_CG_OK;
	}
	return gb_errf(err, errlen, GB_CG_ERROR, "mkdir %s: %s", dir,
		       strerror(errno));
}

int gb_cg_move_pid(const char *dir, pid_t pid, char *err, size_t errlen)
{
	char path[GB_CG_PATHLEN + 16], text[32];
	int rc;

	rc = gb_cg_join(path, sizeof(path), dir, "cgroup.procs", err, errlen);
	if (rc)
		return rc;
	snprintf(text, sizeof(text), "%ld", (long)pid);
	return gb_cg_write_file(path, text, err, errlen);
}

int gb_cg_task_name(const struct gb_cg *cg, int local_id, char *buf,
		    size_t len)
{
	int n = snprintf(buf, len, "gpubind_j%u_s%u_p%ld_t%d", cg->job_id,
			 cg->step_id, cg->stepd_pid, local_id);

	return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

/*
 * A cgroup CPU or memory-node file: a list like the table's, but the kernel
 * ends it with a newline and writes nothing at all for an empty set.
 */
static int parse_cgroup_list(char *buf, cpu_set_t *set)
{
	size_t n = strlen(buf);

	while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	if (!n) {
		CPU_ZERO(set);
		return 0;
	}
	return gb_parse_cpulist(buf, set);
}

int gb_cg_narrow_cpuset(const char *dir, const char *parent_cpus_file,
			const char *parent_mems_file, const cpu_set_t *cpus,
			const cpu_set_t *mems, char *err, size_t errlen)
{
	char buf[8192], path[GB_CG_PATHLEN + 32], text[8192];
	cpu_set_t have, want;
	int rc;
	struct {
		const char *parent, *file, *what;
		const cpu_set_t *want;
	} part[2] = {
		{parent_cpus_file, "cpuset.cpus", "CPUs", cpus},
		{parent_mems_file, "cpuset.mems", "memory nodes", mems},
	};

	for (int i = 0; i < 2; i++) {
		rc = gb_cg_read_file(part[i].parent, buf, sizeof(buf), err,
				     errlen);
		if (rc)
			return rc;
		if (parse_cgroup_list(buf, &have) < 0)
			return gb_errf(err, errlen, GB_CG_ERROR,
				       "%s: \"%s\" is not a list like "
				       "0-3,8", part[i].parent, buf);
		if (part[i].want)
			CPU_AND(&want, &have, part[i].want);
		else
			want = have;
		/* Memory nodes are a preference: none of the GPU's nodes
		 * allowed here keeps the parent's (never widens). */
		if (i == 1 && CPU_COUNT(&want) == 0)
			want = have;
		if (CPU_COUNT(&want) == 0) {
			char w[1024], h[1024];
			/* want holds the wanted set when there was one. */
			gb_format_cpulist(part[i].want ? part[i].want : &have,
					  w, sizeof(w));
			gb_format_cpulist(&have, h, sizeof(h));
			return gb_errf(err, errlen, GB_CG_REFUSED,
				       "cpus: the wanted %s %s lie outside "
				       "the %s %s allowed by %s",
				       part[i].what, w, part[i].what, h,
				       part[i].parent);
		}
		gb_format_cpulist(&want, text, sizeof(text));
		rc = gb_cg_join(path, sizeof(path), dir, part[i].file, err,
				errlen);
		if (rc)
			return rc;
		rc = gb_cg_write_file(path, text, err, errlen);
		if (rc)
			return rc;
	}
	return GB_CG_OK;
}

static void describe(struct gb_cg *cg)
{
	if (cg->version == GB_CG_V1)
		snprintf(cg->describe, sizeof(cg->describe),
			 "cgroup v1 (devices at %s, cpuset at %s)",
			 cg->devices.found ? cg->devices.dir : "-",
			 cg->cpuset.found ? cg->cpuset.dir : "-");
	else
		snprintf(cg->describe, sizeof(cg->describe),
			 "cgroup v2 at %s (BPF device programs)",
			 cg->unified.dir);
}

/* The caller's configuration, before anything is allocated or read. */
static int check_config(const struct gb_cg_config *cfg, char *err,
			size_t errlen)
{
	if (cfg->ntasks <= 0 || cfg->ntasks > 65536)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: %d local tasks; expected 1..65536",
			       cfg->ntasks);
	if (cfg->flags & ~(GB_CG_ISOLATE | GB_CG_CPUS))
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: unknown flags 0x%x", cfg->flags);
	if (cfg->version != GB_CG_AUTO && cfg->version != GB_CG_V1 &&
	    cfg->version != GB_CG_V2)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: version %d; expected 0 (auto), 1 "
			       "or 2", cfg->version);
	if ((cfg->flags & GB_CG_ISOLATE) && cfg->mig)
		return gb_errf(err, errlen, GB_CG_REFUSED,
			       "isolate is not supported with MIG devices: "
			       "MIG instances share their GPU's "
			       "/dev/nvidiaN and are opened through "
			       "/dev/nvidia-caps, which gpubind does not "
			       "restrict; drop isolate (Slurm's "
			       "ConstrainDevices limits a step to its MIG "
			       "instances)");
	return GB_CG_OK;
}

/* A new context for cfg, no fd open yet; NULL when out of memory. */
static struct gb_cg *new_cg(const struct gb_cg_config *cfg, char *err,
			    size_t errlen)
{
	struct gb_cg *cg = calloc(1, sizeof(*cg));

	if (!cg) {
		(void) gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: out of memory");
		return NULL;
	}
	cg->tasks = calloc((size_t)cfg->ntasks, sizeof(*cg->tasks));
	if (!cg->tasks) {
		free(cg);
		(void) gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: out of memory for %d tasks",
			       cfg->ntasks);
		return NULL;
	}
	cg->flags = cfg->flags;
	cg->job_id = cfg->job_id;
	cg->step_id = cfg->step_id;
	cg->stepd_pid = (long)getpid();
	cg->ntasks = cfg->ntasks;
	cg->mig = cfg->mig;
	cg->allow_fd = -1;
	for (int i = 0; i < cfg->ntasks; i++) {
		cg->tasks[i].prog_fd = -1;
		cg->tasks[i].minors_fd = -1;
		cg->tasks[i].tail_fd = -1;
	}
	return cg;
}

/* The step's GPU minors; isolate needs every one of them. */
static int mark_step_minors(struct gb_cg *cg, const struct gb_cg_config *cfg,
			    char *err, size_t errlen)
{
	for (int i = 0; i < cfg->nstep_minors; i++) {
		int m = cfg->step_minors[i];

		if (m >= 0 && m <= GB_CG_MAX_GPU_MINOR) {
			cg->step_minor[m] = 1;
			continue;
		}
		if (cfg->flags & GB_CG_ISOLATE)
			return gb_errf(err, errlen, GB_CG_REFUSED,
				       "isolate needs the /dev/nvidiaN "
				       "minor of every step GPU; step "
				       "GPU %d has minor %d (expected "
				       "0..%d)", i, m, GB_CG_MAX_GPU_MINOR);
	}
	return GB_CG_OK;
}

/*
 * The cgroup version to use, and the refusals that depend on it. v1: the
 * plugin moves each task into a cgroup of its own in the devices (isolate)
 * and cpuset (cpus) hierarchies. Where one of them is co-mounted with a
 * controller Slurm finds the step's tasks by, that move would take the task
 * out of Slurm's cgroup there (signals, the end of the step, accounting
 * would miss it).
 */
static int choose_version(struct gb_cg *cg, const struct gb_cg_config *cfg,
			  const char *mountinfo, char *err, size_t errlen)
{
	cg->version = cfg->version;
	if (cg->version == GB_CG_AUTO) {
		/* Use what Slurm's own cgroup/v1 would use when it is there. */
		if ((cfg->flags & GB_CG_ISOLATE) ? cg->devices.found
						 : cg->cpuset.found)
			cg->version = GB_CG_V1;
		else
			cg->version = GB_CG_V2;
	}
	if (cg->version == GB_CG_V1 && (cfg->flags & GB_CG_ISOLATE) &&
	    !cg->devices.found)
		return gb_errf(err, errlen, GB_CG_REFUSED,
			       "isolate: no cgroup v1 devices hierarchy in "
			       "%s", mountinfo);
	for (int i = 0; cg->version == GB_CG_V1 && i < 2; i++) {
		const struct gb_cg_mount *m = i ? &cg->cpuset : &cg->devices;
		int flag = i ? GB_CG_CPUS : GB_CG_ISOLATE;

		if (!(cfg->flags & flag) || !m->found || !m->comount[0])
			continue;
		return gb_errf(err, errlen, GB_CG_REFUSED,
			       "%s: the cgroup v1 %s hierarchy at %s is "
			       "co-mounted with %s, by which Slurm finds the "
			       "step's tasks (proctrack/cgroup, "
			       "jobacct_gather/cgroup); moving a task into a "
			       "cgroup of gpubind's there would hide it from "
			       "Slurm. Mount %s on its own hierarchy",
			       i ? "cpus" : "isolate", i ? "cpuset" : "devices",
			       m->dir, m->comount, i ? "cpuset" : "devices");
	}
	if (cg->version == GB_CG_V2 && !cg->unified.found)
		return gb_errf(err, errlen, GB_CG_REFUSED,
			       "cgroup: neither a cgroup v1 %s hierarchy nor "
			       "cgroup2 is mounted (%s)",
			       (cfg->flags & GB_CG_ISOLATE) ? "devices"
			       : "cpuset",
			       mountinfo);
	return GB_CG_OK;
}

int gb_cg_prepare(struct gb_cg **out, const struct gb_cg_config *cfg,
		  char *err, size_t errlen)
{
	const char *mountinfo = cfg->mountinfo ? cfg->mountinfo
					       : "/proc/self/mountinfo";
	struct gb_cg *cg;
	int rc;

	*out = NULL;
	rc = check_config(cfg, err, errlen);
	if (rc)
		return rc;
	cg = new_cg(cfg, err, errlen);
	if (!cg)
		return GB_CG_ERROR;
	rc = mark_step_minors(cg, cfg, err, errlen);
	if (!rc)
		rc = parse_mountinfo(cg, mountinfo, err, errlen);
	if (!rc)
		rc = choose_version(cg, cfg, mountinfo, err, errlen);
	if (rc)
		goto fail;
	describe(cg);
	if (cg->version == GB_CG_V2 && (cfg->flags & GB_CG_ISOLATE)) {
		rc = gb_cg_v2_prepare(cg, err, errlen);
		if (rc)
			goto fail;
	}
	*out = cg;
	return GB_CG_OK;
fail:
	gb_cg_v2_close(cg);
	free(cg->tasks);
	free(cg);
	return rc;
}

int gb_cg_apply(struct gb_cg *cg, int local_id, pid_t pid, const int *minors,
		int nminors, const cpu_set_t *cpus, const cpu_set_t *mems,
		char *err, size_t errlen)
{
	unsigned char allow[GB_CG_NMINORS];
	char name[256];
	struct gb_cg_task *t;
	int i;

	if (!cg || local_id < 0 || local_id >= cg->ntasks)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: local task id %d out of range 0..%d",
			       local_id, cg ? cg->ntasks - 1 : -1);
	if (pid <= 0)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: task %d: bad pid %ld", local_id,
			       (long)pid);
	t = &cg->tasks[local_id];
	if (t->applied)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: task %d already applied", local_id);
	memset(allow, 0, sizeof(allow));
	if (cg->flags & GB_CG_ISOLATE) {
		/* Only GPUs of this step: no table can widen the step. */
		for (i = 0; i < nminors; i++) {
			int m = minors[i];
			if (m < 0 || m > GB_CG_MAX_GPU_MINOR ||
			    !cg->step_minor[m])
				return gb_errf(err, errlen, GB_CG_REFUSED,
					       "isolate: task %d: minor %d "
					       "is not a GPU of this step",
					       local_id, m);
			allow[m] = 1;
		}
	}
	if (!(cg->flags & GB_CG_CPUS)) {
		cpus = NULL;
		mems = NULL;
	}
	if (!(cg->flags & GB_CG_ISOLATE) && !cpus && !mems)
		return GB_CG_OK;  /* nothing to narrow */
	if (gb_cg_task_name(cg, local_id, name, sizeof(name)) < 0)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: task %d: cgroup name longer than "
			       "%zu bytes", local_id, sizeof(name) - 1);
	if (cg->version == GB_CG_V1)
		return gb_cg_v1_apply(cg, t, name, pid, allow, cpus, mems, err,
				      errlen);
	return gb_cg_v2_apply(cg, t, local_id, name, pid, allow, cpus, mems,
			      err, errlen);
}

int gb_cg_task_exit(struct gb_cg *cg, int local_id, char *err, size_t errlen)
{
	struct gb_cg_task *t;
	int rc;

	if (!cg || local_id < 0 || local_id >= cg->ntasks)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: local task id %d out of range",
			       local_id);
	t = &cg->tasks[local_id];
	if (!t->applied)
		return GB_CG_OK;
	if (cg->version == GB_CG_V1)
		rc = gb_cg_v1_cleanup(cg, t, err, errlen);
	else
		rc = gb_cg_v2_cleanup(cg, t, err, errlen);
	t->cleanup_pending = (rc != GB_CG_OK);
	if (rc == GB_CG_OK)
		t->applied = 0;
	return rc;
}

int gb_cg_fini(struct gb_cg *cg, char *err, size_t errlen)
{
	int rc = GB_CG_OK, i;
	char one[512];

	if (!cg)
		return GB_CG_OK;
	if (err && errlen)
		err[0] = '\0';
	for (i = 0; i < cg->ntasks; i++) {
		if (!cg->tasks[i].applied)
			continue;
		if (gb_cg_task_exit(cg, i, one, sizeof(one)) != GB_CG_OK) {
			rc = GB_CG_ERROR;
			if (err && errlen && !err[0])
				snprintf(err, errlen, "%s", one);
		}
	}
	gb_cg_v2_close(cg);
	free(cg->tasks);
	free(cg);
	return rc;
}

const char *gb_cg_describe(const struct gb_cg *cg)
{
	return cg ? cg->describe : "";
}

const char *gb_cg_task_path(const struct gb_cg *cg, int local_id)
{
	const struct gb_cg_task *t;

	if (!cg || local_id < 0 || local_id >= cg->ntasks)
		return "";
	t = &cg->tasks[local_id];
	if (!t->applied)
		return "";
	if (cg->version == GB_CG_V2)
		return t->in_place ? t->v2_parent : t->v2_dir;
	return t->dev_dir[0] ? t->dev_dir : t->cpuset_dir;
}
