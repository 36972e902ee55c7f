/*
 * Inside the cgroup layer (this folder); not part of the front end's API
 * (cgroup.h is). Who calls whom, downward only:
 *   lifecycle.c  gb_cg_prepare/apply/task_exit/fini: the checks, the probe,
 *                then the backend chosen once (struct gb_cg_ops)
 *   probe.c      the hierarchies mounted and the version to use, with the
 *                refusals that depend on it
 *   v1.c, v2.c   one backend per cgroup version (gb_cg_v1_ops, gb_cg_v2_ops)
 *   v2_bpf.c     bpf(2) for v2; v2_prog.c builds the device program
 *   fs.c         files, mountinfo, the plugin's cgroup directories, cpusets
 */
#ifndef GPUBIND_CGROUP_INTERNAL_H
#define GPUBIND_CGROUP_INTERNAL_H

#include "cgroup.h"
#include "table.h"
#include "v2_prog.h"

#include <stdarg.h>

#define GB_CG_PATHLEN 1024
/* Room for either guarded range (NVIDIA 0..253, DRM 0..255). */
#define GB_CG_NMINORS (GB_CG_MAX_DRM_MINOR + 1)

/* One mounted hierarchy: mount point and the hierarchy path it shows. */
struct gb_cg_mount {
	int found;
	char dir[GB_CG_PATHLEN];
	char root[GB_CG_PATHLEN];
	/*
	 * v1: a controller Slurm finds the step's tasks by (freezer for
	 * proctrack/cgroup, cpuacct or memory for jobacct_gather/cgroup)
	 * co-mounted in this hierarchy; "" when none.
	 */
	char comount[16];
};

/* The hierarchies in mountinfo (first mount of each wins). */
struct gb_cg_mounts {
	struct gb_cg_mount devices, cpuset, unified;
};

/* What the probe decided: the mounts, and GB_CG_V1 or GB_CG_V2. */
struct gb_cg_probe {
	struct gb_cg_mounts mnt;
	int version;
};

struct gb_cg_task {
	int applied;
	/* v1: the plugin's cgroups in the devices and cpuset hierarchies. */
	char dev_dir[GB_CG_PATHLEN];
	char cpuset_dir[GB_CG_PATHLEN];
	/*
	 * v2: the cgroup Slurm put the task in, and the plugin's own child
	 * cgroup below it, made only where that is no Slurm task cgroup
	 * (in_place = 0). Slurm's cgroup/v2 finds a task's processes only in
	 * task_N/cgroup.procs (signals, proctrack wait, accounting), so a task
	 * in a Slurm task cgroup is never moved: the program goes onto task_N.
	 */
	char v2_dir[GB_CG_PATHLEN];
	char v2_parent[GB_CG_PATHLEN];
	int in_place;
	/* v2: descriptors opened by prepare (before fork). */
	int prog_fd;    /* the task's device program */
	int minors_fd;  /* array map: minor -> 1 if allowed */
	int tail_fd;    /* prog array: [0] = the program that decides the rest */
	/*
	 * v2, Slurm had an exclusive (flags=0) program on the task's own
	 * cgroup: ours replaced it; put it back (by id) at cleanup.
	 */
	int replaced;
	uint32_t replaced_id;
	int attached;  /* v2: our program is attached (in place or below) */
	int cleanup_pending;
};

struct gb_cg_ops;

struct gb_cg {
	int version;  /* GB_CG_V1 or GB_CG_V2 (the device/cpuset backend) */
	const struct gb_cg_ops *ops;  /* that version's backend */
	unsigned flags;
	uint32_t job_id, step_id;
	long stepd_pid;  /* in names: several slurmds on one host reuse job ids */
	int ntasks;
	int mig;
	/*
	 * The guarded character devices: major:0..max_minor. NVIDIA
	 * (195:0-253): every minor but the task's is denied. AMD (amd = 1,
	 * DRM 226:0-255): only the step's other GPUs' minors are denied.
	 */
	int amd;
	unsigned major, max_minor;
	unsigned char step_minor[GB_CG_NMINORS];
	struct gb_cg_mounts mnt;
	int allow_fd;  /* v2: "allow everything" program, tail-call target */
	char describe[3 * GB_CG_PATHLEN];
	struct gb_cg_task *tasks;
};

/* What one backend's apply gets: one task, everything checked already. */
struct gb_cg_apply_args {
	struct gb_cg_task *task;
	int local_id;
	const char *name;            /* gpubind_jJOB_sSTEP_pPID_tTASK */
	pid_t pid;
	/* [GB_CG_NMINORS] over the guarded minors: 0 = denied to the task, 1 =
	 * left to the rules in force before (never more). */
	const unsigned char *allow;
	const cpu_set_t *cpus;       /* NULL: CPUs left as they are */
	const cpu_set_t *mems;       /* NULL: memory nodes left as they are */
};

/* One backend per cgroup version; lifecycle.c picks one in prepare. */
struct gb_cg_ops {
	/* Before fork, after the probe (v2: loads the BPF programs). */
	int (*prepare)(struct gb_cg *cg, char *err, size_t errlen);
	int (*apply)(struct gb_cg *cg, const struct gb_cg_apply_args *a,
		     char *err, size_t errlen);
	/* Removes what apply made for t; GB_CG_ERROR leaves it for fini. */
	int (*cleanup)(struct gb_cg *cg, struct gb_cg_task *t, char *err,
		       size_t errlen);
	/* Closes what prepare opened (also after a failed prepare). */
	void (*close)(struct gb_cg *cg);
	/* "cgroup v1 (devices at ..., cpuset at ...)" */
	void (*describe)(const struct gb_cg_mounts *mnt, char *buf, size_t len);
	const char *(*task_path)(const struct gb_cg_task *t);
};

extern const struct gb_cg_ops gb_cg_v1_ops;  /* v1.c */
extern const struct gb_cg_ops gb_cg_v2_ops;  /* v2.c */

/* probe.c: mountinfo NULL means /proc/self/mountinfo; version GB_CG_AUTO
 * chooses. GB_CG_REFUSED (with p filled in) when the flags cannot work. */
int gb_cg_probe(struct gb_cg_probe *p, unsigned flags, int version,
		const char *mountinfo, char *err, size_t errlen);

/* fs.c (errors are formatted by gb_errf, rule/table.h) */
int gb_cg_parse_mountinfo(struct gb_cg_mounts *mnt, const char *path,
			  char *err, size_t errlen);
int gb_cg_write_file(const char *path, const char *text, char *err,
		     size_t errlen);
int gb_cg_read_file(const char *path, char *buf, size_t len, char *err,
		    size_t errlen);
int gb_cg_join(char *buf, size_t len, const char *a, const char *b,
	       char *err, size_t errlen);
/* Where pid sits in hierarchy m ("0::" line when ctrl is NULL), as a path. */
int gb_cg_pid_dir(pid_t pid, const struct gb_cg_mount *m, const char *ctrl,
		  char *dir, size_t len, char *err, size_t errlen);
int gb_cg_mkdir_fresh(const char *dir, char *err, size_t errlen);
/* rmdir one of the plugin's cgroups; processes left in it go to its parent
 * (Slurm's cgroup) first. ENOENT is success. */
int gb_cg_rmdir(const char *dir, char *err, size_t errlen);
int gb_cg_move_pid(const char *dir, pid_t pid, char *err, size_t errlen);
/* Child cpuset = want & parent's (both files named by the caller). */
int gb_cg_narrow_cpuset(const char *dir, const char *parent_cpus_file,
			const char *parent_mems_file, const cpu_set_t *cpus,
			const cpu_set_t *mems, char *err, size_t errlen);

/* v2_bpf.c: bpf(2), no policy. The int-returning calls give a
 * descriptor or 0, and -1 with errno (or, where they take err, GB_CG_ERROR
 * with err filled in). */
#define GB_BPF_MAX_QUERY 64
int gb_bpf_prog_load(const struct gb_devprog *p, const char *name, char *err,
		     size_t errlen);
int gb_bpf_map_create(enum bpf_map_type type, unsigned entries,
		      const char *name, char *err, size_t errlen);
int gb_bpf_map_update(int map_fd, uint32_t key, uint32_t value);
/* No more writes from user space; not fatal where the kernel lacks it. */
int gb_bpf_map_freeze(int map_fd);
int gb_bpf_prog_fd_by_id(uint32_t id);
int gb_bpf_attach(int cg_fd, int prog_fd, unsigned flags);
int gb_bpf_detach(int cg_fd, int prog_fd);
/* Programs attached at (effective = 0) or in force for (1) cgroup dir:
 * up to GB_BPF_MAX_QUERY ids, their count, and the attach flags. */
int gb_bpf_query(const char *dir, int effective, uint32_t *ids,
		 uint32_t *cnt, uint32_t *flags, char *err, size_t errlen);

#endif
