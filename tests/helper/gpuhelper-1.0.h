/* gpuhelper.h as released in 1.0.0, frozen: tests/helper compiles a program against it and runs
 * it with the current library, to prove that binaries built against 1.0 keep working. Never edit. */
/*
 * gpuhelper.h - rank, GPU and NCCL unique ID for a process of a parallel job, in one call.
 *
 * libgpuhelper asks the job's PMIx server (`srun --mpi=pmix`, Open MPI's mpirun) where the
 * process sits in its job, picks its GPU (from the gpubind SPANK plugin's choice when present),
 * and hands every rank the same NCCL unique ID, created by rank 0 with the application's own
 * ncclGetUniqueId. No MPI is needed.
 *
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
 * Collective calls (gpuhelper_init, gpuhelper_scalable_ids, gpuhelper_group_id) must be made by
 * every rank of the job, in the same order. All calls are thread-safe. The library embeds a Go
 * runtime: see docs/helper.md for what that means inside your process.
 *
 * Environment:
 *   GPUHELPER_TIMEOUT        seconds to wait for another rank's data (default 300)
 *   GPUHELPER_EXCHANGE       "direct" (default: root Put+Commit, others Get, no fence) or "fence"
 *   GPUHELPER_NCCL_LIBRARY   library to dlopen when the process has no ncclGetUniqueId
 *                            (default libnccl.so.2)
 *   GPUHELPER_SCALABLE_IDS   default count for gpuhelper_scalable_count (default ceil(size/128))
 */
#ifndef GPUHELPER_H
#define GPUHELPER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUHELPER_VERSION_MAJOR 1
#define GPUHELPER_VERSION_MINOR 0
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
#define GPUHELPER_ENCCL (-5)     /* ncclGetUniqueId missing or failed (here or on the root) */
#define GPUHELPER_EFORK (-6)     /* called in a forked child that has not exec'd */
#define GPUHELPER_EGPU (-7)      /* GPUBIND_* or CUDA_VISIBLE_DEVICES malformed */
#define GPUHELPER_ENOTINIT (-8)  /* gpuhelper_init has not succeeded (or was finalized) */
#define GPUHELPER_EENV (-9)      /* a GPUHELPER_* variable is malformed */
#define GPUHELPER_EINTERNAL (-10) /* internal error (a bug: please report the message) */

/* What gpuhelper_init reports. */
typedef struct gpuhelper_info {
    size_t struct_size;            /* caller sets sizeof(gpuhelper_info_t): lets the struct grow */
    int rank, size;                /* global */
    int local_rank, local_size;    /* on this node */
    int node_id, num_nodes;
    int cuda_device;               /* pass to cudaSetDevice(); -1 if no GPU is visible */
    char pci_bus_id[32];           /* "0000:1b:00.0", or "" if unknown */
    char gpu_uuid[96];             /* "GPU-..." or "MIG-...", or "" */
    unsigned char nccl_id[GPUHELPER_NCCL_ID_BYTES]; /* same bytes on every rank: an ncclUniqueId */
} gpuhelper_info_t;

/*
 * gpuhelper_init connects to the job's PMIx server, fills *info, and gives every rank the NCCL
 * unique ID that rank 0 created with ncclGetUniqueId (looked up in the process first, then in
 * GPUHELPER_NCCL_LIBRARY, unless gpuhelper_set_nccl_get_unique_id named one). Collective.
 *
 * Set info->struct_size = sizeof(gpuhelper_info_t) first. Idempotent: later calls (from any
 * thread) return the same answer without talking to PMIx again. Returns 0 or GPUHELPER_E...;
 * rank 0 dying before it publishes the ID makes the others return GPUHELPER_ETIMEOUT.
 *
 * GPU choice: the gpubind plugin's GPUBIND_* variables when set (cuda_device 0 of the
 * CUDA_VISIBLE_DEVICES it set); otherwise local_rank modulo the GPUs CUDA_VISIBLE_DEVICES lets
 * the process see, in PCI bus id order. Before the first call, when CUDA_DEVICE_ORDER is unset
 * and libcuda is not loaded yet, it sets CUDA_DEVICE_ORDER=PCI_BUS_ID so that CUDA numbers GPUs
 * in that order too. If CUDA was initialised earlier or another order was asked for,
 * cudaDeviceGetByPCIBusId(&dev, info.pci_bus_id) is the safe way to find the device.
 * Without a PMIx server, a single process (rank 0 of 1) still works.
 */
int gpuhelper_init(gpuhelper_info_t *info);

/* gpuhelper_finalize waits (up to GPUHELPER_TIMEOUT) until every rank has called it, then
 * releases PMIx. Collective: a root must not exit while others may still be fetching its IDs
 * (under Slurm they are served from the root's node, which goes away with its last task).
 * Later calls need a new gpuhelper_init (a new NCCL ID). Returns 0 when not initialised; after
 * GPUHELPER_ETIMEOUT the library is finalized all the same. */
int gpuhelper_finalize(void);

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

/* gpuhelper_set_nccl_get_unique_id makes the library create IDs with fn, e.g.
 * (gpuhelper_nccl_get_unique_id_fn)ncclGetUniqueId, instead of looking the symbol up. NULL
 * restores the lookup. Applies to IDs created afterwards; call it before gpuhelper_init to
 * cover the world ID. */
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
 * rank of the job calls it, each with its own color. Needs gpuhelper_init.
 */
int gpuhelper_group_id(int color, gpuhelper_group_t *group);

#ifdef __cplusplus
}
#endif

#endif /* GPUHELPER_H */
