/*
 * The cgroup layer's lifecycle: prepare (checks, probe, the backend's
 * prepare), apply, task_exit and fini, dispatched to the backend chosen once
 * by prepare (cg->ops: v1.c or v2.c). Only prepare allocates; everything
 * later is system calls on fixed buffers.
 */
#include "internal.h"
#include "table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* gpubind_jJOB_sSTEP_pPID_tTASK: the plugin's own cgroup of a task. */
static int task_name(const struct gb_cg *cg, int local_id, char *buf,
		     size_t len)
{
	int n = snprintf(buf, len, "gpubind_j%u_s%u_p%ld_t%d", cg->job_id,
			 cg->step_id, cg->stepd_pid, local_id);

	return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

/* The caller's configuration, before anything is allocated or read. */
static int check_config(const struct gb_cg_config *cfg, char *err,
			size_t errlen)
{
	if (cfg->ntasks <= 0 || cfg->ntasks > 65536)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: %d local tasks; expected 1..65536",
			       cfg->ntasks);
	if (cfg->flags & ~(GB_CG_ISOLATE | GB_CG_CPUS))
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: unknown flags 0x%x", cfg->flags);
	if (cfg->version != GB_CG_AUTO && cfg->version != GB_CG_V1 &&
	    cfg->version != GB_CG_V2)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: version %d; expected 0 (auto), 1 "
			       "or 2", cfg->version);
	if ((cfg->flags & GB_CG_ISOLATE) && cfg->mig)
		return gb_errf(err, errlen, GB_CG_REFUSED,
			       "isolate is not supported with MIG devices: "
			       "MIG instances share their GPU's "
			       "/dev/nvidiaN and are opened through "
			       "/dev/nvidia-caps, which gpubind does not "
			       "restrict; drop isolate (Slurm's "
			       "ConstrainDevices limits a step to its MIG "
			       "instances)");
	return GB_CG_OK;
}

/* A new context for cfg, no fd open yet; NULL when out of memory. */
static struct gb_cg *new_cg(const struct gb_cg_config *cfg, char *err,
			    size_t errlen)
{
	struct gb_cg *cg = calloc(1, sizeof(*cg));

	if (!cg) {
		(void) gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: out of memory");
		return NULL;
	}
	cg->tasks = calloc((size_t)cfg->ntasks, sizeof(*cg->tasks));
	if (!cg->tasks) {
		free(cg);
		(void) gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: out of memory for %d tasks",
			       cfg->ntasks);
		return NULL;
	}
	cg->flags = cfg->flags;
	cg->job_id = cfg->job_id;
	cg->step_id = cfg->step_id;
	cg->stepd_pid = (long)getpid();
	cg->ntasks = cfg->ntasks;
	cg->mig = cfg->mig;
	cg->amd = cfg->amd ? 1 : 0;
	cg->major = cg->amd ? GB_CG_DRM_MAJOR : GB_CG_NVIDIA_MAJOR;
	cg->max_minor = cg->amd ? GB_CG_MAX_DRM_MINOR : GB_CG_MAX_GPU_MINOR;
	cg->allow_fd = -1;
	for (int i = 0; i < cfg->ntasks; i++) {
		cg->tasks[i].prog_fd = -1;
		cg->tasks[i].minors_fd = -1;
		cg->tasks[i].tail_fd = -1;
	}
	return cg;
}

/* The step's GPU minors; isolate needs every one of them. */
static int mark_step_minors(struct gb_cg *cg, const struct gb_cg_config *cfg,
			    char *err, size_t errlen)
{
	for (int i = 0; i < cfg->nstep_minors; i++) {
		int m = cfg->step_minors[i];

		if (m >= 0 && (unsigned)m <= cg->max_minor) {
			cg->step_minor[m] = 1;
			continue;
		}
		if (!(cfg->flags & GB_CG_ISOLATE))
			continue;
		if (cg->amd)
			return gb_errf(err, errlen, GB_CG_REFUSED,
				       "isolate needs the render and card "
				       "minors of every step GPU (DRM, "
				       "0..%d); step device minor %d is %d",
				       GB_CG_MAX_DRM_MINOR, i, m);
		return gb_errf(err, errlen, GB_CG_REFUSED,
			       "isolate needs the /dev/nvidiaN "
			       "minor of every step GPU; step "
			       "GPU %d has minor %d (expected "
			       "0..%d)", i, m, GB_CG_MAX_GPU_MINOR);
	}
	return GB_CG_OK;
}

static const struct gb_cg_ops *backend(int version)
{
	return version == GB_CG_V1 ? &gb_cg_v1_ops : &gb_cg_v2_ops;
}

int gpubind_check_cgroup(const char *mountinfo, unsigned flags, char *out,
			 size_t outlen)
{
	struct gb_cg_probe probe;
	int rc;

	if (!flags || (flags & ~(GB_CG_ISOLATE | GB_CG_CPUS)))
		return gb_errf(out, outlen, GB_CG_ERROR,
			       "cgroup: flags 0x%x; expected 1 (isolate), 2 "
			       "(cpus) or 3", flags);
	rc = gb_cg_probe(&probe, flags, GB_CG_AUTO, mountinfo, out, outlen);
	if (rc == GB_CG_OK)
		backend(probe.version)->describe(&probe.mnt, out, outlen);
	return rc;
}

int gb_cg_prepare(struct gb_cg **out, const struct gb_cg_config *cfg,
		  char *err, size_t errlen)
{
	struct gb_cg_probe probe;
	struct gb_cg *cg;
	int rc;

	*out = NULL;
	rc = check_config(cfg, err, errlen);
	if (rc)
		return rc;
	cg = new_cg(cfg, err, errlen);
	if (!cg)
		return GB_CG_ERROR;
	rc = mark_step_minors(cg, cfg, err, errlen);
	if (!rc)
		rc = gb_cg_probe(&probe, cfg->flags, cfg->version,
				 cfg->mountinfo, err, errlen);
	if (rc)
		goto fail;
	/* The backend, chosen once: every later call goes through cg->ops. */
	cg->version = probe.version;
	cg->mnt = probe.mnt;
	cg->ops = backend(cg->version);
	cg->ops->describe(&cg->mnt, cg->describe, sizeof(cg->describe));
	rc = cg->ops->prepare(cg, err, errlen);
	if (rc)
		goto fail;
	*out = cg;
	return GB_CG_OK;
fail:
	if (cg->ops)
		cg->ops->close(cg);
	free(cg->tasks);
	free(cg);
	return rc;
}

int gb_cg_apply(struct gb_cg *cg, int local_id, pid_t pid, const int *minors,
		int nminors, const cpu_set_t *cpus, const cpu_set_t *mems,
		char *err, size_t errlen)
{
	unsigned char allow[GB_CG_NMINORS];
	char name[256];
	struct gb_cg_task *t;
	struct gb_cg_apply_args a;
	int i;

	if (!cg || local_id < 0 || local_id >= cg->ntasks)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: local task id %d out of range 0..%d",
			       local_id, cg ? cg->ntasks - 1 : -1);
	if (pid <= 0)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: task %d: bad pid %ld", local_id,
			       (long)pid);
	t = &cg->tasks[local_id];
	if (t->applied)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: task %d already applied", local_id);
	memset(allow, 0, sizeof(allow));
	if (cg->flags & GB_CG_ISOLATE) {
		/* Only GPUs of this step: no table can widen the step. */
		for (i = 0; i < nminors; i++) {
			int m = minors[i];
			if (m < 0 || (unsigned)m > cg->max_minor ||
			    !cg->step_minor[m])
				return gb_errf(err, errlen, GB_CG_REFUSED,
					       "isolate: task %d: minor %d "
					       "is not a GPU of this step",
					       local_id, m);
			allow[m] = 1;
		}
		/*
		 * AMD: the DRM major also holds devices that are no step
		 * GPU's (a BMC's card0, GPUs outside the step): those are
		 * left to the rules in force, only the step's other GPUs'
		 * render and card minors are denied.
		 */
		for (i = 0; cg->amd && (unsigned)i <= cg->max_minor; i++)
			if (!cg->step_minor[i])
				allow[i] = 1;
	}
	if (!(cg->flags & GB_CG_CPUS)) {
		cpus = NULL;
		mems = NULL;
	}
	if (!(cg->flags & GB_CG_ISOLATE) && !cpus && !mems)
		return GB_CG_OK;  /* nothing to narrow */
	if (task_name(cg, local_id, name, sizeof(name)) < 0)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: task %d: cgroup name longer than "
			       "%zu bytes", local_id, sizeof(name) - 1);
	a = (struct gb_cg_apply_args){
		.task = t, .local_id = local_id, .name = name, .pid = pid,
		.allow = allow, .cpus = cpus, .mems = mems,
	};
	return cg->ops->apply(cg, &a, err, errlen);
}

int gb_cg_task_exit(struct gb_cg *cg, int local_id, char *err, size_t errlen)
{
	struct gb_cg_task *t;
	int rc;

	if (!cg || local_id < 0 || local_id >= cg->ntasks)
		return gb_errf(err, errlen, GB_CG_ERROR,
			       "cgroup: local task id %d out of range",
			       local_id);
	t = &cg->tasks[local_id];
	if (!t->applied)
		return GB_CG_OK;
	rc = cg->ops->cleanup(cg, t, err, errlen);
	t->cleanup_pending = (rc != GB_CG_OK);
	if (rc == GB_CG_OK)
		t->applied = 0;
	return rc;
}

int gb_cg_fini(struct gb_cg *cg, char *err, size_t errlen)
{
	int rc = GB_CG_OK, i;
	char one[512];

	if (!cg)
		return GB_CG_OK;
	if (err && errlen)
		err[0] = '\0';
	for (i = 0; i < cg->ntasks; i++) {
		if (!cg->tasks[i].applied)
			continue;
		if (gb_cg_task_exit(cg, i, one, sizeof(one)) != GB_CG_OK) {
			rc = GB_CG_ERROR;
			if (err && errlen && !err[0])
				snprintf(err, errlen, "%s", one);
		}
	}
	cg->ops->close(cg);
	free(cg->tasks);
	free(cg);
	return rc;
}

const char *gb_cg_describe(const struct gb_cg *cg)
{
	return cg ? cg->describe : "";
}

const char *gb_cg_task_path(const struct gb_cg *cg, int local_id)
{
	const struct gb_cg_task *t;

	if (!cg || local_id < 0 || local_id >= cg->ntasks)
		return "";
	t = &cg->tasks[local_id];
	if (!t->applied)
		return "";
	return cg->ops->task_path(t);
}
