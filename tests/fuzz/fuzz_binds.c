/*
 * libFuzzer target: the task's CPU binding as task_init reads it
 * (SLURM_CPU_BIND_TYPE and SLURM_CPU_BIND_LIST, in the task's environment,
 * which the user's --cpu-bind shapes), CPU lists and flag names, against a
 * fixed four-GPU, two-NUMA-node table. Input: TYPE, a newline, LIST.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "table.h"

static const char table[] =
	"gpubind-plan 1\nstatus ok\nmode enforce\nflags -\nrule numa\nshare 1\n"
	"per_task 1\nntasks 4\nnuma 0 0\nnuma 1 1\n"
	"gpu 0 0 0 0 0000:1b:00.0 GPU-aaaa 0 mlx5_0\n"
	"gpu 1 1 1 1 0000:43:00.0 GPU-bbbb 0 mlx5_1\n"
	"gpu 2 2 4 4 0000:9b:00.0 GPU-cccc 1 mlx5_4\n"
	"gpu 3 3 5 5 0000:c2:00.0 GPU-dddd 1 mlx5_5\n"
	"numagpus 0 0,1\nnumagpus 1 2,3\nfallback 0,2,1,3\n"
	"task 0 0 0\ntask 1 2 1\ntask 2 1 0\ntask 3 3 1\nend 21\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct gb_table t;
	static int parsed;
	struct gb_binds b;
	struct gb_result r;
	char err[512], *s, *nl;
	cpu_set_t set;
	unsigned flags;

	if (!parsed) {
		if (gb_table_parse(table, sizeof(table) - 1, &t, err, sizeof(err)))
			abort(); /* the fixed table must parse */
		parsed = 1;
	}
	s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	(void) gb_parse_cpulist(s, &set);
	(void) gb_flags_parse(s, &flags);
	nl = strchr(s, '\n');
	if (nl)
		*nl = '\0';
	gb_binds_parse(&t, s, nl ? nl + 1 : NULL, &b);
	for (int lid = 0; lid < t.ntasks; lid++)
		(void) gb_rule_apply(&t, lid, &b, NULL, NULL, &r, err, sizeof(err));
	free(s);
	return 0;
}
