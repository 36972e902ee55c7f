/*
 * slurmstepd (remote context). init_post_opt plans the whole step once,
 * in a forked engine child, before any task exists; task_init applies the
 * per-task rule in plain C inside each task child.
 */
#include "gpubind.h"

#include <errno.h>
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
#include "table.h"

#define GB_ENV_MAX (1024 * 1024)

static struct gb_table plan;
static int plan_active;
static long plan_start_us;

/*
 * Why this step has no plan. In init_post_opt the user's terminal is not
 * connected yet (Slurm would only say "Plugin initialization failed"), so
 * the tasks report it: with mode=enforce every task fails in task_init,
 * with mode=optional local task 0 prints the warning.
 */
static char plan_problem[2400];
static int plan_problem_fatal;

/*
 * Step environment values handed to the engine: the env.NAME list of
 * spank/PROTOCOL.md section 1, which the engine reads (envKeys in
 * spank/engine/engine.go). TestEnvKeysNamedOnce checks all three agree.
 */
static const char *const request_env[] = {
	"SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES",
	"SLURM_CONF", GB_ENV_OPTION,
};

/*
 * The step's CPUs: slurmstepd's own affinity once task/cgroup moved it into
 * the step's cpuset (task_p_pre_setuid, which Slurm runs before
 * slurm_spank_user_init). A task mask that holds all of them is no per-task
 * binding. Written before the tasks are forked, so they inherit it.
 */
static cpu_set_t step_cpus;
static int have_step_cpus;

void gb_stepd_user_init(void)
{
	have_step_cpus = !sched_getaffinity(0, sizeof(step_cpus), &step_cpus);
	if (!have_step_cpus)
		gb_debug("sched_getaffinity: %s; the step's CPUs are unknown",
			 strerror(errno));
}

const cpu_set_t *gb_stepd_step_cpus(void)
{
	return have_step_cpus ? &step_cpus : NULL;
}

const struct gb_table *gb_stepd_plan(void)
{
	return plan_active ? &plan : NULL;
}

/*
 * spank_getenv into a malloc'd buffer, growing on ESPANK_NOSPACE.
 * Returns the value, or NULL when unset (*failed set on a real error).
 */
static char *getenv_alloc(spank_t sp, const char *name, int *failed)
{
	int len = 256;

	*failed = 0;
	for (;;) {
		char *buf = malloc(len);
		spank_err_t rc;

		if (!buf) {
			gb_error("out of memory reading %s", name);
			*failed = 1;
			return NULL;
		}
		rc = spank_getenv(sp, name, buf, len);
		if (rc == ESPANK_SUCCESS)
			return buf;
		free(buf);
		if (rc == ESPANK_ENV_NOEXIST)
			return NULL;
		if (rc == ESPANK_NOSPACE && len < GB_ENV_MAX) {
			len *= 4;
			continue;
		}
		gb_spank_error("spank_getenv", name, rc);
		*failed = 1;
		return NULL;
	}
}

struct req {
	char *p;
	size_t len, cap;
	int bad;
	char why[256];
};

static void req_add(struct req *r, const char *key, const char *val)
{
	size_t need = strlen(key) + strlen(val) + 3;

	if (r->bad)
		return;
	if (strpbrk(val, "\n\r")) {
		(void) snprintf(r->why, sizeof(r->why),
				"the value of %s holds a newline", key);
		r->bad = 1;
		return;
	}
	if (r->len + need > r->cap) {
		size_t c = (r->cap ? r->cap : 4096);
		char *x;

		while (c < r->len + need)
			c *= 2;
		x = realloc(r->p, c);
		if (!x) {
			(void) snprintf(r->why, sizeof(r->why), "out of memory");
			r->bad = 1;
			return;
		}
		r->p = x;
		r->cap = c;
	}
	r->len += sprintf(r->p + r->len, "%s=%s\n", key, val);
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

static int build_request(spank_t sp, const char *option, struct req *r)
{
	uint32_t ntasks, u;
	uid_t uid;
	gid_t gid;
	spank_err_t rc;
	char num[32], host[256];
	char *ids = NULL;
	size_t idlen = 0;
	int failed = 0;

	req_add(r, "option", option);
	req_add(r, "mode", gb_conf.mode_optional ? "optional" : "enforce");
	req_add(r, "source", gb_conf.source);
	req_add(r, "root", gb_conf.root);
	req_add(r, "snapshot", gb_conf.snapshot);
	req_add(r, "cache_dir", gb_conf.cache_dir);
	req_add(r, "gres_conf", gb_conf.gres_conf);
	req_add(r, "force", gb_conf.force);
	req_add(r, "never", gb_conf.never);

	if ((rc = spank_get_item(sp, S_JOB_UID, &uid)) != ESPANK_SUCCESS) {
		gb_spank_error("spank_get_item", "S_JOB_UID", rc);
		return -1;
	}
	if ((rc = spank_get_item(sp, S_JOB_GID, &gid)) != ESPANK_SUCCESS) {
		gb_spank_error("spank_get_item", "S_JOB_GID", rc);
		return -1;
	}
	(void) snprintf(num, sizeof(num), "%u", (unsigned) uid);
	req_add(r, "uid", num);
	(void) snprintf(num, sizeof(num), "%u", (unsigned) gid);
	req_add(r, "gid", num);

	{
		/*
		 * slurmstepd's own SLURMD_NODENAME (it sets it at start) names
		 * this node. The job's may not: an srun inside sbatch carries
		 * the batch host's name to every node of the step.
		 */
		char *nn = getenv("SLURMD_NODENAME") ?
			strdup(getenv("SLURMD_NODENAME")) : NULL;

		if (!nn)
			nn = getenv_alloc(sp, "SLURMD_NODENAME", &failed);
		if (failed)
			return -1;
		if (!nn && !gethostname(host, sizeof(host))) {
			host[sizeof(host) - 1] = '\0';
			host[strcspn(host, ".")] = '\0';
			nn = strdup(host);
		}
		req_add(r, "node_name", nn ? nn : "");
		free(nn);
	}

	if (get_u32(sp, S_JOB_LOCAL_TASK_COUNT, "S_JOB_LOCAL_TASK_COUNT",
		    &ntasks))
		return -1;
	(void) snprintf(num, sizeof(num), "%u", ntasks);
	req_add(r, "local_tasks", num);
	ids = malloc((size_t) ntasks * 12 + 2);
	if (!ids) {
		gb_error("out of memory for %u task ids", ntasks);
		return -1;
	}
	ids[0] = '\0';
	for (uint32_t i = 0; i < ntasks; i++) {
		rc = spank_get_item(sp, S_JOB_LOCAL_TO_GLOBAL_ID, i, &u);
		if (rc != ESPANK_SUCCESS) {
			gb_spank_error("spank_get_item",
				       "S_JOB_LOCAL_TO_GLOBAL_ID", rc);
			free(ids);
			return -1;
		}
		idlen += sprintf(ids + idlen, "%s%u", i ? "," : "", u);
	}
	req_add(r, "global_ids", ids);
	free(ids);

	for (size_t i = 0; i < sizeof(request_env) / sizeof(request_env[0]);
	     i++) {
		char key[64];
		char *v;

		(void) snprintf(key, sizeof(key), "env.%s", request_env[i]);
		/*
		 * Where gres.conf lives is the daemon's business, not the user's:
		 * slurmstepd's own SLURM_CONF wins over the job's (which the user
		 * may set freely). The engine reads it after dropping to the
		 * user, so either way it can read nothing the user cannot.
		 */
		if (!strcmp(request_env[i], "SLURM_CONF") && getenv("SLURM_CONF")) {
			req_add(r, key, getenv("SLURM_CONF"));
			continue;
		}
		v = getenv_alloc(sp, request_env[i], &failed);
		if (failed)
			return -1;
		if (!v)
			continue;
		req_add(r, key, v);
		free(v);
	}
	if (r->bad) {
		gb_error("cannot build the engine request: %s", r->why);
		return -1;
	}
	return 0;
}

/*
 * Plan failed: enforce fails the step, optional runs it unbound. Either way
 * init_post_opt succeeds and the tasks report it (plan_problem).
 */
static int plan_failed(const char *what)
{
	plan_problem_fatal = gb_failed(what, "tasks run unbound", plan_problem,
				       sizeof(plan_problem)) < 0;
	return 0;
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

int gb_stepd_init_post_opt(spank_t sp)
{
	uint32_t stepid, ntasks;
	char option[1024], engine[1024], err[1024], why[2200], ex[128];
	char *envopt;
	struct req r = { 0 };
	struct gb_child_result res;
	struct gb_plancache pc;
	int failed, rc;
	long t0 = gb_now_us();

	plan_start_us = t0;
	if (get_u32(sp, S_JOB_STEPID, "S_JOB_STEPID", &stepid) ||
	    get_u32(sp, S_JOB_LOCAL_TASK_COUNT, "S_JOB_LOCAL_TASK_COUNT",
		    &ntasks))
		return gb_failed("cannot read the step", "tasks run unbound",
				 NULL, 0);
	/* These steps only pass the option on to the steps inside them. */
	if (stepid == SLURM_BATCH_SCRIPT || stepid == SLURM_EXTERN_CONT ||
	    stepid == SLURM_INTERACTIVE_STEP)
		return 0;

	envopt = getenv_alloc(sp, GB_ENV_OPTION, &failed);
	if (failed)
		return plan_failed("cannot read " GB_ENV_OPTION);
	rc = gb_effective_option(envopt, option, sizeof(option));
	free(envopt);
	if (!rc)
		return 0;    /* off: no child, no environment change */

	if (gb_conf.engine[0])
		(void) snprintf(engine, sizeof(engine), "%s", gb_conf.engine);
	else if (gb_engine_path(engine, sizeof(engine)))
		return plan_failed("cannot locate " GB_ENGINE_NAME);

	if (build_request(sp, option, &r)) {
		free(r.p);
		return plan_failed("cannot build the plan request");
	}
	/* A step shape planned before: its table, no engine child. */
	gb_plancache_begin(&pc, engine, r.p);
	if (gb_plancache_get(&pc, ntasks, &plan)) {
		free(r.p);
		goto planned;
	}
	rc = gb_run_engine(engine, r.p, gb_conf.timeout_ms, &res, err,
			   sizeof(err));
	free(r.p);
	describe_exit(&res, ex, sizeof(ex));
	if (rc) {
		free(res.out);
		(void) snprintf(why, sizeof(why), "plan for --%s=%s failed: %s%s",
				GB_OPTION_NAME, option, err, ex);
		return plan_failed(why);
	}
	rc = gb_table_parse(res.out, res.outlen, &plan, err, sizeof(err));
	if (!rc)
		gb_plancache_put(&pc, &plan, ntasks, &res, res.out, res.outlen);
	free(res.out);
	if (rc) {
		(void) snprintf(why, sizeof(why),
				"plan for --%s=%s unusable: %s%s",
				GB_OPTION_NAME, option, err, ex);
		return plan_failed(why);
	}
	if (plan.status == GB_STATUS_ERROR) {
		size_t off = 0;

		off = snprintf(why, sizeof(why), "--%s=%s:", GB_OPTION_NAME,
			       option);
		for (int i = 0; i < plan.nmessages && off < sizeof(why); i++)
			off += snprintf(why + off, sizeof(why) - off, " %s",
					plan.messages[i]);
		if (!plan.nmessages && off < sizeof(why))
			(void) snprintf(why + off, sizeof(why) - off,
					" the engine failed%s", ex);
		gb_table_free(&plan);
		return plan_failed(why);
	}
	if (plan.ntasks != (int) ntasks) {
		(void) snprintf(why, sizeof(why),
				"plan for --%s=%s has %d tasks, the step has %u here",
				GB_OPTION_NAME, option, plan.ntasks, ntasks);
		gb_table_free(&plan);
		return plan_failed(why);
	}
	if (res.timed_out)
		gb_error("warning: %s; the plan it wrote is used", err);
planned:
	for (int i = 0; i < plan.nmessages; i++) {
		if (plan.status == GB_STATUS_WARN)
			gb_error("warning: %s", plan.messages[i]);
		else
			gb_verbose("%s", plan.messages[i]);
	}
	plan_active = 1;
	gb_verbose("step plan took %.1f ms (%d tasks, %d GPUs, rule %s%s)",
		   (gb_now_us() - t0) / 1000.0, plan.ntasks, plan.ngpus,
		   plan.rule == GB_RULE_NUMA ? "numa" : "table",
		   pc.hit ? ", plan cache hit" : "");
	gb_plancache_end(&pc);
	/* isolate/cpus: per-task cgroups (cgroup_stepd.c). */
	return gb_cgroup_prepare(sp, &plan);
}

static int task_failed(const char *what)
{
	return gb_failed(what, "task runs unbound", NULL, 0);
}

int gb_stepd_task_init(spank_t sp)
{
	int lid, failed = 0;
	uint32_t gid;
	spank_err_t rc;
	char *btype = NULL, *blist = NULL;
	cpu_set_t own, *ownp = NULL;
	struct gb_result res;
	char err[512], env[8192], line[2048];
	int ret = 0;

	if (!plan_active && !plan_problem[0])
		return 0;
	if ((rc = spank_get_item(sp, S_TASK_ID, &lid)) != ESPANK_SUCCESS) {
		gb_spank_error("spank_get_item", "S_TASK_ID", rc);
		return task_failed("cannot read the local task id");
	}
	if (!plan_active) {
		char out[2500];
		int n = snprintf(out, sizeof(out), "%s%s%s\n", GB_PREFIX,
				 plan_problem_fatal ? "error: " : "warning: ",
				 plan_problem);

		if ((plan_problem_fatal || lid == 0) && n > 0)
			(void) !write(STDERR_FILENO, out,
				      (size_t) n < sizeof(out) ? (size_t) n
							       : sizeof(out) - 1);
		return plan_problem_fatal ? -1 : 0;
	}
	if (get_u32(sp, S_TASK_GLOBAL_ID, "S_TASK_GLOBAL_ID", &gid))
		return task_failed("cannot read the global task id");
	btype = getenv_alloc(sp, "SLURM_CPU_BIND_TYPE", &failed);
	if (!failed)
		blist = getenv_alloc(sp, "SLURM_CPU_BIND_LIST", &failed);
	if (failed) {
		ret = task_failed("cannot read the task's CPU binding");
		goto out;
	}
	if (!sched_getaffinity(0, sizeof(own), &own))
		ownp = &own;
	if (gb_rule_apply(&plan, lid, btype, blist, ownp, gb_stepd_step_cpus(),
			  &res, err, sizeof(err))) {
		char why[700];

		(void) snprintf(why, sizeof(why), "task %d: %s", lid, err);
		ret = task_failed(why);
		goto out;
	}
	/* Within the GPUs the task's device cgroup lets it open (Slurm's
	 * per-task binding, isolate), numbered as CUDA will number them. */
	if (gb_result_restrict(&plan, &res, NULL, err, sizeof(err))) {
		char why[700];

		(void) snprintf(why, sizeof(why), "task %d: %s", lid, err);
		ret = task_failed(why);
		goto out;
	}
	if (!res.ngpus)
		env[0] = '\0';  /* no GPU on this node for the task: set nothing */
	else if (gb_result_env(&plan, &res, env, sizeof(env))) {
		ret = task_failed("per-task environment too long");
		goto out;
	}
	for (char *p = env, *nl; *p; p = nl + 1) {
		char *eq;

		nl = strchr(p, '\n');
		eq = strchr(p, '=');
		if (!nl || !eq || eq > nl)
			break;
		*nl = '\0';
		*eq = '\0';
		rc = spank_setenv(sp, p, eq + 1, 1);
		if (rc != ESPANK_SUCCESS) {
			gb_spank_error("spank_setenv", p, rc);
			ret = task_failed("cannot set the task's environment");
			goto out;
		}
	}
	if (res.set_cpus && ownp) {
		cpu_set_t want;

		/* Only within what Slurm already gave the task. */
		CPU_AND(&want, &res.cpus, &own);
		if (CPU_COUNT(&want) &&
		    sched_setaffinity(0, sizeof(want), &want)) {
			char why[128];

			(void) snprintf(why, sizeof(why),
					"task %d: sched_setaffinity: %s", lid,
					strerror(errno));
			ret = task_failed(why);
			goto out;
		}
	}
	if (gb_result_logline(&plan, &res, lid, (long) gid, line,
			      sizeof(line)) == 0) {
		gb_info("%s", line);
		if (plan.flags & GB_FLAG_VERBOSE) {
			char out[2100];
			int n = snprintf(out, sizeof(out), "%s%s\n", GB_PREFIX,
					 line);

			if (n > 0 && (size_t) n < sizeof(out))
				(void) !write(STDERR_FILENO, out, n);
		}
	}
	if (lid == plan.ntasks - 1)
		gb_verbose("task %d bound %.1f ms after the step plan started",
			   lid, (gb_now_us() - plan_start_us) / 1000.0);
out:
	free(btype);
	free(blist);
	return ret;
}

void gb_stepd_exit(void)
{
	gb_cgroup_exit();
	plan_problem[0] = '\0';
	if (plan_active)
		gb_table_free(&plan);
	plan_active = 0;
}
