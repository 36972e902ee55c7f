/*
 * slurmstepd (remote context). init_post_opt reads the step's facts and plans
 * the whole step once, in a forked engine child, before any task exists;
 * task_init applies the per-task rule in plain C inside each task child
 * (docs/architecture.md).
 */
#include "gpubind.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "cgroup_stepd.h"
#include "plancache.h"
#include "request.h"
#include "table.h"
#include "fabric.h"

/*
 * The step as slurmstepd's callbacks see it: its facts, read once by
 * step_get_info at the start of init_post_opt; its plan; and why it has
 * none. Cleared by gb_stepd_exit.
 */
static struct {
	uint32_t job_id;            /* S_JOB_ID */
	uint32_t step_id;           /* S_JOB_STEPID */
	uint32_t local_task_count;  /* S_JOB_LOCAL_TASK_COUNT */
	uint32_t *global_ids;       /* S_JOB_LOCAL_TO_GLOBAL_ID of each local task */
	uid_t uid;                  /* S_JOB_UID */
	gid_t gid;                  /* S_JOB_GID */
	char *node_name;            /* SLURMD_NODENAME (see step_node_name) */
	long start_us;              /* when init_post_opt began */
	/*
	 * The step's CPUs: slurmstepd's own affinity once task/cgroup moved it
	 * into the step's cpuset (task_p_pre_setuid, which Slurm runs before
	 * slurm_spank_user_init). A task mask that holds all of them is no
	 * per-task binding. Written before the tasks are forked, so they
	 * inherit it.
	 */
	cpu_set_t cpus;
	int have_cpus;
	struct gb_table plan;
	int plan_active;
	/*
	 * Why this step has no plan. In init_post_opt the user's terminal is
	 * not connected yet (Slurm would only say "Plugin initialization
	 * failed"), so the tasks report it: with mode=enforce every task fails
	 * in task_init, with mode=optional local task 0 prints the warning.
	 */
	char problem[2400];
	int problem_fatal;
	/*
	 * The option came from the admin's default= (neither the user's
	 * --gpu-bind-topo nor SLURM_GPU_BIND_TOPO): a step the default cannot
	 * bind, or one the user bound with Slurm's own options, is left exactly
	 * as Slurm set it up.
	 */
	int from_default;
	/* From default=: what the environment alone decided (rule/default.c). */
	enum gb_default_verdict verdict;
	/* The user's own GPU binding seen with their explicit option (warned once). */
	char user_bind[512];
	/* A job-wide --gpu-bind-topo that gives the tasks fewer GPUs than the
	 * step has: global task 0 says so once. */
	char inherited_cut[600];
} step;

void gb_stepd_user_init(void)
{
	step.have_cpus = !sched_getaffinity(0, sizeof(step.cpus), &step.cpus);
	if (!step.have_cpus)
		gb_debug("sched_getaffinity: %s; the step's CPUs are unknown",
			 strerror(errno));
}

/* The CPUs the step may use (its cpuset), NULL when unknown. */
static const cpu_set_t *step_cpus(void)
{
	return step.have_cpus ? &step.cpus : NULL;
}

const struct gb_table *gb_stepd_plan(void)
{
	return step.plan_active ? &step.plan : NULL;
}

static int get_u32(spank_t sp, spank_item_t item, const char *name,
		   uint32_t *v)
{
	spank_err_t rc = spank_get_item(sp, item, v);

	if (rc != ESPANK_SUCCESS) {
		gb_spank_error("spank_get_item", name, rc);
		return -1;
	}
	return 0;
}

/*
 * slurmstepd's own SLURMD_NODENAME (it sets it at start) names this node.
 * The job's may not: an srun inside sbatch carries the batch host's name to
 * every node of the step. Then the job's, then the host name. NULL only on a
 * failed spank_getenv (logged).
 */
static char *step_node_name(spank_t sp)
{
	char host[256];
	char *nn = getenv("SLURMD_NODENAME") ?
		strdup(getenv("SLURMD_NODENAME")) : NULL;
	int failed = 0;

	if (!nn)
		nn = gb_spank_getenv(sp, "SLURMD_NODENAME", &failed);
	if (failed)
		return NULL;
	if (!nn && !gethostname(host, sizeof(host))) {
		host[sizeof(host) - 1] = '\0';
		host[strcspn(host, ".")] = '\0';
		nn = strdup(host);
	}
	return nn ? nn : strdup("");
}

/* These steps only pass the option on to the steps inside them. */
static int step_passes_option_on(void)
{
	return step.step_id == SLURM_BATCH_SCRIPT ||
	       step.step_id == SLURM_EXTERN_CONT ||
	       step.step_id == SLURM_INTERACTIVE_STEP;
}

/*
 * Fills step's facts (for a step that passes the option on, its ids only);
 * each item that cannot be read is logged by name. Returns 0 or -1.
 */
static int step_get_info(spank_t sp)
{
	int failed = 0;
	spank_err_t rc;

	failed |= get_u32(sp, S_JOB_ID, "S_JOB_ID", &step.job_id);
	failed |= get_u32(sp, S_JOB_STEPID, "S_JOB_STEPID", &step.step_id);
	failed |= get_u32(sp, S_JOB_LOCAL_TASK_COUNT, "S_JOB_LOCAL_TASK_COUNT",
			  &step.local_task_count);
	if (failed)
		return -1;
	if (step_passes_option_on())
		return 0;
	if ((rc = spank_get_item(sp, S_JOB_UID, &step.uid)) != ESPANK_SUCCESS) {
		gb_spank_error("spank_get_item", "S_JOB_UID", rc);
		failed = 1;
	}
	if ((rc = spank_get_item(sp, S_JOB_GID, &step.gid)) != ESPANK_SUCCESS) {
		gb_spank_error("spank_get_item", "S_JOB_GID", rc);
		failed = 1;
	}
	step.node_name = step_node_name(sp);
	failed |= !step.node_name;
	if (failed)
		return -1;
	step.global_ids = calloc((size_t) step.local_task_count + 1,
				 sizeof(*step.global_ids));
	if (!step.global_ids) {
		gb_error("out of memory for %u task ids", step.local_task_count);
		return -1;
	}
	for (uint32_t i = 0; i < step.local_task_count; i++) {
		rc = spank_get_item(sp, S_JOB_LOCAL_TO_GLOBAL_ID, i,
				    &step.global_ids[i]);
		if (rc != ESPANK_SUCCESS) {
			gb_spank_error("spank_get_item",
				       "S_JOB_LOCAL_TO_GLOBAL_ID", rc);
			return -1;
		}
	}
	return 0;
}

/*
 * Plan failed: enforce fails the step, optional runs it unbound (a step that
 * only default= binds: default_mode=, gb_failed). Either way init_post_opt
 * succeeds and the tasks report it (step.problem): all of them under
 * enforce, the first task of the node otherwise.
 */
static int plan_failed(const char *what)
{
	step.problem_fatal = gb_failed(what, step.from_default ?
				       "the step runs as Slurm set it up" :
				       "tasks run unbound", step.problem,
				       sizeof(step.problem)) < 0;
	return 0;
}

/* The launcher itself failed (not the plan): remember it (failmemo.c). */
static void launcher_failed(const char *launcher,
			    const struct gb_child_result *res, int rc,
			    const char *why)
{
	if (rc || res->timed_out || res->killed ||
	    (res->exited && (WIFSIGNALED(res->status) ||
			     (WIFEXITED(res->status) &&
			      WEXITSTATUS(res->status)))))
		gb_failmemo_put(launcher, why);
}

static void describe_exit(const struct gb_child_result *res, char *buf,
			  size_t len)
{
	if (res->unreaped)
		(void) snprintf(buf, len, " (engine killed at the timeout, not "
				"gone %d ms later: left to slurmstepd)",
				GB_REAP_GRACE_MS);
	else if (res->timed_out)
		(void) snprintf(buf, len, " (engine killed at the timeout)");
	else if (res->killed)
		(void) snprintf(buf, len, " (engine killed)");
	else if (res->exited && WIFSIGNALED(res->status))
		(void) snprintf(buf, len, " (engine crashed: signal %d)",
				WTERMSIG(res->status));
	else if (res->exited && WIFEXITED(res->status) &&
		 WEXITSTATUS(res->status))
		(void) snprintf(buf, len, " (engine exit status %d)",
				WEXITSTATUS(res->status));
	else
		buf[0] = '\0';
}

/*
 * The admin's isolate=/cpus= force and never lists (plugstack), applied to
 * the plan here too: the engine applies them, but it runs as the job's
 * user, and what the admin forbids must not rest on its table.
 */
static void apply_admin_flags(struct gb_table *t)
{
	unsigned force = 0, never = 0;

	if (gb_flags_parse(gb_config()->force, &force) ||
	    gb_flags_parse(gb_config()->never, &never))
		never = ~0u; /* cannot happen: args.c wrote them */
	t->flags = (t->flags | force) & ~never;
}

/*
 * The table of this step from the launcher, in step.plan. Returns 0, or
 * plan_failed's value with why it failed.
 */
static int plan_from_engine(const char *launcher, int launcher_fd,
			    int snapshot_fd, const char *request,
			    const char *option, struct gb_plancache *pc)
{
	char err[1024], why[2200], ex[128];
	struct gb_child_result res;
	uint32_t ntasks = step.local_task_count;
	int rc;

	rc = gb_run_launcher(launcher_fd, launcher, snapshot_fd, request,
			     gb_config()->timeout_ms, &res, err, sizeof(err));
	describe_exit(&res, ex, sizeof(ex));
	if (rc) {
		free(res.out);
		(void) snprintf(why, sizeof(why), "plan for --%s=%s failed: %s%s",
				GB_OPTION_NAME, option, err, ex);
		launcher_failed(launcher, &res, rc, why);
		return plan_failed(why);
	}
	rc = gb_table_parse(res.out, res.outlen, &step.plan, err, sizeof(err));
	if (!rc)
		gb_plancache_put(pc, &step.plan, ntasks, &res, res.out, res.outlen);
	free(res.out);
	if (rc) {
		(void) snprintf(why, sizeof(why),
				"plan for --%s=%s unusable: %s%s",
				GB_OPTION_NAME, option, err, ex);
		launcher_failed(launcher, &res, 0, why);
		return plan_failed(why);
	}
	if (!res.timed_out && !res.killed)
		gb_failmemo_clear();
	if (step.plan.status == GB_STATUS_ERROR) {
		size_t off = 0;

		off = snprintf(why, sizeof(why), "--%s=%s:", GB_OPTION_NAME,
			       option);
		for (int i = 0; i < step.plan.nmessages && off < sizeof(why); i++)
			off += snprintf(why + off, sizeof(why) - off, " %s",
					step.plan.messages[i]);
		if (!step.plan.nmessages && off < sizeof(why))
			(void) snprintf(why + off, sizeof(why) - off,
					" the engine failed%s", ex);
		gb_table_free(&step.plan);
		return plan_failed(why);
	}
	if (step.plan.ntasks != (int) ntasks) {
		(void) snprintf(why, sizeof(why),
				"plan for --%s=%s has %d tasks, the step has %u here",
				GB_OPTION_NAME, option, step.plan.ntasks, ntasks);
		gb_table_free(&step.plan);
		return plan_failed(why);
	}
	if (res.timed_out)
		gb_error("warning: %s; the plan it wrote is used", err);
	return 0;
}

/*
 * The step's plan, in step.plan (step.plan_active), from the plan cache or
 * the engine. Returns plan_failed's value when there is none.
 */
static int plan_step(spank_t sp, const char *option)
{
	const struct gb_config *conf = gb_config();
	struct gb_request req = {
		.conf = conf,
		.option = option,
		.enforce = !conf->mode_optional || step.from_default,
		.uid = step.uid,
		.gid = step.gid,
		.node_name = step.node_name,
		.local_tasks = step.local_task_count,
		.global_ids = step.global_ids,
	};
	char launcher[1024], flags[64], err[2400], *text = NULL;
	struct gb_plancache pc;
	size_t len;
	int rc, lfd = -1, sfd = -1;

	/*
	 * What runs as root, or is read as root, must be root's, all the way
	 * from / (trust.c); the launcher runs from, and the snapshot is read
	 * from, the fd that was checked.
	 */
	err[0] = '\0';
	if (gb_launcher_path(launcher, sizeof(launcher)) ||
	    (lfd = gb_trust_open("launcher", launcher, O_PATH, err,
				 sizeof(err))) < 0 ||
	    (conf->snapshot[0] &&
	     (sfd = gb_trust_open("snapshot", conf->snapshot, O_RDONLY, err,
				  sizeof(err))) < 0)) {
		if (lfd >= 0)
			(void) close(lfd);
		return plan_failed(err[0] ? err : "the launcher path is too long");
	}

	rc = gb_request_fill(&req, sp);
	if (!rc && !(text = gb_request_format(&req, 0, &len, err,
					       sizeof(err)))) {
		gb_error("cannot build the engine request: %s", err);
		rc = -1;
	}
	if (rc) {
		gb_request_free(&req);
		(void) close(lfd);
		if (sfd >= 0)
			(void) close(sfd);
		return plan_failed("cannot build the plan request");
	}
	/* A step shape planned before: its table, no launcher. */
	gb_plancache_begin(&pc, launcher, lfd, sfd, &req);
	rc = 0;
	if (!gb_plancache_get(&pc, step.local_task_count, &step.plan)) {
		char memo[1000];
		long age;

		/* A default binding does not wait again for a launcher that
		 * just failed (a hung NVML): as Slurm set the step up. */
		if (step.from_default &&
		    gb_failmemo_get(launcher, memo, sizeof(memo), &age)) {
			(void) snprintf(err, sizeof(err),
					"the launcher %.1000s failed %ld s ago (%s); not started again for %ld s",
					launcher, age, memo,
					(long) GB_FAILMEMO_S - age);
			rc = plan_failed(err);
		} else {
			rc = plan_from_engine(launcher, lfd, sfd, text, option,
					      &pc);
		}
	}
	free(text);
	gb_request_free(&req);
	(void) close(lfd);
	if (sfd >= 0)
		(void) close(sfd);
	if (rc || step.problem[0]) {
		gb_plancache_end(&pc);
		return rc;
	}
	if (step.plan.ngpus == 0) {
		/*
		 * A step without GPUs here (a CPU-only step on a node where Slurm
		 * manages GPUs, --gres=none, --gpus=0): nothing to bind, and nothing
		 * changed, not even a failure (docs/admin.md "default=").
		 */
		for (int i = 0; i < step.plan.nmessages; i++)
			gb_verbose("%s", step.plan.messages[i]);
		gb_verbose("the step has no GPUs on this node: not bound, its environment and devices are Slurm's");
		gb_table_free(&step.plan);
		gb_plancache_end(&pc);
		return 0;
	}
	apply_admin_flags(&step.plan);
	for (int i = 0; i < step.plan.nmessages; i++) {
		if (step.plan.status == GB_STATUS_WARN)
			gb_error("warning: %s", step.plan.messages[i]);
		else
			gb_verbose("%s", step.plan.messages[i]);
	}
	step.plan_active = 1;
	gb_flags_format(step.plan.flags, flags, sizeof(flags));
	gb_verbose("step plan took %.1f ms (%d tasks, %d GPUs, rule %s, flags %s%s)",
		   (gb_now_us() - step.start_us) / 1000.0, step.plan.ntasks,
		   step.plan.ngpus,
		   step.plan.rule == GB_RULE_NUMA ? "numa" : "table", flags,
		   pc.hit ? ", plan cache hit" : "");
	gb_plancache_end(&pc);
	return 0;
}

/*
 * The user's own GPU binding in an environment read by get (spank_getenv on
 * the step's, or getenv in a task): "NAME=VALUE" in buf, or 0. Slurm 24.11+
 * exports the step's --tres-bind/--gpu-bind (and the per_task that
 * --gpus-per-task implies) as SLURM_TRES_BIND; Slurm 22.05's sbatch exports
 * --gpu-bind as SLURM_GPU_BIND, and its slurmstepd gives each task the step's
 * tres_bind as SLURMD_TRES_BIND (set before spank_user_task, after
 * init_post_opt).
 */
static int gb_user_gpu_bind(char *(*get)(void *ctx, const char *name),
			    void *ctx, char *buf, size_t len)
{
	static const char *const names[] = {
		"SLURM_TRES_BIND", "SLURMD_TRES_BIND", "SLURM_GPU_BIND",
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char *v = get(ctx, names[i]);
		const char *g = NULL;

		if (!v)
			continue;
		if (!strcmp(names[i], "SLURM_GPU_BIND"))
			g = *v ? v : NULL;
		else if ((g = strstr(v, "gres/gpu:")))   /* gres/gpu:map:0,1 */
			g += strlen("gres/gpu:");
		else if ((g = strstr(v, "gpu:")))        /* gpu:per_task:1 */
			g += strlen("gpu:");
		/*
		 * --gpu-bind=verbose alone asks for no binding. Everything else,
		 * none included (Slurm's explicit "no binding"), is the user's.
		 */
		if (g && !strncmp(g, "verbose", 7))
			g += g[7] == ',' ? 8 : 7;
		if (g && *g) {
			(void) snprintf(buf, len, "%s=%s", names[i], v);
			free(v);
			return 1;
		}
		free(v);
	}
	return 0;
}

static char *step_getenv(void *ctx, const char *name)
{
	int failed;

	return gb_spank_getenv((spank_t) ctx, name, &failed);
}

/* gb_default_decide on this step (its SLURM_STEP_GPUS, its local tasks). */
static int decide(spank_t sp, const char *option,
		  struct gb_default_step *ds, enum gb_default_verdict *v)
{
	int failed;
	char *gpus = gb_spank_getenv(sp, "SLURM_STEP_GPUS", &failed);

	if (failed)
		return -1;
	memset(ds, 0, sizeof(*ds));
	ds->step_gpus = gpus;
	ds->ntasks = (int) step.local_task_count;
	*v = gb_default_decide(option, ds);
	ds->step_gpus = NULL;
	free(gpus);
	return 0;
}

/*
 * A binding that comes only from the admin's default= never shrinks what a
 * task sees, and a step it would not bind is never failed by the plugin:
 * decided here from the environment alone, before any trust check, plan
 * cache lookup or launcher (rule/default.c, docs/admin.md "default="). Returns
 * 1 to plan, with option rewritten (visible=localid, no per-task cpus or
 * isolate where tasks share GPUs), or 0 to leave the step as Slurm set it up.
 */
static int default_binding(spank_t sp, char *option, size_t len)
{
	struct gb_default_step ds;
	unsigned force = 0;
	char text[1024];

	gb_failed_for_default();
	if (decide(sp, option, &ds, &step.verdict))
		return plan_failed("cannot read SLURM_STEP_GPUS");
	switch (step.verdict) {
	case GB_DEFAULT_NO_GPUS:
		gb_verbose("the step has no GPUs on this node (no SLURM_STEP_GPUS): not bound, its environment and devices are Slurm's");
		return 0;
	case GB_DEFAULT_FEWER_TASKS:
		gb_verbose("default=%s: the step's %d tasks on this node would take %d of its %d GPUs (a task drives several: torchrun, JAX, vLLM): left as Slurm set it up",
			   option, ds.ntasks, ds.used, ds.ngpus);
		return 0;
	case GB_DEFAULT_SHARE:
		gb_verbose("default=%s: the step's %d tasks share its %d GPUs on this node: no per-task cpus or isolate",
			   option, ds.ntasks, ds.ngpus);
		break;
	default:
		break;
	}
	(void) gb_flags_parse(gb_config()->force, &force);   /* args.c wrote it */
	if (gb_default_option(option, step.verdict, force, text, sizeof(text)))
		return plan_failed("default= is too long with visible=localid");
	(void) snprintf(option, len, "%s", text);
	return 1;
}

/*
 * A --gpu-bind-topo from sbatch/salloc (SLURM_GPU_BIND_TOPO in the job's
 * environment) is the user's own request, and binds as asked; where it gives
 * a step fewer GPUs than the step has (an srun meant for torchrun inside a
 * job that binds), global task 0 says so once.
 */
static void inherited_option(spank_t sp, const char *option)
{
	struct gb_default_step ds;
	enum gb_default_verdict v;

	if (decide(sp, option, &ds, &v) || v != GB_DEFAULT_FEWER_TASKS)
		return;
	(void) snprintf(step.inherited_cut, sizeof(step.inherited_cut),
			"--%s=%.300s from the job (%s) gives this step's %d tasks %d of its %d GPUs on this node; srun --%s=off leaves them all to the tasks",
			GB_OPTION_NAME, option, GB_ENV_OPTION, ds.ntasks,
			ds.used, ds.ngpus, GB_OPTION_NAME);
}

/*
 * The option text to plan for, in option. Returns 1 to plan, 0 when the step
 * is not bound (off, a step that only passes the option on, or the admin's
 * default on a step the user bound with Slurm's own options).
 */
static int step_option(spank_t sp, char *option, size_t len)
{
	const struct gb_config *conf = gb_config();
	char *envopt, user[512];
	int failed, rc;

	if (step_passes_option_on())
		return 0;
	envopt = gb_spank_getenv(sp, GB_ENV_OPTION, &failed);
	if (failed)
		return plan_failed("cannot read " GB_ENV_OPTION);
	step.from_default = !gb_user_option() && !(envopt && *envopt);
	rc = gb_effective_option(envopt, option, len);
	free(envopt);
	if (!rc && !step.from_default && conf->force[0] &&
	    conf->default_opt[0] && !gb_option_is_off(conf->default_opt)) {
		/*
		 * The user's off means "as if I had asked nothing": the admin's
		 * default, with what the admin forces. It cannot bypass force.
		 */
		gb_verbose("--%s=off with %s=force in plugstack.conf: the default=%s applies",
			   GB_OPTION_NAME, conf->force, conf->default_opt);
		(void) snprintf(option, len, "%s", conf->default_opt);
		step.from_default = 1;
		rc = 1;
	}
	if (rc && gb_user_gpu_bind(step_getenv, sp, user, sizeof(user))) {
		if (!step.from_default) {
			(void) snprintf(step.user_bind, sizeof(step.user_bind),
					"%s", user);
		} else {
			gb_verbose("the step has the user's own GPU binding (%s): the default=%s of plugstack.conf steps aside",
				   user, conf->default_opt);
			return 0;
		}
	}
	if (rc && step.from_default)
		return default_binding(sp, option, len);
	if (rc && !gb_user_option())
		inherited_option(sp, option);
	return rc;   /* 0 for off: no child, no environment change */
}

/*
 * containers=yes: NVIDIA_VISIBLE_DEVICES = every GPU of the step here, by
 * UUID, in the step's environment before any task exists. pyxis builds one
 * container per node from the environment of whichever task comes first,
 * and enroot's nvidia hook mounts the GPUs this names, so every task's GPU
 * is in it, in any plugstack order; the per-task choice stays in
 * CUDA_VISIBLE_DEVICES (docs/containers.md). A value the job set stays.
 * Without UUIDs nothing is set: a warning says why.
 */
static int set_container_gpus(spank_t sp)
{
	char list[GB_ENV_VALUE_MAX];
	spank_err_t rc;

	if (!gb_config()->containers)
		return 0;
	if (gb_step_container_gpus(&step.plan, list, sizeof(list))) {
		gb_error("warning: containers=yes: NVIDIA_VISIBLE_DEVICES not set: %s",
			 list);
		return 0;
	}
	rc = spank_setenv(sp, "NVIDIA_VISIBLE_DEVICES", list, 0);
	if (rc == ESPANK_ENV_EXISTS) {
		gb_verbose("NVIDIA_VISIBLE_DEVICES is the job's own; kept");
		return 0;
	}
	if (rc != ESPANK_SUCCESS) {
		gb_spank_error("spank_setenv", "NVIDIA_VISIBLE_DEVICES", rc);
		return plan_failed("cannot set NVIDIA_VISIBLE_DEVICES for the step's container (containers=yes)");
	}
	gb_verbose("containers=yes: NVIDIA_VISIBLE_DEVICES=%s", list);
	return 0;
}

/*
 * isolate cannot hold in Slurm's OCI containers (srun --container, which sets
 * SLURM_CONTAINER) run as root: the runtime then makes a cgroup of its own for
 * each task. On cgroup v2 runc puts it beside task_N, where the task's device
 * program does not run (and runc's own program replaces Slurm's); on cgroup v1
 * runc cannot start below a device deny list. Rootless runtimes (jobs of
 * ordinary users) cannot create cgroups in Slurm's tree and keep isolate
 * (docs/containers.md, tests/containers TestOCI and
 * TestOCIRootRuncV2LeavesTaskCgroup). Returns 1, with the reason in why, to
 * refuse (as cgroup_stepd.c refuses: gb_failed).
 */
static int oci_root_refuses_isolate(spank_t sp, char *why, size_t len)
{
	char *bundle;
	int failed;

	if (!(step.plan.flags & GB_FLAG_ISOLATE) || step.uid != 0)
		return 0;
	bundle = gb_spank_getenv(sp, "SLURM_CONTAINER", &failed);
	if (!bundle || !*bundle) {
		free(bundle);
		return 0;
	}
	(void) snprintf(why, len,
			"cgroup binding refused: isolate: the step runs in Slurm's OCI containers (srun --container=%.200s) as root, and a container runtime run as root puts each task into a cgroup of its own (cgroup v2: beside the task's, where its device rules do not apply; cgroup v1: runc cannot start below a device deny list); run the job as an ordinary user (rootless runtime), or without isolate",
			bundle);
	free(bundle);
	return 1;
}

int gb_stepd_init_post_opt(spank_t sp)
{
	char option[1024], why[700];
	int info;

	step.start_us = gb_now_us();
	info = step_get_info(sp);   /* an id it cannot read stays 0: a plain step */
	if (!step_option(sp, option, sizeof(option)))
		return 0;
	if (info)
		return plan_failed("cannot read the step from Slurm");
	if (plan_step(sp, option) || !step.plan_active)
		return 0;
	if (set_container_gpus(sp))
		return 0;
	if (oci_root_refuses_isolate(sp, why, sizeof(why)))
		return gb_failed(why, "going on without cgroup binding", NULL,
				 0);
	/* isolate/cpus: per-task cgroups (cgroup_stepd.c). */
	return gb_stepcg_prepare(step.job_id, step.step_id, &step.plan);
}

/* What task_init knows about its task. */
struct task {
	int lid;                 /* S_TASK_ID */
	uint32_t gid;            /* S_TASK_GLOBAL_ID */
	char *bind_type;         /* SLURM_CPU_BIND_TYPE, NULL when unset */
	char *bind_list;         /* SLURM_CPU_BIND_LIST, NULL when unset */
	cpu_set_t own, *ownp;    /* its affinity, ownp NULL when unknown */
	struct gb_result res;    /* the rule's answer */
	char why[700];           /* what failed */
};

/* Fills tk; each item that cannot be read is logged by name. */
static int task_get_info(spank_t sp, struct task *tk)
{
	spank_err_t rc;
	int failed = 0;

	if ((rc = spank_get_item(sp, S_TASK_ID, &tk->lid)) != ESPANK_SUCCESS) {
		gb_spank_error("spank_get_item", "S_TASK_ID", rc);
		(void) snprintf(tk->why, sizeof(tk->why),
				"cannot read the local task id");
		return -1;
	}
	if (!step.plan_active)
		return 0;
	if (get_u32(sp, S_TASK_GLOBAL_ID, "S_TASK_GLOBAL_ID", &tk->gid)) {
		(void) snprintf(tk->why, sizeof(tk->why),
				"cannot read the global task id");
		return -1;
	}
	tk->bind_type = gb_spank_getenv(sp, "SLURM_CPU_BIND_TYPE", &failed);
	if (!failed)
		tk->bind_list = gb_spank_getenv(sp, "SLURM_CPU_BIND_LIST", &failed);
	if (failed) {
		(void) snprintf(tk->why, sizeof(tk->why),
				"cannot read the task's CPU binding");
		return -1;
	}
	if (!sched_getaffinity(0, sizeof(tk->own), &tk->own))
		tk->ownp = &tk->own;
	return 0;
}

/* No plan: the task says why (all tasks under enforce, task 0 otherwise). */
static int task_report_problem(int lid)
{
	char out[2500];
	int n = snprintf(out, sizeof(out), "%s%s%s\n", GB_PREFIX,
			 step.problem_fatal ? "error: " : "warning: ",
			 step.problem);

	if ((step.problem_fatal || lid == 0) && n > 0)
		(void) !write(STDERR_FILENO, out,
			      (size_t) n < sizeof(out) ? (size_t) n
						       : sizeof(out) - 1);
	return step.problem_fatal ? -1 : 0;
}

/* The rule's answer for the task, within the GPUs it may open. */
static int task_rule(struct task *tk)
{
	const struct gb_table *plan = &step.plan;
	struct gb_binds binds;
	char err[512];

	gb_binds_parse(plan, tk->bind_type, tk->bind_list, &binds);
	if (gb_rule_apply(plan, tk->lid, &binds, tk->ownp,
			  step_cpus(), &tk->res, err, sizeof(err)) ||
	    /* Within the GPUs the task's device cgroup lets it open (Slurm's
	     * per-task binding, isolate), numbered as CUDA will number them. */
	    gb_result_restrict(plan, &tk->res, NULL, err, sizeof(err))) {
		(void) snprintf(tk->why, sizeof(tk->why), "task %d: %s",
				tk->lid, err);
		return -1;
	}
	/* visible=first|localid: the step's other GPUs the task may open. */
	gb_result_widen(plan, &tk->res, tk->lid);
	return 0;
}

struct env_ctx {
	spank_t sp;
	struct task *tk;
};

/* One variable of the task's environment (gb_result_env's callback). */
static int set_one(void *ctx, const char *name, const char *value,
		   int overwrite)
{
	struct env_ctx *c = ctx;
	spank_err_t rc = spank_setenv(c->sp, name, value, overwrite);

	if (!overwrite && rc == ESPANK_ENV_EXISTS) {
		gb_verbose("task %d: %s is set already; kept", c->tk->lid,
			   name);
		return 0;
	}
	if (rc != ESPANK_SUCCESS) {
		gb_spank_error("spank_setenv", name, rc);
		(void) snprintf(c->tk->why, sizeof(c->tk->why),
				"cannot set the task's environment");
		return -1;
	}
	return 0;
}

static int task_set_env(spank_t sp, struct task *tk)
{
	struct env_ctx c = { sp, tk };

	tk->why[0] = '\0';
	if (gb_result_env(&step.plan, &tk->res, set_one, &c)) {
		if (!tk->why[0])
			(void) snprintf(tk->why, sizeof(tk->why),
					"per-task environment too long");
		return -1;
	}
	return 0;
}

/* cpus flag: only within what Slurm already gave the task. */
static int task_set_affinity(struct task *tk)
{
	cpu_set_t want;

	if (!gb_result_affinity(&tk->res, tk->ownp, &want))
		return 0;
	if (sched_setaffinity(0, sizeof(want), &want)) {
		(void) snprintf(tk->why, sizeof(tk->why),
				"task %d: sched_setaffinity: %s", tk->lid,
				strerror(errno));
		return -1;
	}
	return 0;
}

/* The mapping line: slurmd's log, and the user's stderr with verbose. */
static void task_log(const struct task *tk)
{
	char line[2048];

	if (gb_result_logline(&step.plan, &tk->res, tk->lid, (long) tk->gid,
			      line, sizeof(line)) == 0) {
		gb_info("%s", line);
		if (step.plan.flags & GB_FLAG_VERBOSE) {
			char out[2100];
			int n = snprintf(out, sizeof(out), "%s%s\n", GB_PREFIX,
					 line);

			if (n > 0 && (size_t) n < sizeof(out))
				(void) !write(STDERR_FILENO, out, n);
		}
	}
	if (tk->lid == step.plan.ntasks - 1)
		gb_verbose("task %d bound %.1f ms after the step plan started",
			   tk->lid, (gb_now_us() - step.start_us) / 1000.0);
}

static void task_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line on the user's terminal (the task's stderr). */
static void task_warn(const char *fmt, ...)
{
	char out[1400];
	va_list ap;
	int n = snprintf(out, sizeof(out), "%swarning: ", GB_PREFIX);

	va_start(ap, fmt);
	n += vsnprintf(out + n, sizeof(out) - n - 1, fmt, ap);
	va_end(ap);
	if (n > 0 && (size_t) n < sizeof(out) - 1) {
		out[n++] = '\n';
		(void) !write(STDERR_FILENO, out, n);
	}
}

/*
 * The user's own GPU binding (Slurm's --gpu-bind/--tres-bind), seen in the
 * step's environment at init_post_opt, or only now in the task's (Slurm
 * 22.05's srun: SLURMD_TRES_BIND). Under the admin's default the task is left
 * as Slurm set it up: returns 1. Under isolate its device cgroup is ours
 * already (task_post_fork ran first): it is bound as planned, and task 0
 * warns. With the user's explicit --gpu-bind-topo ours applies, and global
 * task 0 names both.
 */
static int task_user_bind(spank_t sp, const struct task *tk)
{
	const char *given = gb_user_option();
	char user[512];

	if (step.user_bind[0])
		(void) snprintf(user, sizeof(user), "%s", step.user_bind);
	else if (!gb_user_gpu_bind(step_getenv, sp, user, sizeof(user)))
		return 0;
	if (!step.from_default) {
		if (step.plan_active && tk->gid == 0)
			task_warn("you gave both --%s=%s and your own GPU binding (%s): --%s applies",
				  GB_OPTION_NAME,
				  given && given[0] ? given : "(from " GB_ENV_OPTION ")",
				  user, GB_OPTION_NAME);
		return 0;
	}
	if (step.plan_active && (step.plan.flags & GB_FLAG_ISOLATE)) {
		if (tk->lid == 0)
			task_warn("the site's default --%s=%s (isolate) replaces your own GPU binding (%s)",
				  GB_OPTION_NAME, gb_config()->default_opt, user);
		return 0;
	}
	gb_verbose("task %d has the user's own GPU binding (%s): the default=%s of plugstack.conf steps aside",
		   tk->lid, user, gb_config()->default_opt);
	return 1;
}

/* Multi-node NVLink: a fabric not ready, or no IMEX channel, on the user's
 * terminal (fabric.c decides; nothing for GPUs outside an NVLink domain). */
static void task_warn_fabric(const struct task *tk)
{
	char w[1024], out[1100];
	int n;

	if (!gb_fabric_warning(&step.plan, &tk->res, tk->lid, NULL, w,
			       sizeof(w)))
		return;
	gb_info("warning: %s", w);
	n = snprintf(out, sizeof(out), "%swarning: %s\n", GB_PREFIX, w);
	if (n > 0 && (size_t) n < sizeof(out))
		(void) !write(STDERR_FILENO, out, n);
}

int gb_stepd_task_init(spank_t sp)
{
	struct task tk = { .lid = -1 };
	int ret = 0;

	if (!step.plan_active && !step.problem[0])
		return 0;
	if (task_get_info(sp, &tk) < 0)
		goto fail;
	if (task_user_bind(sp, &tk))
		goto out;
	if (!step.plan_active) {
		ret = task_report_problem(tk.lid);
		goto out;
	}
	if (task_rule(&tk) < 0 || task_set_env(sp, &tk) < 0 ||
	    task_set_affinity(&tk) < 0)
		goto fail;
	task_warn_fabric(&tk);
	if (step.inherited_cut[0] && tk.gid == 0)
		task_warn("%s", step.inherited_cut);
	task_log(&tk);
	goto out;
fail:
	ret = gb_failed(tk.why, "task runs unbound", NULL, 0);
out:
	free(tk.bind_type);
	free(tk.bind_list);
	return ret;
}

/*
 * With SlurmdParameters=contain_spank this may run in a clone(CLONE_VM)
 * child: plain C only (the cgroup moves of cgroup_stepd.c and a debug line).
 */
int gb_stepd_task_post_fork(spank_t sp)
{
	int lid = -1;
	pid_t pid = 0;
	spank_err_t rc;

	if ((rc = spank_get_item(sp, S_TASK_ID, &lid)) == ESPANK_SUCCESS)
		gb_debug("task %d started", lid);
	if (!gb_stepcg_active())
		return 0;
	if (rc != ESPANK_SUCCESS) {
		gb_spank_error("spank_get_item", "S_TASK_ID", rc);
		lid = -1;
	} else if ((rc = spank_get_item(sp, S_TASK_PID, &pid)) !=
		   ESPANK_SUCCESS) {
		gb_spank_error("spank_get_item", "S_TASK_PID", rc);
		lid = -1;
	}
	return gb_stepcg_task_post_fork(&step.plan, lid, pid, step_cpus());
}

int gb_stepd_task_exit(spank_t sp)
{
	int lid = -1;
	spank_err_t rc;

	if (!gb_stepcg_active())
		return 0;
	if ((rc = spank_get_item(sp, S_TASK_ID, &lid)) != ESPANK_SUCCESS) {
		gb_spank_error("spank_get_item", "S_TASK_ID", rc);
		return 0;
	}
	gb_stepcg_task_exit(lid);
	return 0;
}

void gb_stepd_exit(void)
{
	gb_stepcg_exit();
	if (step.plan_active)
		gb_table_free(&step.plan);
	free(step.global_ids);
	free(step.node_name);
	memset(&step, 0, sizeof(step));
}
