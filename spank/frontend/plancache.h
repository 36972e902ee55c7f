/*
 * Plan cache: the decision table of a step shape, kept under
 * cache_dir/plans so that a repeated step skips the engine child. Read and
 * written by the C front end in slurmstepd (root), never by the engine.
 */
#ifndef GPUBIND_PLANCACHE_H
#define GPUBIND_PLANCACHE_H

#include <stddef.h>
#include <time.h>

#define GB_PLANCACHE_DEFAULT_ENTRIES 256
#define GB_PLANCACHE_MAX_ENTRIES 100000
#define GB_PLANCACHE_SUBDIR "plans"
/* The Go side's gpubind.DefaultCacheDir: the two languages cannot share a constant. */
#define GB_DEFAULT_CACHE_DIR "/run/gpubind"

struct gb_plancache {
	int usable;          /* key built and the directory may be used */
	int hit;             /* the table came from the cache */
	char dir[1100];      /* CACHE_DIR/plans */
	char path[1200];     /* CACHE_DIR/plans/p-HASH */
	char *key;           /* malloc'd key text (freed by _end or the next _begin) */
	size_t keylen;
	struct timespec begun; /* when the lookup began (before the engine ran) */
	int max_entries;     /* plan_cache=: entries kept (evict) */
};

struct gb_table;
struct gb_child_result;
struct gb_request;

/*
 * Build the key of this step from its request (request.h): the request in
 * the launcher's words (every admin setting, the option, step GPUs, task
 * count, global ids, node name, job user, step environment) plus the
 * identity of everything else the engine reads: the engine file, boot id,
 * driver version, MIG layout, the snapshot, slurm.conf, cgroup.conf and
 * gres.conf, and the NICs' port states for a plan with the nic flag. An
 * entry also holds the identity of every file its table's "depends" lines
 * name (included configuration files too), and a hit needs them unchanged.
 * The request's settings give cache_dir and plan_cache=N (entries, 0 = off).
 * The engine and the snapshot are keyed by the fds trust.c checked
 * (engine_fd, snapshot_fd; -1: none, then by path): the key names the file
 * the step runs from or reads, not whatever the path leads to a moment later.
 * Never fails the step: on any problem the cache is just not used (and the
 * log says why).
 */
void gb_plancache_begin(struct gb_plancache *pc, const char *engine,
			int engine_fd, int snapshot_fd,
			const struct gb_request *req);

/*
 * 1 on a hit: t holds the cached plan, parsed, status ok or warn, with
 * ntasks tasks. 0 on a miss (t untouched): absent, stale, corrupt or
 * untrusted entries are misses, and the log says why for the last three.
 */
int gb_plancache_get(struct gb_plancache *pc, unsigned ntasks,
		     struct gb_table *t);

/*
 * After the engine ran and its table parsed as t: store the text when the
 * plan is one worth repeating (clean exit, status ok or warn, ntasks
 * tasks). Temp file + rename; evicts the oldest beyond max_entries.
 */
void gb_plancache_put(struct gb_plancache *pc, const struct gb_table *t,
		      unsigned ntasks, const struct gb_child_result *res,
		      const char *text, size_t len);

void gb_plancache_end(struct gb_plancache *pc);

#endif
