/*
 * slurmstepd side of the cgroup flags (isolate, cpus): which GPUs and CPUs a
 * task gets, decided in the parent in task_post_fork, and the calls into the
 * cgroup code. Everything after fork is plain C on memory allocated in
 * init_post_opt (task_post_fork may run in a clone(CLONE_VM) child under
 * contain_spank). docs/cgroups.md explains the whole design.
 */
#include "cgroup_stepd.h"

#include "cgroup.h"
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
	char *maskbuf;        /* room for ntasks hex masks (SLURM_CPU_BIND_LIST) */
	size_t maskbuf_len;
} stepcg;

#define MASK_CHARS (CPU_SETSIZE / 4 + 4)

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
	minors = calloc((size_t)plan->ngpus + 1, sizeof(*minors));
	stepcg.task_pids = calloc((size_t)plan->ntasks + 1,
				  sizeof(*stepcg.task_pids));
	stepcg.maskbuf_len = (size_t)(plan->ntasks + 1) * MASK_CHARS;
	stepcg.maskbuf = malloc(stepcg.maskbuf_len);
	if (!minors || !stepcg.task_pids || !stepcg.maskbuf) {
		free(minors);
		gb_stepcg_exit();
		return cg_failed("cgroup binding: out of memory");
	}
	stepcg.ntask_pids = plan->ntasks;
	for (int i = 0; i < plan->ngpus; i++) {
		minors[i] = plan->gpus[i].minor;
		if (!strncmp(plan->gpus[i].uuid, "MIG-", 4))
			cfg.mig = 1;
	}
	cfg.job_id = job;
	cfg.step_id = step;
	cfg.ntasks = plan->ntasks;
	cfg.step_minors = minors;
	cfg.nstep_minors = plan->ngpus;
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

/* "0x3" style mask, as in SLURM_CPU_BIND_LIST. */
static int put_mask(char *buf, size_t len, const cpu_set_t *set)
{
	static const char hex[] = "0123456789abcdef";
	int top = -1;
	size_t off = 0;

	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, set))
			top = i;
	if (len < 4)
		return -1;
	buf[off++] = '0';
	buf[off++] = 'x';
	if (top < 0) {
		buf[off++] = '0';
	}
	for (int n = top / 4; n >= 0; n--) {
		int v = 0;

		for (int b = 0; b < 4; b++)
			if (CPU_ISSET(n * 4 + b, set))
				v |= 1 << b;
		if (off + 1 >= len)
			return -1;
		buf[off++] = hex[v];
	}
	buf[off] = '\0';
	return (int)off;
}

/*
 * The task's GPUs, decided here because the cgroup must be set before the
 * task runs. Rule numa: the CPU masks that Slurm gave tasks 0..lid (read
 * from their pids, in the form of SLURM_CPU_BIND_LIST), so the choice is the
 * one the rule makes in the task, which depends on tasks 0..lid only.
 */
static int decide(const struct gb_table *plan, int lid, pid_t pid,
		  struct gb_result *r, char *err, size_t errlen)
{
	const cpu_set_t *step = gb_stepd_step_cpus();
	cpu_set_t own;
	size_t off = 0;

	if (sched_getaffinity(pid, sizeof(own), &own) < 0)
		return gb_rule_apply(plan, lid, NULL, NULL, NULL, step, r, err,
				     errlen);
	for (int j = 0; plan->rule == GB_RULE_NUMA && j <= lid; j++) {
		cpu_set_t m;
		int n;

		if (j < lid && (!stepcg.task_pids[j] ||
				sched_getaffinity(stepcg.task_pids[j], sizeof(m),
						  &m) < 0))
			break;
		n = put_mask(stepcg.maskbuf + off, stepcg.maskbuf_len - off - 1,
			     j < lid ? &m : &own);
		if (n < 0)
			break;
		off += (size_t)n;
		if (j == lid) {
			stepcg.maskbuf[off] = '\0';
			return gb_rule_apply(plan, lid, "mask_cpu",
					     stepcg.maskbuf, &own, step, r, err,
					     errlen);
		}
		stepcg.maskbuf[off++] = ',';
	}
	/* Rule table, or the earlier tasks' masks are unknown. */
	return gb_rule_apply(plan, lid, NULL, NULL, &own, step, r, err, errlen);
}

int gb_stepcg_task_post_fork(const struct gb_table *plan, int lid, pid_t pid)
{
	int minors[GB_MAX_PER_TASK], rc;
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
	if (decide(plan, lid, pid, &r, err, sizeof(err))) {
		(void) snprintf(why, sizeof(why), "cgroup binding: task %d: %s",
				lid, err);
		return post_fork_failed(why);
	}
	CPU_ZERO(&mems);
	for (int i = 0; i < r.ngpus; i++) {
		const struct gb_gpu *g = &plan->gpus[r.gpus[i]];

		minors[i] = g->minor;
		if (g->numa >= 0 && g->numa < CPU_SETSIZE) {
			CPU_SET(g->numa, &mems);
			have_mems = 1;
		}
	}
	rc = gb_cg_apply(stepcg.cg, lid, pid, minors, r.ngpus,
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
	free(stepcg.maskbuf);
	memset(&stepcg, 0, sizeof(stepcg));
}
