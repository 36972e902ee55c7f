/*
 * The files slurmstepd runs or reads as root: the launcher, the engine
 * library (srun) and a snapshot= file. A file that another account can
 * replace or change would run as root (the launcher drops privileges only
 * after it started) or decide the binding of every job.
 *
 * Checking a path and then using it by name is a race: whoever owns any
 * directory on the way (a `make install PREFIX=/home/swadmin/opt` layout)
 * can swap it (renameat2 RENAME_EXCHANGE) between the check and the use. So
 * the path is walked from / one component at a time with openat(O_NOFOLLOW),
 * symbolic links resolved here (at most GB_TRUST_MAX_LINKS), every directory
 * checked on its open fd, and the caller gets the fd of the very file that
 * was checked: the launcher is run with execveat(fd, "", AT_EMPTY_PATH)
 * (child.c) and the snapshot is read from its fd. docs/security.md has the
 * rules and why.
 */
#include "gpubind.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GB_TRUST_MAX_LINKS 40  /* as the kernel's own limit (ELOOP) */
#define GB_TRUST_MAX_DEPTH 128 /* directories deep */

struct walk {
	const char *what, *path;        /* for messages: "launcher", as given */
	int fd[GB_TRUST_MAX_DEPTH];     /* checked directories, fd[0] is / */
	size_t atlen[GB_TRUST_MAX_DEPTH]; /* length of at for each */
	int depth;
	int open_to_others;             /* the top directory: sticky, writable by others */
	char at[PATH_MAX];              /* the walked (real) path of the top */
	char *err;
	size_t errlen;
};

/* Owned by root, or by this process's own user (a test, `gpubind check`). */
static int trusted_owner(const struct stat *st)
{
	return st->st_uid == 0 || st->st_uid == geteuid();
}

/* "the directory D of launcher P" or "launcher P". */
static void name_of(const struct walk *w, const char *dir, char *buf,
		    size_t len)
{
	if (dir)
		(void) snprintf(buf, len, "the directory %s of %s %s", dir,
				w->what, w->path);
	else
		(void) snprintf(buf, len, "%s %s", w->what, w->path);
}

/*
 * One file or directory st (dir: its walked path, NULL for the file itself):
 * its owner, its mode, and, in a sticky directory others can write, its
 * owner again (only the entry's owner and root may rename it there).
 */
static int check_one(struct walk *w, const char *dir, const struct stat *st)
{
	char name[64 + 2 * PATH_MAX];

	name_of(w, dir, name, sizeof(name));
	if (w->open_to_others && !trusted_owner(st)) {
		(void) snprintf(w->err, w->errlen,
				"%s is owned by uid %u in %s, a directory others can write: refusing it",
				name, (unsigned) st->st_uid,
				w->atlen[w->depth - 1] ? w->at : "/");
		return -1;
	}
	if (!trusted_owner(st)) {
		(void) snprintf(w->err, w->errlen,
				"%s is owned by uid %u, not root: refusing it",
				name, (unsigned) st->st_uid);
		return -1;
	}
	if (!(st->st_mode & (S_IWGRP | S_IWOTH)))
		return 0;
	/* /tmp and the like: nobody else can rename an entry that root owns. */
	if (dir && S_ISDIR(st->st_mode) && (st->st_mode & S_ISVTX))
		return 0;
	(void) snprintf(w->err, w->errlen,
			"%s is writable by group or others (mode %04o): refusing it; make it root-owned, mode 0755 or stricter",
			name, (unsigned) (st->st_mode & 07777));
	return -1;
}

static void walk_close(struct walk *w)
{
	while (w->depth > 0)
		(void) close(w->fd[--w->depth]);
}

/* Enter the checked directory fd (named comp in the top one). */
static int push_dir(struct walk *w, int fd, const char *comp,
		    const struct stat *st)
{
	size_t len = w->atlen[w->depth - 1];

	if (w->depth == GB_TRUST_MAX_DEPTH ||
	    len + 1 + strlen(comp) >= sizeof(w->at)) {
		(void) snprintf(w->err, w->errlen,
				"%s %s: the path is too deep", w->what,
				w->path);
		(void) close(fd);
		return -1;
	}
	(void) snprintf(w->at + len, sizeof(w->at) - len, "/%s", comp);
	w->fd[w->depth] = fd;
	w->atlen[w->depth] = strlen(w->at);
	w->depth++;
	w->open_to_others = (st->st_mode & (S_IWGRP | S_IWOTH)) != 0;
	return 0;
}

/* ".." : back to the directory above the top (stays at /). */
static void pop_dir(struct walk *w)
{
	struct stat st;

	if (w->depth > 1)
		(void) close(w->fd[--w->depth]);
	w->at[w->atlen[w->depth - 1]] = '\0';
	w->open_to_others = !fstat(w->fd[w->depth - 1], &st) &&
			    (st.st_mode & (S_IWGRP | S_IWOTH));
}

/* Start again at / (an absolute symbolic link). */
static void reset_to_root(struct walk *w)
{
	while (w->depth > 1)
		(void) close(w->fd[--w->depth]);
	pop_dir(w);
}

static int fail_errno(struct walk *w, const char *comp, int e)
{
	size_t len = w->atlen[w->depth - 1];

	(void) snprintf(w->err, w->errlen, "%s %s: %s (at %.*s/%s)", w->what,
			w->path, strerror(e), (int) len, w->at, comp);
	return -1;
}

/*
 * The symbolic link lfd (an O_PATH fd) in place of the component: rest
 * becomes its target followed by what was left of the path.
 */
static int follow(struct walk *w, int lfd, const char *comp, char *rest,
		  size_t restlen, int *links)
{
	char target[PATH_MAX], joined[PATH_MAX];
	ssize_t n = readlinkat(lfd, "", target, sizeof(target) - 1);

	if (n < 0)
		return fail_errno(w, comp, errno);
	target[n] = '\0';
	if (++*links > GB_TRUST_MAX_LINKS)
		return fail_errno(w, comp, ELOOP);
	if ((size_t) snprintf(joined, sizeof(joined), "%s%s%s", target,
			      rest[0] ? "/" : "", rest) >= sizeof(joined))
		return fail_errno(w, comp, ENAMETOOLONG);
	(void) snprintf(rest, restlen, "%s", joined);
	if (target[0] == '/')
		reset_to_root(w);
	return 0;
}

/* The last component, a checked regular file: reopened with flags, the same inode. */
static int open_file(struct walk *w, int pfd, const char *comp,
		     const struct stat *st, int flags)
{
	struct stat again;
	int fd;

	if (flags == O_PATH)
		return pfd;
	fd = openat(w->fd[w->depth - 1], comp,
		    flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	(void) close(pfd);
	if (fd < 0)
		return fail_errno(w, comp, errno);
	if (fstat(fd, &again) || again.st_dev != st->st_dev ||
	    again.st_ino != st->st_ino) {
		(void) close(fd);
		(void) snprintf(w->err, w->errlen,
				"%s %s changed while it was checked: refusing it",
				w->what, w->path);
		return -1;
	}
	return fd;
}

int gb_trust_open(const char *what, const char *path, int flags, char *err,
		  size_t errlen)
{
	struct walk w = { .what = what, .path = path, .err = err,
			  .errlen = errlen };
	char rest[PATH_MAX];
	struct stat st;
	int links = 0, fd = -1;

	if (path[0] != '/') {
		(void) snprintf(err, errlen,
				"%s %s is not an absolute path: refusing it",
				what, path);
		return -1;
	}
	if ((size_t) snprintf(rest, sizeof(rest), "%s", path) >= sizeof(rest)) {
		(void) snprintf(err, errlen, "%s %s: %s", what, path,
				strerror(ENAMETOOLONG));
		return -1;
	}
	w.fd[0] = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (w.fd[0] < 0 || fstat(w.fd[0], &st)) {
		(void) snprintf(err, errlen, "%s %s: /: %s", what, path,
				strerror(errno));
		if (w.fd[0] >= 0)
			(void) close(w.fd[0]);
		return -1;
	}
	w.depth = 1;
	w.atlen[0] = 0;
	if (check_one(&w, "/", &st))
		goto out;
	w.open_to_others = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;

	while (rest[0]) {
		char comp[NAME_MAX + 1], at[PATH_MAX + NAME_MAX + 2], *slash;
		size_t clen;
		int cfd, last;

		/* Take the first component off rest. */
		slash = strchr(rest, '/');
		clen = slash ? (size_t) (slash - rest) : strlen(rest);
		if (clen > NAME_MAX) {
			fail_errno(&w, "", ENAMETOOLONG);
			goto out;
		}
		memcpy(comp, rest, clen);
		comp[clen] = '\0';
		memmove(rest, rest + clen + (slash ? 1 : 0),
			strlen(rest + clen + (slash ? 1 : 0)) + 1);
		if (!clen || !strcmp(comp, "."))
			continue;
		if (!strcmp(comp, "..")) {
			pop_dir(&w);
			continue;
		}
		cfd = openat(w.fd[w.depth - 1], comp,
			     O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (cfd < 0) {
			fail_errno(&w, comp, errno);
			goto out;
		}
		if (fstat(cfd, &st)) {
			fail_errno(&w, comp, errno);
			(void) close(cfd);
			goto out;
		}
		last = !rest[0] || strspn(rest, "/") == strlen(rest);
		(void) snprintf(at, sizeof(at), "%s/%s", w.at, comp);
		if (S_ISLNK(st.st_mode)) {
			/*
			 * Its directory is checked; in a sticky one the link's
			 * owner could still replace it.
			 */
			int bad;

			if (w.open_to_others && !trusted_owner(&st)) {
				(void) snprintf(err, errlen,
						"the symbolic link %s on the way to %s %s is owned by uid %u in a directory others can write: refusing it",
						at, what, path, (unsigned) st.st_uid);
				bad = 1;
			} else {
				bad = follow(&w, cfd, comp, rest, sizeof(rest),
					     &links);
			}
			(void) close(cfd);
			if (bad)
				goto out;
			continue;
		}
		if (!last) {
			if (!S_ISDIR(st.st_mode)) {
				fail_errno(&w, comp, ENOTDIR);
				(void) close(cfd);
				goto out;
			}
			if (check_one(&w, at, &st)) {
				(void) close(cfd);
				goto out;
			}
			if (push_dir(&w, cfd, comp, &st))
				goto out;
			continue;
		}
		/* The file itself. */
		if (!S_ISREG(st.st_mode)) {
			(void) snprintf(err, errlen,
					"%s %s is not a regular file", what,
					path);
			(void) close(cfd);
			goto out;
		}
		if (check_one(&w, NULL, &st)) {
			(void) close(cfd);
			goto out;
		}
		fd = open_file(&w, cfd, comp, &st, flags);
		goto out;
	}
	(void) snprintf(err, errlen, "%s %s is not a regular file", what, path);
out:
	walk_close(&w);
	return fd;
}

int gb_trust_file(const char *what, const char *path, char *err,
		  size_t errlen)
{
	int fd = gb_trust_open(what, path, O_PATH, err, errlen);

	if (fd < 0)
		return -1;
	(void) close(fd);
	return 0;
}
