/*
 * The cgroup layer's file system side: small file helpers, the mountinfo
 * parser, where a pid sits in a hierarchy, the plugin's cgroup directories
 * (made fresh, emptied and removed) and cpuset narrowing. No policy: which
 * version to use is probe.c's, the order of the steps lifecycle.c's and the
 * backends' (v1.c, v2.c).
 */
#include "internal.h"
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
int gb_cg_parse_mountinfo(struct gb_cg_mounts *mnt, const char *path,
			  char *err, size_t errlen)
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
			if (set_mount(&mnt->unified, fields[3], fields[4]) < 0)
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
			if (has_token(sopts, "devices") && !mnt->devices.found) {
				if (set_mount(&mnt->devices, fields[3], fields[4]) < 0)
					goto toolong;
				strcpy(mnt->devices.comount, co);
			}
			if (has_token(sopts, "cpuset") && !mnt->cpuset.found) {
				if (set_mount(&mnt->cpuset, fields[3], fields[4]) < 0)
					goto toolong;
				strcpy(mnt->cpuset.comount, co);
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
