/*
 * libFuzzer target: the decision table (PROTOCOL.md section 2) as the
 * front end reads it from the launcher's pipe or a plan-cache entry, as
 * root in slurmstepd. The launcher writes it after dropping to the job's
 * user, so its bytes are the user's to choose. A table that parses is then
 * put through the per-task rule for every task (at most 64), as task_init
 * does, with two bindings per task.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "table.h"

static int env_sink(void *ctx, const char *name, const char *value, int overwrite)
{
	(void) ctx; (void) name; (void) value; (void) overwrite;
	return 0;
}

/* Every other GPU device is denied, as a cgroup would. */
static int can_open(const char *dev)
{
	return dev[strlen(dev) - 1] % 2 ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gb_table t;
	struct gb_binds b;
	char err[512];

	if (gb_table_parse((const char *) data, size, &t, err, sizeof(err)))
		return 0;
	gb_binds_parse(&t, "mask_cpu:", "0x1,0x2,0x3,0xf0", &b);
	for (int lid = 0; lid < t.ntasks && lid < 64; lid++) {
		struct gb_result r;
		char line[1024];
		int minors[2 * GB_MAX_PER_TASK];

		if (gb_rule_apply(&t, lid, &b, NULL, NULL, &r, err, sizeof(err)))
			continue;
		if (!gb_result_restrict(&t, &r, can_open, err, sizeof(err)))
			gb_result_widen(&t, &r, lid);
		(void) gb_result_env(&t, &r, env_sink, NULL);
		(void) gb_result_logline(&t, &r, lid, lid, line, sizeof(line));
		/* isolate's device minors (AMD: render and card, "card" lines). */
		(void) gb_gpu_dev_minors(&t, r.gpus, r.ngpus, minors,
					 2 * GB_MAX_PER_TASK, err, sizeof(err));
	}
	gb_table_free(&t);
	return 0;
}
