/*
 * libFuzzer target: a plan-cache entry (spank/frontend/plancache.c) as
 * gb_plancache_get reads it, as root, from cache_dir/plans: header, key,
 * the identities of the files the plan depends on, then the table. The
 * entry's directory is root's, but the table in it came from a launcher
 * that ran as the job's user. The input is the whole file; the key it must
 * hold to get past the key check is "KEY\n" (the seeds have it).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpubind.h"
#include "plancache.h"
#include "table.h"

static struct gb_plancache pc;
static char key[] = "KEY\n";

static void cleanup(void)
{
	(void) unlink(pc.path);
	(void) rmdir(pc.dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char tmpl[] = "/dev/shm/gpubind-fuzz-XXXXXX";
	char *d;

	(void) argc; (void) argv;
	d = mkdtemp(tmpl);
	if (!d) {
		d = mkdtemp(strcpy(tmpl, "/tmp/gpubind-fuzz-XXXXXX"));
		if (!d)
			abort();
	}
	pc.usable = 1;
	(void) snprintf(pc.dir, sizeof(pc.dir), "%s", d);
	(void) snprintf(pc.path, sizeof(pc.path), "%s/p-entry", d);
	pc.key = key;
	pc.keylen = sizeof(key) - 1;
	(void) atexit(cleanup);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gb_table t;
	int fd = open(pc.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0)
		abort();
	if (write(fd, data, size) != (ssize_t) size)
		abort();
	(void) close(fd);
	for (unsigned ntasks = 1; ntasks <= 4; ntasks *= 4)
		if (gb_plancache_get(&pc, ntasks, &t))
			gb_table_free(&t);
	return 0;
}
