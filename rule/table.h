/*
 * Decision table (PROTOCOL.md section 2) and per-task rule (section 3).
 *
 * Plain C with no Slurm dependency: the front end compiles it into
 * spank_gpubind.so, and package rule (rule.go) compiles the same files for
 * `gpubind plan` and the tests. The public header of rule/'s C files:
 * parse.c (the table parser), rule.c (the per-task rule), output.c (the
 * task's environment and mapping line), default.c (default= on a step),
 * fields.c (CPU lists, flag names, gb_errf) and fabric.c (multi-node
 * NVLink, fabric.h); internal.h holds what they share privately.
 * Nothing here allocates after gb_table_parse: the rule runs in the task
 * child, where only simple, bounded work is welcome.
 */
#ifndef GPUBIND_TABLE_H
#define GPUBIND_TABLE_H

#include <sched.h>
#include <stddef.h>

/* Protocol v1 limits; the engine's gpubind.MaxTable* and MaxPerTask/MaxShare are
 * the same numbers (rule_test.go checks). */
#define GB_TABLE_MAX_BYTES (1024 * 1024)
#define GB_TABLE_MAX_LINE 4096
#define GB_TABLE_MAX_TASKS 4096
#define GB_TABLE_MAX_GPUS 1024
#define GB_TABLE_MAX_NUMA 1024
#define GB_TABLE_MAX_SHARE 1024
#define GB_TABLE_MAX_DEPENDS 64
#define GB_MAX_PER_TASK 64

enum gb_status { GB_STATUS_OK, GB_STATUS_WARN, GB_STATUS_ERROR };
enum gb_rule { GB_RULE_TABLE, GB_RULE_NUMA };
/* The "visible" line: which step GPUs a task sees (own: its own only). */
enum gb_visible { GB_VISIBLE_OWN, GB_VISIBLE_FIRST, GB_VISIBLE_LOCALID };

enum gb_flag {
	GB_FLAG_VERBOSE = 1 << 0,
	GB_FLAG_NIC = 1 << 1,
	GB_FLAG_CPUS = 1 << 2,
	GB_FLAG_ISOLATE = 1 << 3,
	/* CUDA_VISIBLE_DEVICES lists GPU UUIDs (gb_result_env, visible_of):
	 * docs/users.md "uuid". */
	GB_FLAG_UUID = 1 << 4,
};

/*
 * The option's flag names, in canonical order: the one list the C side uses
 * (the table's "flags" line, srun's early check and its help text). Go's list
 * is gpubind.FlagNames; rule_test.go checks that the two agree.
 */
#define GB_NFLAGS 5
struct gb_flag_name {
	const char *name;
	enum gb_flag flag;
};
extern const struct gb_flag_name gb_flag_names[GB_NFLAGS];

/* The flag named by the len bytes at s, or 0 when none is. */
unsigned gb_flag_lookup(const char *s, size_t len);

struct gb_gpu {
	char visible[96];  /* value for CUDA_VISIBLE_DEVICES */
	int nvml;          /* physical NVML index */
	int minor;         /* /dev/nvidiaN minor (AMD: render minor), -1 unknown */
	int card;          /* AMD: /dev/dri/cardN minor ("card" line), -1 unknown */
	int part;          /* AMD: MI300 compute partition (XCP) id ("part" line), -1 whole GPU */
	char busid[32];    /* 0000:1b:00.0 */
	char uuid[96];     /* GPU-.../MIG-... or "" */
	int numa;          /* -1 none */
	char nic[64];      /* RDMA device or "" */
	char dev[256];     /* device node Slurm constrains (gres.conf File=) or "" */
	int *near;         /* "near" line: the other step GPUs, nearest first */
	int nnear;
};

struct gb_fabric;

struct gb_numa {
	int node;
	cpu_set_t cpus;
	int *gpus;         /* step GPU ids, best first */
	int ngpus;
};

struct gb_task {
	int seen;
	int *gpus;
	int ngpus;
	int has_cpus;
	cpu_set_t cpus;
};

struct gb_table {
	enum gb_status status;
	char **messages;
	int nmessages;
	unsigned flags;
	enum gb_rule rule;
	int share;
	int per_task;
	int ntasks;
	struct gb_numa *numa;
	int nnuma;
	struct gb_gpu *gpus;
	int ngpus;
	int *fallback;
	int nfallback;
	struct gb_task *tasks;
	cpu_set_t node_cpus;  /* union of all numa lines */
	/* "depends" lines: the files the plan was made from ("?": one that
	 * cannot be named); the plan cache checks them. */
	char *depends[GB_TABLE_MAX_DEPENDS];
	int ndepends;
	/* "visible" line (own when absent). */
	enum gb_visible visible;
	/* NCCL_IB_HCA's list for every task of the node ("nics" line, else the
	 * gpu lines' NICs in GPU order without duplicates): NAME:PORT,... or "". */
	char rails[GB_TABLE_MAX_LINE];
	/* Scratch for the task child, allocated by gb_table_parse so that the
	 * task child never allocates: one byte per GPU for gb_result_restrict,
	 * and the numa rule's units (see gb_rule_apply). */
	unsigned char *can_open;
	int *unit_at;         /* per GPU: the unit it starts, or -1 */
	int *unit_used;       /* per unit: tasks that took it so far */
	cpu_set_t *bind_mask; /* per task: gb_binds_parse's entries */
	unsigned char *bind_valid;
	/* "fabric" and "imex" lines (fabric.h); NULL when there are none. */
	struct gb_fabric *fabric;
	/* "vendor amd" line: AMD GPUs. visible values are ROCr indices (KFD
	 * order) for ROCR_VISIBLE_DEVICES; the "nvml" field is the KFD index. */
	int amd;
};

/*
 * The local tasks' CPU bindings as the rule reads them: mask[j] is task j's
 * when valid[j]; a list of n entries shorter than the tasks is reused from
 * its start, as Slurm applies it. n 0: no list.
 */
struct gb_binds {
	const cpu_set_t *mask;
	const unsigned char *valid;
	int n;
};

/* The answer for one task. */
struct gb_result {
	int gpus[GB_MAX_PER_TASK];
	int ngpus;
	int by_table;         /* took its "task L" line */
	int set_cpus;         /* cpus flag and a CPU list: set affinity to cpus */
	cpu_set_t cpus;
	/* Set by gb_result_restrict: the task may open only some step GPUs, and
	 * vis[i] >= 0 is CUDA's number for gpus[i] among those. */
	int restricted;
	int vis[GB_MAX_PER_TASK];
	/* Set by gb_result_widen (visible first/localid): gpus[own_at ..
	 * own_at+nown-1] are the task's own, the others are the rest of the
	 * step's GPUs it also sees. Not widened: all are its own. */
	int widened;
	int own_at, nown;
};

/*
 * Formats an error message into err (when err and errlen are set) and returns
 * rc: the one "error into a caller's buffer" helper of the C code.
 */
int gb_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * Parse a table. On success returns 0; on failure returns -1 with err
 * naming the line. A table with "status error" parses fine (check
 * t->status). The table must end with a correct "end N" line.
 */
int gb_table_parse(const char *text, size_t len, struct gb_table *t,
		   char *err, size_t errlen);
void gb_table_free(struct gb_table *t);

/*
 * SLURM_CPU_BIND_TYPE / SLURM_CPU_BIND_LIST (either NULL when unset) into
 * b, in the table's scratch (no allocation: the task child calls it). A
 * type without a per-task list (none, ldom, rank, ...) gives n 0.
 */
void gb_binds_parse(const struct gb_table *t, const char *type,
		    const char *list, struct gb_binds *b);

/*
 * Apply the rule (PROTOCOL.md section 3) for local task lid. binds are the
 * local tasks' bindings (NULL or n 0: none known); own is the task's
 * sched_getaffinity mask (NULL when unknown); step is the set of CPUs the
 * step may use (its cpuset; NULL: the whole node). A mask that holds every
 * CPU of step is no per-task binding. The numa rule hands out units
 * (per_task GPUs of the fallback order, share tasks each): a free unit on
 * the task's NUMA node, else a free one from the end of fallback, else the
 * least used; it replays the earlier tasks' choices from binds, so every
 * task finds the same answer on its own.
 */
int gb_rule_apply(const struct gb_table *t, int lid,
		  const struct gb_binds *binds, const cpu_set_t *own,
		  const cpu_set_t *step, struct gb_result *r, char *err,
		  size_t errlen);

/*
 * Keep the task within the step GPUs it may open, and number them as CUDA
 * will inside the task. Slurm narrows a task's device cgroup below the
 * step's GPUs (--gpus-per-task or --ntasks-per-gpu with ConstrainDevices),
 * and isolate narrows it to the task's own; CUDA then enumerates only the
 * devices the task can open, in PCI order (the plugin sets
 * CUDA_DEVICE_ORDER=PCI_BUS_ID). can_open(dev) returns 0 when allowed,
 * else an errno; NULL asks access(2), which consults the device cgroup (v1
 * list or v2 program) without opening the device. EPERM/EACCES mean
 * denied, ENOENT (no such device node) means the task cannot open it
 * either; other errors mean unknown and count as allowed. GPUs the rule
 * chose that the task cannot open are replaced by ones it can, same NUMA
 * node first. Returns 0, or -1 (err set) when the task can open none.
 */
int gb_result_restrict(const struct gb_table *t, struct gb_result *r,
		       int (*can_open)(const char *dev), char *err,
		       size_t errlen);

/*
 * visible=first|localid (the table's "visible" line): after
 * gb_result_restrict, add the step's other GPUs the task may open, nearest
 * to its own first ("near" lines); first: its own GPUs first; localid: its
 * own first GPU at entry lid (the task's SLURM_LOCALID; the end when there
 * are fewer GPUs). visible own: nothing changes. MIG: CUDA enumerates only
 * the first MIG device of CUDA_VISIBLE_DEVICES, so a task whose first GPU
 * is a MIG device keeps that one slice only, whatever the mode (the engine
 * warns in the table). Never allocates.
 */
void gb_result_widen(const struct gb_table *t, struct gb_result *r, int lid);

/*
 * The device minors isolate guards for step GPUs gpus[0..n-1] (ids into
 * t->gpus), in that order (docs/cgroups.md "AMD GPUs"): on NVIDIA each
 * GPU's /dev/nvidiaN minor (major 195); on AMD ("vendor amd") its render
 * minor then its card minor (DRM, major 226; /dev/kfd is no GPU's and is
 * never guarded). Writes at most max minors to out. Returns how many, or -1
 * when a minor is unknown (-1, e.g. an AMD table without "card" lines from
 * an older launcher) or out is too small, with err saying which. Never
 * allocates (the front end calls it in slurmstepd after fork).
 */
int gb_gpu_dev_minors(const struct gb_table *t, const int *gpus, int n,
		      int *out, int max, char *err, size_t errlen);

/*
 * Whether gpus[i] of a result is one of the task's own GPUs (not one that
 * visible=first|localid added). Inline, so that fabric.c asks it without
 * calling back into output.c, which calls fabric.c.
 */
static inline int gb_result_is_own(const struct gb_result *r, int i)
{
	return !r->widened || (i >= r->own_at && i < r->own_at + r->nown);
}

/*
 * The admin's default= on a step (docs/admin.md "default="). A binding that
 * comes only from default= never shrinks what a task sees, and a step it
 * would not bind is never failed by the plugin: so what the step's
 * environment alone decides is decided here, in the front end, before any
 * trust check, plan cache lookup or launcher. Plain C, no allocation.
 */
enum gb_default_verdict {
	/* No SLURM_STEP_GPUS (a CPU-only step, --gres=none, --gpus=0, a step
	 * of a GPU job that has SLURM_JOB_GPUS only) or an empty one: Slurm
	 * gave the step no GPU on this node. Not bound. */
	GB_DEFAULT_NO_GPUS,
	/* The policy gives the tasks fewer GPUs than the step has here
	 * (torchrun, JAX, one process driving several GPUs): left exactly as
	 * Slurm set it up. */
	GB_DEFAULT_FEWER_TASKS,
	/* tasks x N == the step's GPUs: bound, per-task cpus/isolate too. */
	GB_DEFAULT_BIND,
	/* tasks x N > the step's GPUs (tasks share GPUs): bound, without
	 * per-task cpus and isolate. */
	GB_DEFAULT_SHARE,
	/* The environment does not tell (a GPU list or option text this
	 * parser does not read): the engine plans and decides. */
	GB_DEFAULT_ASK_ENGINE,
};

struct gb_default_step {
	const char *step_gpus;  /* SLURM_STEP_GPUS, NULL when unset */
	int ntasks;             /* the node's local tasks */
	int ngpus;              /* out: the step's GPUs here, -1 unknown */
	int used;               /* out: GPUs the policy gives the tasks, -1 unknown */
};

/* Entries of a GPU list as Slurm writes SLURM_STEP_GPUS ("0,1,3", "0-3",
 * GPU-/MIG- UUIDs); -1 when it is not one. "" has 0. */
int gb_gpu_list_count(const char *list);

/* GPUs an option's policy gives ntasks tasks on a node: per-task:N gives N
 * each, single:N one per N tasks, every other policy one each. -1 when the
 * option's first item is a per-task:/single: without a valid N. */
int gb_option_gpus_used(const char *option, int ntasks);

enum gb_default_verdict gb_default_decide(const char *option,
					  struct gb_default_step *s);

/*
 * The option text a default binding plans with, into buf: for
 * GB_DEFAULT_SHARE without the cpus and isolate flags; then
 * ",visible=localid" added (every task keeps every step GPU and finds its
 * own nearest at entry SLURM_LOCALID) unless the option names a visible=
 * or asks isolate, or force (GB_FLAG_* bits the admin forces) holds
 * isolate: isolation is the admin's explicit choice to show a task only
 * its own GPU. 0, or -1 when buf is too small.
 */
int gb_default_option(const char *option, enum gb_default_verdict v,
		      unsigned force, char *buf, size_t len);

/*
 * The CPUs the task runs on (cpus flag): the rule's CPUs within own, the
 * affinity Slurm gave it (NULL: unknown). Returns 1 when the task's affinity
 * is to be set to *out (the rule's CPUs within own). Returns 0 when it stays
 * as it is, *out then saying what the task runs on: own without the cpus
 * flag, and when none of the rule's CPUs is in own; with own unknown, the
 * rule's CPUs (nothing to narrow; empty without the cpus flag). The front end
 * and `gpubind plan` both call it.
 */
int gb_result_affinity(const struct gb_result *r, const cpu_set_t *own,
		       cpu_set_t *out);

/* Flag names ("isolate,cpus", "-" for none) to GB_FLAG_* bits: 0, or -1
 * for an unknown name; and back ("-" for none). */
int gb_flags_parse(const char *s, unsigned *flags);
void gb_flags_format(unsigned flags, char *buf, size_t len);

/* CPU list "0-3,8" or "-" into set. Returns 0 or -1. */
int gb_parse_cpulist(const char *s, cpu_set_t *set);
/* Format a set as a CPU list ("-" when empty). */
void gb_format_cpulist(const cpu_set_t *set, char *buf, size_t len);

/*
 * Per-task output. gb_result_env calls set(ctx, NAME, VALUE, OVERWRITE) for
 * each variable of PROTOCOL.md section 3 item 4, in order (OVERWRITE 0: a
 * value the task already has stays), and stops at the first
 * nonzero return, which it returns; -1 when a value is longer than
 * GB_ENV_VALUE_MAX. gb_result_logline fills buf with the log line of task
 * lid (global id rank), without the "gpubind: " prefix: 0, or -1 when buf
 * is too small. On AMD ("vendor amd") the task's list goes into
 * ROCR_VISIBLE_DEVICES, and CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES and
 * GPU_DEVICE_ORDINAL become 0..n-1, which HIP reads relative to what ROCr
 * shows (docs/admin.md "AMD Instinct GPUs"); CUDA_DEVICE_ORDER is not set.
 */
#define GB_ENV_VALUE_MAX 8192
typedef int (*gb_env_set)(void *ctx, const char *name, const char *value,
			  int overwrite);
int gb_result_env(const struct gb_table *t, const struct gb_result *r,
		  gb_env_set set, void *ctx);
int gb_result_logline(const struct gb_table *t, const struct gb_result *r,
		      int lid, long rank, char *buf, size_t len);

/*
 * Step-wide output for container runtimes (plugstack containers=yes,
 * docs/containers.md): the UUIDs of every GPU of the step on this node, in
 * table order, comma-separated, the value of NVIDIA_VISIBLE_DEVICES. 0, or
 * -1 with buf holding why: a GPU without a UUID (named by its NVML index
 * and bus id), AMD GPUs, or buf too small.
 */
int gb_step_container_gpus(const struct gb_table *t, char *buf, size_t len);

#endif
