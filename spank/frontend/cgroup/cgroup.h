/*
 * Per-task cgroup binding for the gpubind front end (docs/cgroups.md).
 *
 * Flags:
 *   isolate  NVIDIA: a task may open only the /dev/nvidiaN of its own GPUs;
 *            every other NVIDIA GPU minor (195:0-253) is denied. nvidiactl
 *            (195:255), nvidia-modeset (195:254), nvidia-uvm, nvidia-caps and
 *            all non-GPU devices keep whatever rule they had.
 *            AMD (cfg.amd): the render and card nodes (DRM, 226:N) of the
 *            step's other GPUs are denied; every other DRM minor (the
 *            task's own GPUs', a BMC's card0, GPUs outside the step) and
 *            /dev/kfd keep whatever rule they had.
 *   cpus     the task's cpuset (cpus, mems) is narrowed to the given sets,
 *            intersected with what its current cgroup allows.
 *
 * Everything only narrows: a task never gains access it did not have.
 *
 * Call sequence in slurmstepd (all plain C, no allocation after prepare):
 *   gb_cg_prepare     slurm_spank_init_post_opt, before any task exists:
 *                     finds the hierarchies in /proc/self/mountinfo and, on
 *                     cgroup v2, loads one BPF device program (plus its two
 *                     maps) per local task.
 *   gb_cg_apply       slurm_spank_task_post_fork (parent, root, after Slurm
 *                     moved the pid into its own task cgroups). cgroup v2
 *                     with a Slurm task cgroup (task_N): the rules go onto
 *                     task_N itself and the task stays there, because Slurm
 *                     finds a task's processes (signals, proctrack's wait,
 *                     accounting) only in task_N/cgroup.procs. Otherwise
 *                     (v1, or no task cgroup): creates the task's cgroup
 *                     below the one Slurm put it in (named
 *                     gpubind_jJOB_sSTEP_pSTEPDPID_tTASK), fills in the
 *                     rules and moves the pid there. The task child learns
 *                     its GPUs from access(2) (gb_result_restrict).
 *   gb_cg_task_exit   slurm_spank_task_exit: removes what apply made.
 *   gb_cg_fini        slurm_spank_exit: retries anything still busy, closes
 *                     the descriptors and frees the state.
 * State written by apply lives in memory, so the calls also work from the
 * clone(CLONE_VM) children of SlurmdParameters=contain_spank. Descriptors are
 * opened before fork only; after fork, kernel objects are found by id.
 *
 * Return codes: GB_CG_OK, GB_CG_ERROR (a system call failed), GB_CG_REFUSED
 * (the request cannot be applied safely; nothing was loosened), and
 * GB_CG_UNSUPPORTED (cpus only: no cpuset controller is reachable for the
 * task; the device part, if any, was applied). err always says what and where.
 */
#ifndef GPUBIND_CGROUP_H
#define GPUBIND_CGROUP_H

#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define GB_CG_ISOLATE 0x1u
#define GB_CG_CPUS 0x2u

#define GB_CG_OK 0
#define GB_CG_ERROR (-1)
#define GB_CG_REFUSED (-2)
#define GB_CG_UNSUPPORTED (-3)

/* NVIDIA character devices: major 195; minors 0-253 are GPUs. */
#define GB_CG_NVIDIA_MAJOR 195
#define GB_CG_MAX_GPU_MINOR 253
/* DRM (AMD render nodes 128-191 and card nodes 0-63): major 226. Minors
 * above 255 (kernels of 6.x with more than 64 DRM devices) are refused. */
#define GB_CG_DRM_MAJOR 226
#define GB_CG_MAX_DRM_MINOR 255

enum gb_cg_version { GB_CG_AUTO = 0, GB_CG_V1 = 1, GB_CG_V2 = 2 };

struct gb_cg_config {
	unsigned flags;          /* GB_CG_ISOLATE | GB_CG_CPUS (effective flags) */
	int version;             /* GB_CG_AUTO, or forced (tests, admins) */
	uint32_t job_id;         /* names the plugin's cgroups */
	uint32_t step_id;
	int ntasks;              /* local tasks (local ids 0..ntasks-1) */
	/* The step GPUs' device minors (gb_gpu_dev_minors): NVIDIA one
	 * /dev/nvidiaN minor per GPU; AMD its render and card minors. */
	const int *step_minors;
	int nstep_minors;
	int amd;                 /* step_minors are DRM minors (major 226) */
	int mig;                 /* the plan holds MIG devices */
	const char *mountinfo;   /* NULL: /proc/self/mountinfo */
};

struct gb_cg;

/* Before fork. On success *out holds the state (free with gb_cg_fini). */
int gb_cg_prepare(struct gb_cg **out, const struct gb_cg_config *cfg,
		  char *err, size_t errlen);

/*
 * Task local_id with process pid: allow only the GPU minors given (isolate;
 * on AMD its render and card minors) and narrow the cpuset to cpus/mems
 * (cpus flag; NULL keeps that part). Every minor must be one of the step's.
 */
int gb_cg_apply(struct gb_cg *cg, int local_id, pid_t pid, const int *minors,
		int nminors, const cpu_set_t *cpus, const cpu_set_t *mems,
		char *err, size_t errlen);

/* After the task ended: remove its cgroups (an EBUSY one is kept for fini). */
int gb_cg_task_exit(struct gb_cg *cg, int local_id, char *err, size_t errlen);

/* Last call: clean up what is left, close descriptors, free cg (may be NULL). */
int gb_cg_fini(struct gb_cg *cg, char *err, size_t errlen);

/* "cgroup v1 (devices at /sys/fs/cgroup/devices, cpuset at ...)" */
const char *gb_cg_describe(const struct gb_cg *cg);

/*
 * The probe prepare decides with, for `gpubind check` (exported from the
 * plugin, like gpubind_check_args): for flags (GB_CG_ISOLATE, GB_CG_CPUS or
 * both) and the mounts in mountinfo (NULL: /proc/self/mountinfo), the
 * version the plugin would use and the refusals that depend on it alone
 * (no hierarchy, v1 co-mounted with a controller Slurm tracks tasks by).
 * GB_CG_OK with out describing what would be used ("cgroup v2 at
 * /sys/fs/cgroup (BPF device programs)"), else GB_CG_REFUSED or GB_CG_ERROR
 * with out saying why. What depends on the step (MIG, Slurm's task cgroups,
 * its device programs) is decided only when a step runs.
 */
int gpubind_check_cgroup(const char *mountinfo, unsigned flags, char *out,
			 size_t outlen);

/* Where apply put task local_id ("" before apply); for logs and tests. */
const char *gb_cg_task_path(const struct gb_cg *cg, int local_id);

#endif
