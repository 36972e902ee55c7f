/*
 * Glue between the front end's slurmstepd callbacks (stepd.c) and the cgroup
 * layer (cgroup/cgroup.h, gb_cg_*): the isolate and cpus flags. Each function is
 * one call in one callback; none calls Slurm (stepd.c reads the items).
 */
#ifndef GPUBIND_CGROUP_STEPD_H
#define GPUBIND_CGROUP_STEPD_H

#include <sched.h>
#include <stdint.h>
#include <sys/types.h>

#include "table.h"

/*
 * slurm_spank_init_post_opt, after the plan is in memory: prepares the
 * cgroups (and v2 BPF programs) when the effective flags hold isolate or
 * cpus. Returns -1 when the step must fail (mode=enforce), else 0.
 */
int gb_stepcg_prepare(uint32_t job, uint32_t step,
		      const struct gb_table *plan);

/* Whether prepare made cgroup state for this step. */
int gb_stepcg_active(void);

/*
 * slurm_spank_task_post_fork: moves local task lid (process pid) into its
 * cgroup(s). lid < 0: Slurm could not say which task it is. step_cpus: the
 * CPUs the step may use (NULL when unknown), for the rule's CPU narrowing.
 * Returns -1 when the step must fail (after undoing what earlier tasks got),
 * else 0.
 */
int gb_stepcg_task_post_fork(const struct gb_table *plan, int lid, pid_t pid,
			     const cpu_set_t *step_cpus);

/* slurm_spank_task_exit: removes task lid's cgroup(s). */
void gb_stepcg_task_exit(int lid);

/* slurm_spank_exit: cleans up what is left and frees everything. */
void gb_stepcg_exit(void);

#endif
