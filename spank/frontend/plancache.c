/*
 * Plan cache. A step whose shape was planned before on this
 * node reads its decision table from CACHE_DIR/plans/p-HASH instead of
 * forking the engine child: a lookup is a few stats, one open and one
 * read, all in slurmstepd, no fork.
 *
 * Entry file:  "gpubind-plancache 1 KEYLEN TABLELEN\n" KEY TABLE
 * Trust: CACHE_DIR and CACHE_DIR/plans are directories (not links) owned
 * by the effective user (root) and not group/world writable; the entry is
 * a regular file (opened O_NOFOLLOW) with the same owner and mode rules;
 * its size is exactly what the header says; its key equals ours byte for
 * byte; its table parses, has status ok or warn and this step's task
 * count. Anything else is a miss: the engine runs and the entry is
 * rewritten (temp file + rename), never fatal.
 *
 * The key is everything the engine's answer depends on: the request, in
 * the launcher's words (request.c: every plugstack setting, option, step
 * GPUs, task count, global ids, node name, job uid/gid and the step
 * environment the engine reads, less SLURM_JOB_GPUS where unread) and
 * the identity (device, inode, size, mtime, ctime) or content of each
 * file the engine reads besides: the engine itself, the boot id and
 * driver version (the discovery cache's key), the MIG layout, the
 * snapshot, slurm.conf and cgroup.conf (GPU numbering), gres.conf. The
 * engine also names in the table ("depends" lines) every configuration
 * file it read, included ones too; the entry keeps their identities and a
 * hit needs them unchanged.
 */
#include "gpubind.h"
#include "plancache.h"
#include "request.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "table.h"

#define PC_MAGIC "gpubind-plancache 1"
#define PC_HDR_MAX 64
/*
 * Bounds, so that users cannot fill the root-owned cache (a tmpfs) or evict
 * each other's entries: a key over PC_KEY_MAX is not cached; all entries
 * together hold at most PC_TOTAL_MAX bytes; one uid at most a quarter of the
 * entries and of the bytes (evict).
 */
#define PC_KEY_MAX (16 * 1024)
#define PC_TOTAL_MAX (8 * 1024 * 1024)
#define PC_TMP_STALE_S 600
#define PC_DEPENDS_MAX (GB_TABLE_MAX_DEPENDS * 1400)
#define PC_SETTLE_NS (100LL * 1000 * 1000)

struct keybuf {
	char *p;
	size_t len, cap;
	int bad;
};

static void key_bytes(struct keybuf *b, const char *s, size_t n)
{
	if (b->bad)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t c = b->cap ? b->cap : 4096;
		char *x;

		while (c < b->len + n + 1)
			c *= 2;
		if (c > PC_KEY_MAX || !(x = realloc(b->p, c))) {
			b->bad = 1;
			return;
		}
		b->p = x;
		b->cap = c;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void key_str(struct keybuf *b, const char *s)
{
	key_bytes(b, s, strlen(s));
}

/* Bytes outside printable ASCII (and space, '%') as %XX: one line each. */
static void key_escaped(struct keybuf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char) s[i];
		char e[3] = { '%', hex[c >> 4], hex[c & 15] };

		if (c > ' ' && c < 0x7f && c != '%')
			key_bytes(b, (const char *) &s[i], 1);
		else
			key_bytes(b, e, 3);
	}
}

/*
 * "name=PATH dev:ino:size:mtime:ctime\n", or "PATH missing(errno)". With
 * fd >= 0 (the fd trust.c checked and the step then runs or reads) the
 * identity is that of the fd, not of whatever the path names now: the key
 * then describes the very file the engine runs from or reads.
 */
static void key_file_identity(struct keybuf *b, const char *name,
			      const char *path, int fd)
{
	struct stat st;
	char tmp[160];

	key_str(b, name);
	key_str(b, "=");
	key_escaped(b, path, strlen(path));
	if (!path[0]) {
		key_str(b, "\n");
		return;
	}
	if (fd >= 0 ? fstat(fd, &st) : stat(path, &st))
		(void) snprintf(tmp, sizeof(tmp), " missing(%d)\n", errno);
	else
		(void) snprintf(tmp, sizeof(tmp),
				" %llx:%llu:%lld:%lld.%09ld:%lld.%09ld\n",
				(unsigned long long) st.st_dev,
				(unsigned long long) st.st_ino,
				(long long) st.st_size,
				(long long) st.st_mtim.tv_sec,
				st.st_mtim.tv_nsec,
				(long long) st.st_ctim.tv_sec,
				st.st_ctim.tv_nsec);
	key_str(b, tmp);
}

/* "name=CONTENT\n" of a small file (/proc: no useful mtime), "-" if none. */
static void key_file_content(struct keybuf *b, const char *name,
			     const char *path)
{
	char data[4096];
	ssize_t n = -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd >= 0) {
		n = read(fd, data, sizeof(data));
		(void) close(fd);
	}
	key_str(b, name);
	key_str(b, "=");
	if (n < 0)
		key_str(b, "-");
	else
		key_escaped(b, data, (size_t) n);
	key_str(b, "\n");
}

static void key_glob(struct keybuf *b, const char *pattern)
{
	glob_t g;

	if (glob(pattern, 0, NULL, &g) == 0) {
		for (size_t i = 0; i < g.gl_pathc; i++) {
			key_str(b, ",");
			key_escaped(b, g.gl_pathv[i], strlen(g.gl_pathv[i]));
		}
	}
	globfree(&g);
}

/*
 * Whether the option names the nic flag, the one flag whose output
 * (NCCL_IB_HCA, UCX_NET_DEVICES, GPUBIND_NIC: NAME:PORT) reads the port
 * states. The words are the rule's own flag names.
 */
static int option_has_nic(const char *option)
{
	for (const char *p = option; *p;) {
		size_t l = strcspn(p, ",");

		if (gb_flag_lookup(p, l) == GB_FLAG_NIC)
			return 1;
		p += l;
		if (*p == ',')
			p++;
	}
	return 0;
}

static int build_key(struct keybuf *b, const char *engine, int engine_fd,
		     int snapshot_fd, const struct gb_request *req)
{
	const struct gb_config *c = req->conf;
	char path[2300], confdir[1100], why[256], *text;
	const char *conf = req->slurm_conf ? req->slurm_conf : "";
	size_t len;

	if (!conf[0] && req->env[GB_REQ_SLURM_CONF])
		conf = req->env[GB_REQ_SLURM_CONF];
	key_str(b, PC_MAGIC "\n");
	key_file_identity(b, "engine", engine, engine_fd);
	key_file_content(b, "boot", "/proc/sys/kernel/random/boot_id");
	(void) snprintf(path, sizeof(path), "%s/proc/driver/nvidia/version",
			c->root);
	key_file_content(b, "driver", path);
	key_str(b, "mig=");
	(void) snprintf(path, sizeof(path),
			"%s/proc/driver/nvidia/capabilities/gpu*/mig/gi*", c->root);
	key_glob(b, path);
	(void) snprintf(path, sizeof(path),
			"%s/proc/driver/nvidia/capabilities/gpu*/mig/gi*/ci*",
			c->root);
	key_glob(b, path);
	key_str(b, "\n");
	key_file_identity(b, "snapshot", c->snapshot, snapshot_fd);
	key_file_identity(b, "slurm_conf", conf, -1);
	confdir[0] = '\0';
	if (conf[0]) {
		char tmp[1100];

		(void) snprintf(tmp, sizeof(tmp), "%s", conf);
		(void) snprintf(confdir, sizeof(confdir), "%s", dirname(tmp));
		(void) snprintf(path, sizeof(path), "%s/cgroup.conf", confdir);
		key_file_identity(b, "cgroup_conf", path, -1);
	}
	/* The engine's choice of gres.conf (engine.go, plan). */
	if (c->gres_conf[0])
		(void) snprintf(path, sizeof(path), "%s", c->gres_conf);
	else if (confdir[0])
		(void) snprintf(path, sizeof(path), "%s/gres.conf", confdir);
	else
		(void) snprintf(path, sizeof(path), "/etc/slurm/gres.conf");
	key_file_identity(b, "gres_conf", path, -1);
	/* The NIC's port state, which only the nic flag reads (ACTIVE port). */
	if (option_has_nic(req->option)) {
		glob_t g;

		(void) snprintf(path, sizeof(path),
				"%s/sys/class/infiniband/*/ports/*/state", c->root);
		if (glob(path, 0, NULL, &g) == 0)
			for (size_t i = 0; i < g.gl_pathc; i++)
				key_file_content(b, "port", g.gl_pathv[i]);
		globfree(&g);
	}
	key_str(b, "request\n");
	text = gb_request_format(req, 1, &len, why, sizeof(why));
	if (!text)
		return -1;
	key_bytes(b, text, len);
	free(text);
	return b->bad ? -1 : 0;
}

static long long ns_of(const struct timespec *ts)
{
	return (long long) ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

/*
 * The identity of every file the table depends on ("depends" lines: the
 * configuration the engine read, included files too). With begun set (at
 * put), a file whose ctime is not clearly before the engine started may
 * have been read in either state: -1, do not store. File times come from
 * the kernel's coarse clock, at most a few ms behind: PC_SETTLE_NS covers
 * that. "?" (a file the engine could not name) is -1 too.
 */
static int depends_ids(struct keybuf *b, const struct gb_table *t,
		       const struct timespec *begun, const char **why)
{
	for (int i = 0; i < t->ndepends; i++) {
		struct stat st;

		*why = t->depends[i];
		if (!strcmp(t->depends[i], "?"))
			return -1;
		if (begun && !stat(t->depends[i], &st) &&
		    ns_of(&st.st_ctim) >= ns_of(begun) - PC_SETTLE_NS)
			return -1;
		key_file_identity(b, "depends", t->depends[i], -1);
	}
	*why = "";
	return b->bad ? -1 : 0;
}

static uint64_t fnv1a(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char) p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* A directory we may trust: not a link, ours, not group/world writable. */
static int trusted_dir(const char *dir, char *why, size_t len)
{
	struct stat st;

	if (lstat(dir, &st)) {
		(void) snprintf(why, len, "%s: %s", dir, strerror(errno));
		return errno == ENOENT ? 1 : -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		(void) snprintf(why, len, "%s is not a directory", dir);
		return -1;
	}
	if (st.st_uid != geteuid()) {
		(void) snprintf(why, len, "%s is owned by uid %u, not %u", dir,
				(unsigned) st.st_uid, (unsigned) geteuid());
		return -1;
	}
	if (st.st_mode & 022) {
		(void) snprintf(why, len,
				"%s is writable by group or others (mode %03o)",
				dir, (unsigned) (st.st_mode & 0777));
		return -1;
	}
	return 0;
}

/* The key of the last begin: a step that fails before _end leaks none. */
static char *last_key;

void gb_plancache_end(struct gb_plancache *pc)
{
	if (pc->key == last_key)
		last_key = NULL;
	free(pc->key);
	pc->key = NULL;
	pc->usable = 0;
}

void gb_plancache_begin(struct gb_plancache *pc, const char *engine,
			int engine_fd, int snapshot_fd,
			const struct gb_request *req)
{
	const struct gb_config *c = req->conf;
	const char *base = c->cache_dir[0] ? c->cache_dir : GB_DEFAULT_CACHE_DIR;
	struct keybuf b = { 0 };
	char why[1300];
	int rc;

	memset(pc, 0, sizeof(*pc));
	(void) clock_gettime(CLOCK_REALTIME, &pc->begun);
	free(last_key);
	last_key = NULL;
	pc->max_entries = c->plan_cache;
	if (pc->max_entries == 0)
		return;
	rc = trusted_dir(base, why, sizeof(why));
	if (rc < 0) {
		gb_info("plan cache not used: %s", why);
		return;
	}
	/* rc 1: no cache_dir yet; the engine creates it, put() then writes. */
	if (build_key(&b, engine, engine_fd, snapshot_fd, req)) {
		free(b.p);
		gb_info("plan cache not used: the key is %d bytes or more (step environment too large to cache), or memory ran out",
			PC_KEY_MAX);
		return;
	}
	if ((size_t) snprintf(pc->dir, sizeof(pc->dir), "%s/%s", base,
			      GB_PLANCACHE_SUBDIR) >= sizeof(pc->dir)) {
		free(b.p);
		gb_info("plan cache not used: cache_dir path too long");
		return;
	}
	/* The job user's uid names the entry: each uid has its share (evict). */
	(void) snprintf(pc->path, sizeof(pc->path), "%s/p-u%u-%016llx", pc->dir,
			(unsigned) req->uid,
			(unsigned long long) fnv1a(b.p, b.len));
	pc->key = last_key = b.p;
	pc->keylen = b.len;
	pc->usable = 1;
}

/* Read the whole of fd (st_size bytes) into a malloc'd buffer. */
static char *read_all(int fd, size_t size)
{
	char *p = malloc(size + 1);
	size_t got = 0;

	if (!p)
		return NULL;
	while (got < size) {
		ssize_t n = read(fd, p + got, size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			free(p);
			return NULL;
		}
		got += n;
	}
	p[size] = '\0';
	return p;
}

/* Parse "gpubind-plancache 1 KEYLEN TABLELEN\n"; header length or -1. */
static long parse_header(const char *p, size_t size, size_t *kl, size_t *tl)
{
	const char *nl = memchr(p, '\n', size < PC_HDR_MAX ? size : PC_HDR_MAX);
	const char *s = p + strlen(PC_MAGIC " ");
	char *end;
	unsigned long long a, c;

	if (!nl || strncmp(p, PC_MAGIC " ", strlen(PC_MAGIC " ")))
		return -1;
	if (*s < '0' || *s > '9')
		return -1;
	a = strtoull(s, &end, 10);
	if (*end != ' ' || end[1] < '0' || end[1] > '9')
		return -1;
	c = strtoull(end + 1, &end, 10);
	if (end != nl)
		return -1;
	*kl = a;
	*tl = c;
	return nl - p + 1;
}

int gb_plancache_get(struct gb_plancache *pc, unsigned ntasks,
		     struct gb_table *t)
{
	struct stat st;
	char why[1400], err[512];
	char *data;
	size_t kl, tl;
	long hl;
	int fd;

	if (!pc->usable || trusted_dir(pc->dir, why, sizeof(why)))
		return 0; /* no plans/ yet (or untrusted: put() says why) */
	fd = open(pc->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		if (errno != ENOENT)
			gb_error("warning: plan cache entry %s ignored: open: %s",
				 pc->path, strerror(errno));
		return 0;
	}
	if (fstat(fd, &st)) {
		gb_error("warning: plan cache entry %s ignored: fstat: %s",
			 pc->path, strerror(errno));
		(void) close(fd);
		return 0;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 022)) {
		gb_error("warning: plan cache entry %s ignored: not a regular file owned by uid %u and writable only by it (uid %u, mode %03o); the engine runs and replaces it",
			 pc->path, (unsigned) geteuid(), (unsigned) st.st_uid,
			 (unsigned) (st.st_mode & 0777));
		(void) close(fd);
		return 0;
	}
	if ((size_t) st.st_size > PC_HDR_MAX + pc->keylen + PC_DEPENDS_MAX +
				      GB_TABLE_MAX_BYTES) {
		gb_info("plan cache entry %s ignored: %lld bytes, more than a plan of this key can be; the engine runs and rewrites it",
			pc->path, (long long) st.st_size);
		(void) close(fd);
		return 0;
	}
	data = read_all(fd, (size_t) st.st_size);
	(void) close(fd);
	if (!data) {
		gb_info("plan cache entry %s ignored: cannot read it (or out of memory)",
			pc->path);
		return 0;
	}
	hl = parse_header(data, (size_t) st.st_size, &kl, &tl);
	if (hl < 0 || kl > (size_t) st.st_size || tl > (size_t) st.st_size ||
	    (size_t) hl + kl + tl != (size_t) st.st_size) {
		gb_info("plan cache entry %s ignored: corrupt (bad header or size); the engine runs and rewrites it",
			pc->path);
		free(data);
		return 0;
	}
	/* The stored key is ours followed by the identities of the files the
	 * plan depends on (checked once the table names them). */
	if (kl < pc->keylen || kl > pc->keylen + PC_DEPENDS_MAX ||
	    memcmp(data + hl, pc->key, pc->keylen)) {
		/* Another key with the same hash, or a stale entry. */
		gb_debug("plan cache entry %s holds another key: miss",
			 pc->path);
		free(data);
		return 0;
	}
	if (gb_table_parse(data + hl + kl, tl, t, err, sizeof(err))) {
		gb_info("plan cache entry %s ignored: corrupt table (%s); the engine runs and rewrites it",
			pc->path, err);
		free(data);
		return 0;
	}
	{
		struct keybuf ids = { 0 };
		const char *file;
		int same = !depends_ids(&ids, t, NULL, &file) &&
			   ids.len == kl - pc->keylen &&
			   !memcmp(ids.p ? ids.p : "", data + hl + pc->keylen,
				   ids.len);

		free(ids.p);
		if (!same) {
			gb_debug("plan cache entry %s: a file the plan was made from changed: miss",
				 pc->path);
			free(data);
			gb_table_free(t);
			return 0;
		}
	}
	free(data);
	if (t->status == GB_STATUS_ERROR || t->ntasks != (int) ntasks) {
		gb_info("plan cache entry %s ignored: status error or %d tasks for %u; the engine runs and rewrites it",
			pc->path, t->ntasks, ntasks);
		gb_table_free(t);
		return 0;
	}
	pc->hit = 1;
	return 1;
}

struct ent {
	char name[64];
	struct timespec mtime;
	off_t size;
	char uid[24];        /* from the name p-u<UID>-HASH; "" for older names */
	int gone;
};

static int ent_cmp(const void *a, const void *b)
{
	const struct ent *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* By uid, then newest first. */
static int uid_cmp(const void *a, const void *b)
{
	const struct ent *x = *(const struct ent *const *) a;
	const struct ent *y = *(const struct ent *const *) b;
	int c = strcmp(x->uid, y->uid);

	return c ? c : ent_cmp(y, x);
}

static void ent_uid(struct ent *e)
{
	const char *u = e->name + 2, *dash;

	e->uid[0] = '\0';
	if (*u != 'u' || !(dash = strchr(u, '-')) ||
	    (size_t) (dash - u) >= sizeof(e->uid))
		return;
	memcpy(e->uid, u, (size_t) (dash - u));
	e->uid[dash - u] = '\0';
}

static void ent_drop(int dfd, const char *dir, struct ent *e)
{
	if (unlinkat(dfd, e->name, 0) && errno != ENOENT)
		gb_info("plan cache: cannot evict %s/%s: %s", dir, e->name,
			strerror(errno));
	e->gone = 1;
}

/*
 * Bounds (oldest written go first; stale temps dropped): first each uid to a
 * quarter of max entries (all of a cache under 16 entries) and of
 * PC_TOTAL_MAX bytes, so that one user cannot evict the others; then all
 * entries to max and PC_TOTAL_MAX bytes.
 */
static void evict(const char *dir, int max)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	struct ent *v = NULL, **by_uid;
	size_t n = 0, cap = 0, share = max >= 16 ? (size_t) max / 4 : (size_t) max;
	long long total = 0, bytes = 0;
	size_t count = 0;
	time_t now = time(NULL);

	if (!d) {
		gb_info("plan cache eviction skipped: opendir %s: %s", dir,
			strerror(errno));
		return;
	}
	while ((e = readdir(d))) {
		struct stat st;
		int tmp = !strncmp(e->d_name, ".tmp-", 5);

		if ((strncmp(e->d_name, "p-", 2) && !tmp) ||
		    strlen(e->d_name) >= sizeof(v->name))
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW))
			continue;
		if (tmp) {
			if (now - st.st_mtim.tv_sec > PC_TMP_STALE_S)
				(void) unlinkat(dirfd(d), e->d_name, 0);
			continue;
		}
		if (n == cap) {
			struct ent *x = realloc(v, (cap ? cap * 2 : 64) * sizeof(*v));

			if (!x) {
				gb_info("plan cache eviction skipped: out of memory");
				goto out;
			}
			v = x;
			cap = cap ? cap * 2 : 64;
		}
		memset(&v[n], 0, sizeof(v[n]));
		(void) snprintf(v[n].name, sizeof(v[n].name), "%s", e->d_name);
		v[n].mtime = st.st_mtim;
		v[n].size = st.st_size;
		ent_uid(&v[n]);
		n++;
	}
	qsort(v, n, sizeof(*v), ent_cmp);
	/* Each uid's share, newest kept: by uid, newest first. */
	by_uid = malloc((n ? n : 1) * sizeof(*by_uid));
	if (!by_uid) {
		gb_info("plan cache eviction skipped: out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		by_uid[i] = &v[i];
	qsort(by_uid, n, sizeof(*by_uid), uid_cmp);
	for (size_t i = 0, mine = 0; i < n; i++) {
		if (i == 0 || strcmp(by_uid[i]->uid, by_uid[i - 1]->uid)) {
			mine = 0;
			bytes = 0;
		}
		mine++;
		bytes += by_uid[i]->size;
		if (by_uid[i]->uid[0] &&
		    (mine > share || bytes > PC_TOTAL_MAX / 4))
			ent_drop(dirfd(d), dir, by_uid[i]);
	}
	free(by_uid);
	for (size_t i = 0; i < n; i++)
		if (!v[i].gone) {
			count++;
			total += v[i].size;
		}
	for (size_t i = 0; i < n && (count > (size_t) max ||
				     total > PC_TOTAL_MAX); i++) {
		if (v[i].gone)
			continue;
		ent_drop(dirfd(d), dir, &v[i]);
		count--;
		total -= v[i].size;
	}
out:
	free(v);
	(void) closedir(d);
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= w;
	}
	return 0;
}

static void store(struct gb_plancache *pc, const struct gb_table *t,
		  unsigned ntasks, const struct gb_child_result *res,
		  const char *text, size_t len, const struct keybuf ids)
{
	char tmp[1300], hdr[PC_HDR_MAX], why[1400];
	int fd, n, rc;

	/* Only clean answers are worth repeating. */
	if (t->status == GB_STATUS_ERROR || t->ntasks != (int) ntasks ||
	    res->timed_out || res->killed || !res->exited ||
	    !WIFEXITED(res->status) || WEXITSTATUS(res->status))
		return;
	rc = trusted_dir(pc->dir, why, sizeof(why));
	if (rc == 1) {
		/*
		 * No cache_dir yet: the engine makes it when it caches a
		 * discovery, which source=snapshot never does.
		 */
		int mk = mkdir(pc->dir, 0700) ? errno : 0;

		if (mk == ENOENT) {
			char base[sizeof(pc->dir)];

			(void) snprintf(base, sizeof(base), "%s", pc->dir);
			*strrchr(base, '/') = '\0';
			if (mkdir(base, 0755) && errno != EEXIST) {
				gb_info("plan cache not written: mkdir %s: %s",
					base, strerror(errno));
				return;
			}
			mk = mkdir(pc->dir, 0700) ? errno : 0;
		}
		if (mk && mk != EEXIST) {
			gb_info("plan cache not written: mkdir %s: %s", pc->dir,
				strerror(mk));
			return;
		}
		rc = trusted_dir(pc->dir, why, sizeof(why));
	}
	if (rc) {
		gb_info("plan cache not written: %s", why);
		return;
	}
	n = snprintf(hdr, sizeof(hdr), PC_MAGIC " %zu %zu\n",
		     pc->keylen + ids.len, len);
	(void) snprintf(tmp, sizeof(tmp), "%s/.tmp-XXXXXX", pc->dir);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		gb_info("plan cache not written: mkstemp in %s: %s", pc->dir,
			strerror(errno));
		return;
	}
	if (fchmod(fd, 0600) || write_all(fd, hdr, (size_t) n) ||
	    write_all(fd, pc->key, pc->keylen) ||
	    write_all(fd, ids.p ? ids.p : "", ids.len) ||
	    write_all(fd, text, len)) {
		gb_info("plan cache not written: %s: %s", tmp, strerror(errno));
		(void) close(fd);
		(void) unlink(tmp);
		return;
	}
	if (close(fd)) {
		gb_info("plan cache not written: close %s: %s", tmp,
			strerror(errno));
		(void) unlink(tmp);
		return;
	}
	if (rename(tmp, pc->path)) {
		gb_info("plan cache not written: rename %s to %s: %s", tmp,
			pc->path, strerror(errno));
		(void) unlink(tmp);
		return;
	}
	evict(pc->dir, pc->max_entries);
}

void gb_plancache_put(struct gb_plancache *pc, const struct gb_table *t,
		      unsigned ntasks, const struct gb_child_result *res,
		      const char *text, size_t len)
{
	struct keybuf ids = { 0 };
	const char *file;

	if (!pc->usable || pc->hit)
		return;
	if (depends_ids(&ids, t, &pc->begun, &file) || ids.len > PC_DEPENDS_MAX) {
		if (!strcmp(file, "?")) /* every step of an NVLink fabric node */
			gb_verbose("plan cache not written: the plan depends on state no file records (a multi-node NVLink fabric, or a file that cannot be named)");
		else
			gb_info("plan cache not written: %s, which the plan was made from, changed as the step began, or cannot be named",
				file[0] ? file : "(too many files)");
	} else
		store(pc, t, ntasks, res, text, len, ids);
	free(ids.p);
}
