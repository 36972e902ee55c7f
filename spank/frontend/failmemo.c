/*
 * A launcher failure remembered for a short time (gpubind.h: gb_failmemo_*).
 *
 * A launcher that times out (NVML's first discovery after boot without
 * persistenced, NVML hung on a wedged GPU) costs its step the whole
 * timeout=. Without a memory every following step of the node would pay it
 * again. Only a step that the admin's default= binds reads the memory: it
 * then runs as Slurm set it up at once. The file is CACHE_DIR/launcher-failed,
 * root's, one line: the launcher's path, a tab, the cause. Its mtime is when
 * it happened; a launcher that plans removes it. `gpubind check` reports it.
 */
#include "gpubind.h"
#include "plancache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int memo_path(char *buf, size_t len)
{
	const char *dir = gb_cache_dir();

	return (size_t) snprintf(buf, len, "%s/%s", dir, GB_FAILMEMO_NAME) >=
	       len ? -1 : 0;
}

int gb_failmemo_get(const char *launcher, char *buf, size_t len,
		    long *age_s)
{
	char path[1100], text[2400], *tab;
	struct stat st;
	ssize_t n;
	int fd;

	if (!len || memo_path(path, sizeof(path)))
		return 0;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return 0;
	/* Only root's own memory counts: nobody else may silence the plugin. */
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 022)) {
		close(fd);
		return 0;
	}
	*age_s = (long) (time(NULL) - st.st_mtime);
	if (*age_s < 0 || *age_s >= GB_FAILMEMO_S) {
		close(fd);
		return 0;
	}
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	text[n > 0 ? n : 0] = '\0';
	text[strcspn(text, "\n")] = '\0';
	/* Another launcher= (the admin fixed it): not this one's failure. */
	if (!(tab = strchr(text, '\t')))
		return 0;
	*tab = '\0';
	if (strcmp(text, launcher))
		return 0;
	(void) snprintf(buf, len, "%s", tab[1] ? tab + 1 : "(cause not recorded)");
	return 1;
}

void gb_failmemo_clear(void)
{
	char path[1100];

	if (!memo_path(path, sizeof(path)) && unlink(path) && errno != ENOENT)
		gb_info("cannot remove %s: %s", path, strerror(errno));
}

void gb_failmemo_put(const char *launcher, const char *why)
{
	char path[1100], tmp[1200];
	const char *dir = gb_cache_dir();
	struct stat st;
	int fd, ok;

	if (memo_path(path, sizeof(path)) ||
	    (size_t) snprintf(tmp, sizeof(tmp), "%s.%ld", path,
			      (long) getpid()) >= sizeof(tmp))
		return;
	/* cache_dir as the engine makes it: root's, writable only by root. */
	if (mkdir(dir, 0755) && errno != EEXIST) {
		gb_info("launcher failure not remembered: mkdir %s: %s", dir,
			strerror(errno));
		return;
	}
	if (lstat(dir, &st) || !S_ISDIR(st.st_mode) ||
	    st.st_uid != geteuid() || (st.st_mode & 022)) {
		gb_info("launcher failure not remembered: %s is not a directory only its owner, uid %u, may write",
			dir, (unsigned) geteuid());
		return;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		  0644);
	if (fd < 0) {
		gb_info("launcher failure not remembered: %s: %s", tmp,
			strerror(errno));
		return;
	}
	ok = dprintf(fd, "%s\t%s\n", launcher, why) > 0;
	ok &= !close(fd);
	if (!ok || rename(tmp, path)) {
		gb_info("launcher failure not remembered: %s: %s", path,
			strerror(errno));
		(void) unlink(tmp);
	}
}
