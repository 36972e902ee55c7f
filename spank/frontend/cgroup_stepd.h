/*
 * Glue between the front end's slurmstepd callbacks (plugin.c, stepd.c) and
 * the cgroup code (cgroup.h). Each function is one call in one callback.
 */
#ifndef GPUBIND_CGROUP_STEPD_H
#define GPUBIND_CGROUP_STEPD_H

#include <slurm/spank.h>
#include <stddef.h>

#include "table.h"

/*
 * slurm_spank_init_post_opt, after the plan is in memory: prepares the
 * cgroups (and v2 BPF programs) when the effective flags hold isolate or
 * cpus. Returns -1 when the step must fail (mode=enforce), else 0.
 */
int gb_cgroup_prepare(spank_t sp, const struct gb_table *plan);

/* slurm_spank_task_post_fork: moves the task into its cgroup(s). */
int gb_cgroup_task_post_fork(spank_t sp, const struct gb_table *plan);

/* slurm_spank_task_exit: removes the task's cgroup(s). */
int gb_cgroup_task_exit(spank_t sp);

/* slurm_spank_exit: cleans up what is left and frees everything. */
void gb_cgroup_exit(void);

#endif
