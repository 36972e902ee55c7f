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

static struct gb_cg *cg;
static pid_t *task_pids;  /* pid of each local task, set in task_post_fork */
static int ntask_pids;
static char *maskbuf;     /* room for ntasks hex masks (SLURM_CPU_BIND_LIST) */
static size_t maskbuf_len;

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
	for (int i = 0; i < ntask_pids; i++)
		if (gb_cg_task_exit(cg, i, err, sizeof(err)) != GB_CG_OK)
			gb_error("task %d: undoing its cgroup binding: %s", i,
				 err);
	return -1;
}

int gb_cgroup_prepare(spank_t sp, const struct gb_table *plan)
{
	struct gb_cg_config cfg;
	uint32_t job = 0, step = 0;
	int *minors, rc;
	char err[1024], why[1200];
	spank_err_t src;
	long t0 = gb_now_us();

	if (!plan || !(plan->flags & (GB_FLAG_ISOLATE | GB_FLAG_CPUS)))
		return 0;
	memset(&cfg, 0, sizeof(cfg));
	if (plan->flags & GB_FLAG_ISOLATE)
		cfg.flags |= GB_CG_ISOLATE;
	if (plan->flags & GB_FLAG_CPUS)
		cfg.flags |= GB_CG_CPUS;
	if ((src = spank_get_item(sp, S_JOB_ID, &job)) != ESPANK_SUCCESS ||
	    (src = spank_get_item(sp, S_JOB_STEPID, &step)) != ESPANK_SUCCESS) {
		gb_spank_error("spank_get_item", "S_JOB_ID/S_JOB_STEPID", src);
		return cg_failed("cgroup binding: cannot read the job and step ids");
	}
	minors = calloc((size_t)plan->ngpus + 1, sizeof(*minors));
	task_pids = calloc((size_t)plan->ntasks + 1, sizeof(*task_pids));
	maskbuf_len = (size_t)(plan->ntasks + 1) * MASK_CHARS;
	maskbuf = malloc(maskbuf_len);
	if (!minors || !task_pids || !maskbuf) {
		free(minors);
		gb_cgroup_exit();
		return cg_failed("cgroup binding: out of memory");
	}
	ntask_pids = plan->ntasks;
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
	rc = gb_cg_prepare(&cg, &cfg, err, sizeof(err));
	free(minors);
	if (rc) {
		cg = NULL;
		gb_cgroup_exit();
		(void) snprintf(why, sizeof(why), "cgroup binding %s: %s",
				rc == GB_CG_REFUSED ? "refused" : "failed", err);
		return cg_failed(why);
	}
	gb_verbose("cgroup binding (%s%s%s) prepared in %.1f ms: %s",
		   (cfg.flags & GB_CG_ISOLATE) ? "isolate" : "",
		   cfg.flags == (GB_CG_ISOLATE | GB_CG_CPUS) ? "," : "",
		   (cfg.flags & GB_CG_CPUS) ? "cpus" : "",
		   (gb_now_us() - t0) / 1000.0, gb_cg_describe(cg));
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

		if (j < lid && (!task_pids[j] ||
				sched_getaffinity(task_pids[j], sizeof(m), &m) < 0))
			break;
		n = put_mask(maskbuf + off, maskbuf_len - off - 1,
			     j < lid ? &m : &own);
		if (n < 0)
			break;
		off += (size_t)n;
		if (j == lid) {
			maskbuf[off] = '\0';
			return gb_rule_apply(plan, lid, "mask_cpu", maskbuf,
					     &own, step, r, err, errlen);
		}
		maskbuf[off++] = ',';
	}
	/* Rule table, or the earlier tasks' masks are unknown. */
	return gb_rule_apply(plan, lid, NULL, NULL, &own, step, r, err, errlen);
}

int gb_cgroup_task_post_fork(spank_t sp, const struct gb_table *plan)
{
	int lid = -1, minors[GB_MAX_PER_TASK], rc;
	pid_t pid = 0;
	struct gb_result r;
	cpu_set_t mems;
	int have_mems = 0;
	char err[1024], why[1200];
	spank_err_t src;

	if (!cg || !plan)
		return 0;
	if ((src = spank_get_item(sp, S_TASK_ID, &lid)) != ESPANK_SUCCESS ||
	    (src = spank_get_item(sp, S_TASK_PID, &pid)) != ESPANK_SUCCESS) {
		gb_spank_error("spank_get_item", "S_TASK_ID/S_TASK_PID", src);
		return post_fork_failed("cgroup binding: cannot identify the task");
	}
	if (lid < 0 || lid >= ntask_pids) {
		(void) snprintf(why, sizeof(why),
				"cgroup binding: task %d is not in the plan", lid);
		return post_fork_failed(why);
	}
	task_pids[lid] = pid;
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
	rc = gb_cg_apply(cg, lid, pid, minors, r.ngpus,
			 r.set_cpus ? &r.cpus : NULL,
			 (r.set_cpus && have_mems) ? &mems : NULL, err,
			 sizeof(err));
	if (rc == GB_CG_OK) {
		gb_verbose("task %d: cgroup %s", lid, gb_cg_task_path(cg, lid));
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

int gb_cgroup_task_exit(spank_t sp)
{
	int lid = -1;
	char err[1024];
	spank_err_t src;

	if (!cg)
		return 0;
	if ((src = spank_get_item(sp, S_TASK_ID, &lid)) != ESPANK_SUCCESS) {
		gb_spank_error("spank_get_item", "S_TASK_ID", src);
		return 0;
	}
	if (gb_cg_task_exit(cg, lid, err, sizeof(err)) != GB_CG_OK)
		gb_error("task %d: cgroup cleanup: %s (retried at step end)",
			 lid, err);
	return 0;
}

void gb_cgroup_exit(void)
{
	char err[1024];

	if (cg && gb_cg_fini(cg, err, sizeof(err)) != GB_CG_OK)
		gb_error("cgroup cleanup at step end: %s", err);
	cg = NULL;
	free(task_pids);
	task_pids = NULL;
	ntask_pids = 0;
	free(maskbuf);
	maskbuf = NULL;
	maskbuf_len = 0;
}
