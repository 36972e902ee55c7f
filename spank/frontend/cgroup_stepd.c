/*
 * slurmstepd side of the cgroup flags (isolate, cpus): which GPUs and CPUs a
 * task gets, decided in the parent in task_post_fork, and the calls into the
 * cgroup layer (cgroup/cgroup.h). Everything after fork is plain C on memory allocated in
 * init_post_opt (task_post_fork may run in a clone(CLONE_VM) child under
 * contain_spank). docs/cgroups.md explains the whole design.
 */
#include "cgroup_stepd.h"

#include "cgroup/cgroup.h"
#include "gpubind.h"

#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The step's cgroup state, from prepare to exit. */
static struct {
	struct gb_cg *cg;     /* NULL: no cgroup binding in this step */
	pid_t *task_pids;     /* pid of each local task, set in task_post_fork */
	int ntask_pids;
	cpu_set_t *masks;     /* tasks 0..lid's CPU masks, for the rule */
	unsigned char *valid;
} stepcg;

/* mode=enforce fails the step; mode=optional goes on without cgroups. */
static int cg_failed(const char *what)
{
	return gb_failed(what, "going on without cgroup binding", NULL, 0);
}

/*
 * A task cannot be bound. In mode=enforce the step fails: undo what the
 * earlier tasks got, so that nothing of the plugin is left in Slurm's
 * cgroups when Slurm tears the step down.
 */
static int post_fork_failed(const char *what)
{
	char err[1024];

	if (cg_failed(what) == 0)
		return 0;
	for (int i = 0; i < stepcg.ntask_pids; i++)
		if (gb_cg_task_exit(stepcg.cg, i, err, sizeof(err)) != GB_CG_OK)
			gb_error("task %d: undoing its cgroup binding: %s", i,
				 err);
	return -1;
}

int gb_stepcg_active(void)
{
	return stepcg.cg != NULL;
}

int gb_stepcg_prepare(uint32_t job, uint32_t step,
		      const struct gb_table *plan)
{
	struct gb_cg_config cfg;
	int *minors, rc;
	char err[1024], why[1200];
	long t0 = gb_now_us();

	if (!plan || !(plan->flags & (GB_FLAG_ISOLATE | GB_FLAG_CPUS)))
		return 0;
	memset(&cfg, 0, sizeof(cfg));
	if (plan->flags & GB_FLAG_ISOLATE)
		cfg.flags |= GB_CG_ISOLATE;
	if (plan->flags & GB_FLAG_CPUS)
		cfg.flags |= GB_CG_CPUS;
	/* Two device minors per GPU on AMD (render and card node). */
	minors = calloc(2 * (size_t)plan->ngpus + 1, sizeof(*minors));
	stepcg.task_pids = calloc((size_t)plan->ntasks + 1,
				  sizeof(*stepcg.task_pids));
	stepcg.masks = calloc((size_t)plan->ntasks + 1, sizeof(cpu_set_t));
	stepcg.valid = calloc((size_t)plan->ntasks + 1, 1);
	if (!minors || !stepcg.task_pids || !stepcg.masks || !stepcg.valid) {
		free(minors);
		gb_stepcg_exit();
		return cg_failed("cgroup binding: out of memory");
	}
	stepcg.ntask_pids = plan->ntasks;
	for (int i = 0; i < plan->ngpus; i++) {
		if (!strncmp(plan->gpus[i].uuid, "MIG-", 4))
			cfg.mig = 1;
	}
	cfg.job_id = job;
	cfg.step_id = step;
	cfg.ntasks = plan->ntasks;
	cfg.amd = plan->amd;
	cfg.step_minors = minors;
	/* The step GPUs' device minors (NVIDIA /dev/nvidiaN, AMD render and
	 * card): only isolate uses them, and it needs every one. */
	rc = 0;
	if (cfg.flags & GB_CG_ISOLATE) {
		int all[GB_TABLE_MAX_GPUS];

		for (int i = 0; i < plan->ngpus; i++)
			all[i] = i;
		cfg.nstep_minors = gb_gpu_dev_minors(plan, all, plan->ngpus,
						     minors, 2 * plan->ngpus,
						     err, sizeof(err));
		if (cfg.nstep_minors < 0)
			rc = GB_CG_REFUSED;
	}
	if (!rc)
		rc = gb_cg_prepare(&stepcg.cg, &cfg, err, sizeof(err));
	free(minors);
	if (rc) {
		stepcg.cg = NULL;
		gb_stepcg_exit();
		(void) snprintf(why, sizeof(why), "cgroup binding %s: %s",
				rc == GB_CG_REFUSED ? "refused" : "failed", err);
		return cg_failed(why);
	}
	gb_verbose("cgroup binding (%s%s%s) prepared in %.1f ms: %s",
		   (cfg.flags & GB_CG_ISOLATE) ? "isolate" : "",
		   cfg.flags == (GB_CG_ISOLATE | GB_CG_CPUS) ? "," : "",
		   (cfg.flags & GB_CG_CPUS) ? "cpus" : "",
		   (gb_now_us() - t0) / 1000.0, gb_cg_describe(stepcg.cg));
	return 0;
}


/*
 * The task's GPUs, decided here because the cgroup must be set before the
 * task runs. Rule numa: the CPU masks that Slurm gave tasks 0..lid (read
 * from their pids, in the form of SLURM_CPU_BIND_LIST), so the choice is the
 * one the rule makes in the task, which depends on tasks 0..lid only.
 */
static int decide(const struct gb_table *plan, int lid, pid_t pid,
		  const cpu_set_t *step, struct gb_result *r, char *err,
		  size_t errlen)
{
	struct gb_binds binds = { stepcg.masks, stepcg.valid, lid + 1 };
	cpu_set_t own;

	if (sched_getaffinity(pid, sizeof(own), &own) < 0)
		return gb_rule_apply(plan, lid, NULL, NULL, step, r, err,
				     errlen);
	stepcg.masks[lid] = own;
	stepcg.valid[lid] = 1;
	for (int j = 0; plan->rule == GB_RULE_NUMA && j < lid; j++) {
		if (!stepcg.task_pids[j] ||
		    sched_getaffinity(stepcg.task_pids[j], sizeof(cpu_set_t),
				      &stepcg.masks[j]) < 0)
			/* An earlier task's mask is unknown: its own only. */
			return gb_rule_apply(plan, lid, NULL, &own, step, r,
					     err, errlen);
		stepcg.valid[j] = 1;
	}
	return gb_rule_apply(plan, lid, &binds, &own, step, r, err, errlen);
}

int gb_stepcg_task_post_fork(const struct gb_table *plan, int lid, pid_t pid,
			     const cpu_set_t *step_cpus)
{
	int minors[2 * GB_MAX_PER_TASK], nminors, rc;
	struct gb_result r;
	cpu_set_t mems;
	int have_mems = 0;
	char err[1024], why[1200];

	if (!stepcg.cg || !plan)
		return 0;
	if (lid < 0)
		return post_fork_failed("cgroup binding: cannot identify the task");
	if (lid >= stepcg.ntask_pids) {
		(void) snprintf(why, sizeof(why),
				"cgroup binding: task %d is not in the plan", lid);
		return post_fork_failed(why);
	}
	stepcg.task_pids[lid] = pid;
	if (decide(plan, lid, pid, step_cpus, &r, err, sizeof(err))) {
		(void) snprintf(why, sizeof(why), "cgroup binding: task %d: %s",
				lid, err);
		return post_fork_failed(why);
	}
	/* The device cgroup allows exactly the GPUs the task will see:
	 * with visible=first|localid the step's GPUs, else its own. */
	gb_result_widen(plan, &r, lid);
	CPU_ZERO(&mems);
	nminors = 0;
	if (plan->flags & GB_FLAG_ISOLATE) {
		nminors = gb_gpu_dev_minors(plan, r.gpus, r.ngpus, minors,
					    2 * GB_MAX_PER_TASK, err,
					    sizeof(err));
		if (nminors < 0) {
			(void) snprintf(why, sizeof(why),
					"cgroup binding refused for task %d: "
					"isolate: %s", lid, err);
			return post_fork_failed(why);
		}
	}
	for (int i = 0; i < r.ngpus; i++) {
		const struct gb_gpu *g = &plan->gpus[r.gpus[i]];
		int own = i >= r.own_at && i < r.own_at + r.nown;

		if (own && g->numa >= 0 && g->numa < CPU_SETSIZE) {
			CPU_SET(g->numa, &mems);
			have_mems = 1;
		}
	}
	rc = gb_cg_apply(stepcg.cg, lid, pid, minors, nminors,
			 r.set_cpus ? &r.cpus : NULL,
			 (r.set_cpus && have_mems) ? &mems : NULL, err,
			 sizeof(err));
	if (rc == GB_CG_OK) {
		gb_verbose("task %d: cgroup %s", lid,
			   gb_cg_task_path(stepcg.cg, lid));
		return 0;
	}
	if (rc == GB_CG_UNSUPPORTED) {
		gb_error("warning: task %d: %s", lid, err);
		return 0;
	}
	(void) snprintf(why, sizeof(why), "cgroup binding %s for task %d: %s",
			rc == GB_CG_REFUSED ? "refused" : "failed", lid, err);
	return post_fork_failed(why);
}

void gb_stepcg_task_exit(int lid)
{
	char err[1024];

	if (stepcg.cg &&
	    gb_cg_task_exit(stepcg.cg, lid, err, sizeof(err)) != GB_CG_OK)
		gb_error("task %d: cgroup cleanup: %s (retried at step end)",
			 lid, err);
}

void gb_stepcg_exit(void)
{
	char err[1024];

	if (stepcg.cg && gb_cg_fini(stepcg.cg, err, sizeof(err)) != GB_CG_OK)
		gb_error("cgroup cleanup at step end: %s", err);
	free(stepcg.task_pids);
	free(stepcg.masks);
	free(stepcg.valid);
	memset(&stepcg, 0, sizeof(stepcg));
}
