/*
 * gpuhelper.h - rank, GPU and NCCL unique ID for a process of a parallel job, in one call.
 *
 * libgpuhelper asks the job's PMIx server (`srun --mpi=pmix`, Open MPI's mpirun) where the
 * process sits in its job, picks its GPU (from the gpubind SPANK plugin's choice when present),
 * and hands every rank the same NCCL unique ID, created by rank 0 with the application's own
 * ncclGetUniqueId. No MPI is needed, and no NCCL either for the rank and GPU facts: without
 * NCCL, gpuhelper_init still succeeds and only the NCCL ID is missing (see flags).
 * NVIDIA and AMD GPUs alike: on AMD Instinct nodes the GPU is HIP's and the ID RCCL's
 * (librccl.so.1 has NCCL's symbols and 128-byte ID, so the same code builds with hipcc,
 * hipSetDevice in place of cudaSetDevice); docs/helper.md "AMD GPUs and RCCL".
 *
 *     gpuhelper_set_nccl_get_unique_id((gpuhelper_nccl_get_unique_id_fn)ncclGetUniqueId);
 *     gpuhelper_info_t info = { .struct_size = sizeof(info) };
 *     int rc = gpuhelper_init(&info);
 *     if (rc != 0) {
 *         fprintf(stderr, "gpuhelper_init: %s: %s\n", gpuhelper_strerror(rc), gpuhelper_last_error());
 *         exit(1);
 *     }
 *     cudaSetDevice(info.cuda_device);
 *     ncclUniqueId id;
 *     memcpy(&id, info.nccl_id, sizeof(id));
 *     ncclCommInitRank(&comm, info.size, id, info.rank);
 *
 * Build: cc app.c $(pkg-config --cflags --libs gpuhelper)
 *
 * Collective calls (gpuhelper_init, gpuhelper_finalize, gpuhelper_nccl_id, gpuhelper_scalable_ids,
 * gpuhelper_group_id, gpuhelper_barrier, gpuhelper_bcast, gpuhelper_allgather) must be made by
 * every rank of the job, in the same order. The calls may be made from any thread, and are
 * serialised inside the library, with one exception, the environment: the first
 * gpuhelper_init may set CUDA_DEVICE_ORDER and (for a MIG rank) CUDA_VISIBLE_DEVICES with
 * setenv, and reads variables with getenv; glibc's setenv is not safe while another thread
 * reads or changes the environment, so make the first gpuhelper_init before the program starts
 * threads that do (or set CUDA_DEVICE_ORDER yourself, and give each MIG rank its own instance).
 * The library embeds a Go runtime: see docs/helper.md for what that means inside your process.
 *
 * Environment:
 *   GPUHELPER_TIMEOUT        seconds to wait for another rank's data (default 300)
 *   GPUHELPER_EXCHANGE       "auto" (default: per exchange, "fence" for several roots or from
 *                            64 nodes on, "direct" otherwise and for node groups), "direct"
 *                            (root Put+Commit, others Get, no fence) or "fence" (root
 *                            Put+Commit, collecting fence, local Gets)
 *   GPUHELPER_NCCL_LIBRARY   library to dlopen when the process has no ncclGetUniqueId
 *                            (default: an NCCL or RCCL the process already loaded, else
 *                            libnccl.so.2 and librccl.so.1, RCCL first when the rank's GPU is
 *                            an AMD GPU)
 *   GPUHELPER_SCALABLE_IDS   default count for gpuhelper_scalable_count (default ceil(size/128))
 *   GPUHELPER_NCCL_ID        "init" (default) or "lazy": rank 0 makes no world ID during
 *                            gpuhelper_init, the first gpuhelper_nccl_id does (since 1.1)
 *   GPUHELPER_PMIX_LIBRARY   the PMIx client library, dlopen'ed by gpuhelper_init (default
 *                            libpmix.so.2); without one, a singleton still works (since 1.2)
 *   GPUBIND_NVL_CLIQUE       (set by the gpubind plugin) the rank's NVLink clique (since 1.3)
 */
#ifndef GPUHELPER_H
#define GPUHELPER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUHELPER_VERSION_MAJOR 1
#define GPUHELPER_VERSION_MINOR 3
#define GPUHELPER_VERSION_PATCH 0

/* Size of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES). */
#define GPUHELPER_NCCL_ID_BYTES 128

/* Return codes: 0 on success, else one of these (negative). gpuhelper_strerror names them and
 * gpuhelper_last_error gives the details of the last failure in the calling thread. */
#define GPUHELPER_SUCCESS 0
#define GPUHELPER_EINVAL (-1)    /* bad argument (NULL, struct_size too small, bad count/color) */
#define GPUHELPER_ENOSERVER (-2) /* no PMIx server, and the job has more than one process */
#define GPUHELPER_EPMIX (-3)     /* a PMIx call failed */
#define GPUHELPER_ETIMEOUT (-4)  /* another rank's data did not arrive within GPUHELPER_TIMEOUT */
#define GPUHELPER_ENCCL (-5)     /* no NCCL ID: ncclGetUniqueId missing or failed (here or on the
                                    root), NCCL versions differ, or NCCL_COMM_ID would collide */
#define GPUHELPER_EFORK (-6)     /* called in a forked child that has not exec'd */
#define GPUHELPER_EGPU (-7)      /* GPUBIND_* or CUDA_VISIBLE_DEVICES malformed */
#define GPUHELPER_ENOTINIT (-8)  /* gpuhelper_init has not succeeded (or was finalized) */
#define GPUHELPER_EENV (-9)      /* a GPUHELPER_* variable is malformed */
#define GPUHELPER_EINTERNAL (-10) /* internal error (a bug: please report the message) */
#define GPUHELPER_EFINALIZED (-11) /* gpuhelper_init after PMIx was released (since 1.1) */
#define GPUHELPER_EMIG (-12)     /* this rank's MIG instance cannot be made its CUDA device 0:
                                    CUDA was loaded before gpuhelper_init (since 1.2) */
#define GPUHELPER_EPEER (-13)    /* another process of the job ended abnormally (the launcher's
                                    PMIx event said so; the message names its rank) while this
                                    one waited for it (since 1.3; 1.2 waited out
                                    GPUHELPER_TIMEOUT and returned GPUHELPER_ETIMEOUT) */
#define GPUHELPER_EORDER (-14)   /* the ranks made collective calls in different orders (or with
                                    different counts), seen where an ID exchange read another
                                    kind of exchange's value (since 1.3; 1.2 could hand such a
                                    rank the wrong ID) */

/* Size of gpuhelper_info_t.nvl_clique (since 1.3). */
#define GPUHELPER_NVL_CLIQUE_BYTES 64

/* gpuhelper_info_t.flags: nccl_id holds the world ID (rank 0 created it during gpuhelper_init). */
#define GPUHELPER_INFO_NCCL_ID 0x1ULL

/* What gpuhelper_init reports. Fields are only ever appended: a program built against an older
 * header passes a smaller struct_size and gets the fields it knows (at least the 1.0 ones). */
typedef struct gpuhelper_info {
    size_t struct_size;            /* caller sets sizeof(gpuhelper_info_t): lets the struct grow */
    int rank, size;                /* global */
    int local_rank, local_size;    /* on this node */
    int node_id, num_nodes;        /* node_id is 0..num_nodes-1: this node's place among the
                                      job's nodes, in the launcher's order (dense even where the
                                      launcher numbers nodes sparsely, as Open MPI and PRRTE do) */
    int cuda_device;               /* pass to cudaSetDevice() (AMD: hipSetDevice()); -1 if no
                                      GPU is visible */
    char pci_bus_id[32];           /* "0000:1b:00.0", or "" if unknown */
    char gpu_uuid[96];             /* "GPU-..." or "MIG-...", or "" */
    unsigned char nccl_id[GPUHELPER_NCCL_ID_BYTES]; /* same bytes on every rank: an ncclUniqueId;
                                                       all zero unless flags has GPUHELPER_INFO_NCCL_ID */
    /* Since 1.1. */
    unsigned long long flags;      /* GPUHELPER_INFO_* bits */
    /* Since 1.3. */
    char nvl_clique[GPUHELPER_NVL_CLIQUE_BYTES]; /* this rank's multi-node NVLink clique,
                                      "<cluster_uuid>.<clique_id>" (the form of Kubernetes'
                                      nvidia.com/gpu.clique label): GPUBIND_NVL_CLIQUE, which the
                                      gpubind plugin sets when the task's GPUs are in a completed
                                      NVLink fabric (GB200 NVL72); else, when the process has
                                      loaded and initialised NVML, NVML's fabric info of the
                                      rank's GPU (state completed); else "" */
} gpuhelper_info_t;

/*
 * gpuhelper_init connects to the job's PMIx server, fills *info, and gives every rank the NCCL
 * unique ID that rank 0 created with ncclGetUniqueId (the function passed to
 * gpuhelper_set_nccl_get_unique_id, else looked up in the process, then in
 * GPUHELPER_NCCL_LIBRARY, then an NCCL or RCCL already loaded, then libnccl.so.2 and
 * librccl.so.1). Collective.
 *
 * Without NCCL (rank 0 finds no ncclGetUniqueId, or it fails) gpuhelper_init still succeeds:
 * rank, sizes, node and GPU are filled, flags lacks GPUHELPER_INFO_NCCL_ID on every rank, nccl_id
 * is zero, and gpuhelper_nccl_id says why (or creates the ID once NCCL is there). So it does
 * with GPUHELPER_NCCL_ID=lazy, where rank 0 does not touch NCCL during init at all. A program
 * built against the 1.0 header (its struct_size has no flags field) gets GPUHELPER_ENCCL
 * instead, as with 1.0.
 *
 * Set info->struct_size = sizeof(gpuhelper_info_t) first. Idempotent: later calls (from any
 * thread) return the same answer without talking to PMIx again. Returns 0 or GPUHELPER_E...;
 * rank 0 dying before it publishes the ID makes the others return GPUHELPER_ETIMEOUT.
 *
 * When it fails (since 1.2): a rank should end the job with gpuhelper_abort, or call
 * gpuhelper_finalize before it exits; once init had reached the PMIx server, finalize still
 * joins the other ranks' final barrier, so they do not wait for this rank until their timeout.
 * The other calls return GPUHELPER_ENOTINIT. Calling gpuhelper_init again returns the same
 * error, except after GPUHELPER_ETIMEOUT, which it retries: the retry is the same exchange, so
 * it still meets a slow rank 0.
 *
 * GPU choice: the gpubind plugin's GPUBIND_* variables when set (the cuda_device its
 * GPUBIND_CUDA_DEVICES names, 0 when unset, in the CUDA_VISIBLE_DEVICES it set); otherwise local_rank modulo the GPUs CUDA_VISIBLE_DEVICES lets
 * the process see, in PCI bus id order. Only GPUs the process can use count, as in CUDA: bound
 * to the nvidia driver, and /dev/nvidiaN readable and writable (so the device cgroup of Slurm's
 * ConstrainDevices, and containers, are respected; Slurm's indices 0..k-1 count those GPUs).
 * Before the first call, when CUDA_DEVICE_ORDER is unset and libcuda is not loaded yet, it sets
 * CUDA_DEVICE_ORDER=PCI_BUS_ID so that CUDA numbers GPUs in that order too. If CUDA was
 * initialised earlier or another order was asked for, cudaDeviceGetByPCIBusId(&dev,
 * info.pci_bus_id) is the safe way to find the device. pci_bus_id is "" when unknown (a MIG
 * instance, or sysfs unreadable): then use cuda_device.
 * MIG (since 1.2): CUDA shows a process one MIG instance only. When the rank's choice is a MIG
 * instance named in CUDA_VISIBLE_DEVICES (MIG-... entries), gpuhelper_init sets
 * CUDA_VISIBLE_DEVICES to that instance alone and reports cuda_device 0 and its MIG UUID in
 * gpu_uuid; if libcuda is already loaded and the instance is not CUDA's first, it returns
 * GPUHELPER_EMIG instead.
 * AMD GPUs: where the process can use no NVIDIA GPU, the GPUs are those of the KFD topology
 * (sysfs, no ROCm library) in KFD order, which is ROCr's, less those whose render node
 * /dev/dri/renderD<N> the process may not read and write (or whose KFD files the device cgroup
 * hides), as ROCr counts them; then ROCR_VISIBLE_DEVICES applied as ROCr applies it, then
 * HIP_VISIBLE_DEVICES (else CUDA_VISIBLE_DEVICES) relative to that. cuda_device is then HIP's
 * device number, pci_bus_id the GPU's (an MI300 compute partition shares its device's), and
 * gpu_uuid "GPU-" and the 16 hex digits of its unique_id. CUDA_DEVICE_ORDER means nothing to HIP.
 * Without a PMIx server, a single process (rank 0 of 1) still works.
 */
int gpuhelper_init(gpuhelper_info_t *info);

/* gpuhelper_finalize waits (up to GPUHELPER_TIMEOUT) until every rank has called it, then
 * releases PMIx. Collective: a root must not exit while others may still be fetching its IDs
 * (under Slurm they are served from the root's node, which goes away with its last task).
 * Call it once, when the process is done with the library: a PMIx client cannot initialise
 * twice, so a later gpuhelper_init returns GPUHELPER_EFINALIZED, and the calls that need init
 * return GPUHELPER_ENOTINIT. After a failed gpuhelper_init that had reached the PMIx server it
 * joins the barrier all the same (since 1.2; 1.1 returned 0 at once and the others waited out
 * their timeout). Returns 0 when not initialised; after GPUHELPER_ETIMEOUT the library is
 * finalized all the same. The barrier fences with PMIX_COLLECT_DATA only for a job on several
 * nodes (under Slurm, a fence without it does not wait for the other nodes). */
int gpuhelper_finalize(void);

/*
 * gpuhelper_nccl_id copies the world NCCL ID (the one in info.nccl_id) into id, which must hold
 * GPUHELPER_NCCL_ID_BYTES bytes (an ncclUniqueId *). Collective: every rank calls it. If
 * gpuhelper_init got the ID, this is a local copy. If it did not (no NCCL on rank 0 then), rank 0
 * tries again now (e.g. after gpuhelper_set_nccl_get_unique_id, or once the program has loaded
 * NCCL) and every rank gets the new ID, or GPUHELPER_ENCCL with rank 0's reason. Needs
 * gpuhelper_init. Since 1.1.
 */
int gpuhelper_nccl_id(void *id);

/*
 * gpuhelper_nccl_origin says which NCCL made the world NCCL ID on rank 0: *version gets its
 * ncclGetVersion() (22803 for 2.28.3; 0 if unknown, e.g. a statically linked NCCL that exports
 * no ncclGetVersion), and library the path of the loaded file that holds the ncclGetUniqueId
 * rank 0 used ("" if unknown), NUL-terminated in library_bytes bytes (GPUHELPER_EINVAL if it
 * does not fit). Either pointer may be NULL. Local. Needs the world ID (GPUHELPER_ENCCL without
 * one). Since 1.1.
 *
 * Rank 0 publishes its NCCL version with every ID it makes (so do the roots of scalable and
 * group IDs); a rank whose own NCCL (gpuhelper_set_nccl_get_unique_id's, or one already in the
 * process: nothing is loaded to find out) reports another version refuses the ID with
 * GPUHELPER_ENCCL naming both, instead of hanging in ncclCommInitRank. That includes
 * gpuhelper_init, where such a rank fails while the others succeed.
 */
int gpuhelper_nccl_origin(int *version, char *library, size_t library_bytes);

/* gpuhelper_strerror names a return code ("GPUHELPER_ETIMEOUT: ..."). Never NULL. Plain C: safe
 * in a forked child. */
const char *gpuhelper_strerror(int err);

/* gpuhelper_last_error describes the last failure of a gpuhelper_* call in the calling thread
 * (which input, what was expected), or "" if there was none. Valid until the thread's next
 * failing call. Plain C. */
const char *gpuhelper_last_error(void);

/* gpuhelper_version returns "MAJOR.MINOR.PATCH" of the library loaded (compare with the
 * GPUHELPER_VERSION_* macros of the header compiled against). Plain C. */
const char *gpuhelper_version(void);

/* Signature of ncclGetUniqueId (ncclResult_t is an int-sized enum, 0 = ncclSuccess; the
 * argument is an ncclUniqueId *). */
typedef int (*gpuhelper_nccl_get_unique_id_fn)(void *unique_id);

/* gpuhelper_set_nccl_get_unique_id makes the library create IDs with fn: the recommended way,
 * call it before gpuhelper_init, on every rank:
 *     gpuhelper_set_nccl_get_unique_id((gpuhelper_nccl_get_unique_id_fn)ncclGetUniqueId);
 * Then the IDs come from the very NCCL the program calls. Without it the library looks
 * ncclGetUniqueId up in the process (dlsym RTLD_DEFAULT: this cannot see an NCCL linked
 * statically into the program) and else dlopens GPUHELPER_NCCL_LIBRARY (RTLD_LOCAL), which may
 * be another NCCL than the program's. NULL restores the lookup. Applies to IDs created
 * afterwards. Local. */
int gpuhelper_set_nccl_get_unique_id(gpuhelper_nccl_get_unique_id_fn fn);

/* gpuhelper_scalable_count returns the number of IDs to use with ncclCommInitRankScalable:
 * GPUHELPER_SCALABLE_IDS if set, else ceil(size/128); or a negative GPUHELPER_E... code.
 * Needs gpuhelper_init. Local (not collective). */
int gpuhelper_scalable_count(void);

/*
 * gpuhelper_scalable_ids gives every rank the same nids IDs for
 *     ncclCommInitRankScalable(&comm, info.size, info.rank, nids, (ncclUniqueId *)ids, &config);
 * ID i is created by the rank where NCCL's documented rankHasRoot puts root i:
 * i*(size/nids) + min(i, size%nids) (300 ranks, 3 IDs: ranks 0, 100, 200).
 * ids must hold nids*GPUHELPER_NCCL_ID_BYTES bytes (ids_bytes says how many it holds);
 * 1 <= nids <= size. Collective: every rank passes the same nids. Needs gpuhelper_init.
 * Refused (GPUHELPER_ENCCL, the message names NCCL_COMM_ID) while NCCL_COMM_ID is in force on a
 * root: NCCL then puts that one address in every ID, so the IDs would collide.
 */
int gpuhelper_scalable_ids(int nids, unsigned char *ids, size_t ids_bytes);

/* Color for gpuhelper_group_id: one group per node (the ranks sharing this node). */
#define GPUHELPER_COLOR_NODE (-1)

/* A sub-communicator's ID and this rank's place in it. */
typedef struct gpuhelper_group {
    size_t struct_size;   /* caller sets sizeof(gpuhelper_group_t) */
    int color;            /* the color passed */
    int rank, size;       /* rank in the group (ordered by global rank) and group size: pass to
                             ncclCommInitRank(&comm, size, id, rank) */
    int root;             /* global rank that created the ID: the group's lowest rank */
    unsigned char nccl_id[GPUHELPER_NCCL_ID_BYTES];
} gpuhelper_group_t;

/*
 * gpuhelper_group_id splits the job like MPI_Comm_split(color, key = global rank) and gives
 * each group its own NCCL ID, created by the group's lowest rank. color >= 0, or
 * GPUHELPER_COLOR_NODE for one group per node (no color exchange needed). Collective: every
 * rank of the job calls it, each with its own color. Needs gpuhelper_init. Refused like
 * gpuhelper_scalable_ids while NCCL_COMM_ID is in force.
 */
int gpuhelper_group_id(int color, gpuhelper_group_t *group);

/*
 * Small collectives (since 1.1), for control data around NCCL: a few bytes to a few MiB per
 * rank, at most GPUHELPER_COLL_MAX_BYTES. The data travels through the PMIx server, which keeps
 * every value until gpuhelper_finalize: use NCCL for bulk data. Collective: every rank calls
 * them, in the same order as the other collective calls. Need gpuhelper_init. Waits are bounded
 * by GPUHELPER_TIMEOUT (GPUHELPER_ETIMEOUT).
 *
 * Retry after GPUHELPER_ETIMEOUT (since 1.2; gpuhelper_init, gpuhelper_nccl_id,
 * gpuhelper_scalable_ids, gpuhelper_group_id, gpuhelper_bcast, gpuhelper_allgather): when
 * another rank's data did not come in time, calling the same function again with the same
 * arguments, before any other collective call, continues the same exchange (what this rank
 * published is not published again), so it still meets a slow rank. Any other collective call
 * moves on in step with the ranks that completed the timed-out one. A barrier (a fence) that
 * timed out cannot be retried: the ranks are out of step, end the job (gpuhelper_abort).
 * Failures other than timeouts (bad arguments are refused before anything is exchanged; no
 * NCCL on a root, sizes that differ) happen alike on every rank involved.
 */
#define GPUHELPER_COLL_MAX_BYTES (16 * 1024 * 1024)

/* gpuhelper_barrier returns once every rank has called it. */
int gpuhelper_barrier(void);

/* gpuhelper_bcast copies root's len bytes at buf into buf on every other rank. Every rank
 * passes the same root (0..size-1) and len; a rank whose len differs from root's gets
 * GPUHELPER_EINVAL naming both. */
int gpuhelper_bcast(int root, void *buf, size_t len);

/* gpuhelper_allgather gives every rank the len bytes at buf of every rank: rank r's land at
 * out + r*len. out must hold size*len bytes (out_bytes says how many it holds). Every rank
 * passes the same len (GPUHELPER_EINVAL naming both sizes otherwise). */
int gpuhelper_allgather(const void *buf, size_t len, void *out, size_t out_bytes);

/*
 * gpuhelper_nvl_cliques sets *count to the number of distinct multi-node NVLink cliques that
 * the job's ranks are in (their info.nvl_clique; ranks without one are not counted, so 0 when
 * no rank has one). NCCL joins two GPUs by multi-node NVLink only inside one clique: with 2 or
 * more, a communicator over all ranks falls back to the network between cliques, so a program
 * can warn (or split by clique) before ncclCommInitRank. Collective (an allgather of the clique
 * names). Needs gpuhelper_init. Since 1.3.
 */
int gpuhelper_nvl_cliques(int *count);

/* gpuhelper_abort ends every process of the job: it asks the PMIx server (PMIx_Abort) to have
 * the launcher kill all ranks, and exits this process, both with code's low 8 bits as the exit
 * status, or 1 if those are 0 (since 1.3: 1.2 passed code itself to PMIx, and 256 ended the
 * job with status 0). msg (may be NULL) goes to stderr and to the launcher. Like MPI_Abort, it
 * flushes stdio and ends the process with _exit (since 1.3): no atexit handler runs, none
 * waits for threads still inside calls. Not collective; any rank, any thread may call it at any
 * time: from the moment gpuhelper_init (in any thread) has connected to the PMIx server, also
 * while that init or a collective is still running in another thread. Without gpuhelper_init,
 * or without a PMIx server, it ends this process only. Does not return, except for code 0
 * (GPUHELPER_EINVAL). */
int gpuhelper_abort(int code, const char *msg);

#ifdef __cplusplus
}
#endif

#endif /* GPUHELPER_H */
