/*
 * Owner and mode checks of the files slurmstepd runs or has read as root:
 * the launcher, the engine library and a snapshot= file. A file that
 * another user can replace or change would run as root (the launcher drops
 * privileges only after it started) or decide the binding of every job.
 * The plan cache checks its entries the same way (plancache.c).
 */
#include "gpubind.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One file or directory: owned by root or by us, not group/world-writable. */
static int trust_one(const char *what, const char *path, const char *which,
		     const struct stat *st, char *err, size_t errlen)
{
	if (st->st_uid != 0 && st->st_uid != geteuid()) {
		(void) snprintf(err, errlen,
				"%s%s %s is owned by uid %u, not root: refusing it",
				which, what, path, (unsigned) st->st_uid);
		return -1;
	}
	if (st->st_mode & (S_IWGRP | S_IWOTH)) {
		(void) snprintf(err, errlen,
				"%s%s %s is writable by group or others (mode %04o): refusing it; make it root-owned, mode 0755 or stricter",
				which, what, path,
				(unsigned) (st->st_mode & 07777));
		return -1;
	}
	return 0;
}

/* The directory that holds file (a path, real or as given): the same checks. */
static int trust_dir_of(const char *what, const char *path, const char *file,
			char *err, size_t errlen)
{
	char dir[PATH_MAX], which[64 + PATH_MAX], *d;
	struct stat st;

	(void) snprintf(dir, sizeof(dir), "%s", file);
	d = dirname(dir);
	(void) snprintf(which, sizeof(which), "the directory %s of ", d);
	if (stat(d, &st)) {
		(void) snprintf(err, errlen, "%s%s %s: %s", which, what, path,
				strerror(errno));
		return -1;
	}
	return trust_one(what, path, which, &st, err, errlen);
}

int gb_trust_file(const char *what, const char *path, char *err,
		  size_t errlen)
{
	char real[PATH_MAX];
	struct stat st;

	if (!realpath(path, real)) {
		(void) snprintf(err, errlen, "%s %s: %s", what, path,
				strerror(errno));
		return -1;
	}
	if (stat(real, &st)) {
		(void) snprintf(err, errlen, "%s %s: %s", what, path,
				strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		(void) snprintf(err, errlen, "%s %s is not a regular file", what,
				path);
		return -1;
	}
	if (trust_one(what, path, "", &st, err, errlen) ||
	    trust_dir_of(what, path, real, err, errlen))
		return -1;
	/* A symbolic link: whoever may replace it chooses the file too. */
	return trust_dir_of(what, path, path, err, errlen);
}
