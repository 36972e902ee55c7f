/* The public C API of libgpuhelper (gpuhelper.h). Every entry point checks here, in C, that it
 * is not running in a forked child that has not exec'd, before it enters Go: Go code in such a
 * child hangs as soon as it allocates (golang/go#15538). strerror, last_error and version never
 * enter Go at all. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpuhelper.h"
#include "_cgo_export.h"
#include "../pmixkv/pmix_client.h"

#define GH_EXPORT __attribute__((visibility("default")))
#define GH_STR2(x) #x
#define GH_STR(x) GH_STR2(x)

static pid_t gh_pid;

/* The structs as released in 1.0, frozen: a program built against the 1.0 header passes these
 * sizes in struct_size, and must keep working with every later 1.x library. Fields are only
 * ever appended, so a caller's struct is a prefix of ours (or ours of a newer caller's): the
 * library accepts any struct_size from the 1.0 size up and fills min(struct_size, sizeof). */
struct gh_info_1_0 {
    size_t struct_size;
    int rank, size;
    int local_rank, local_size;
    int node_id, num_nodes;
    int cuda_device;
    char pci_bus_id[32];
    char gpu_uuid[96];
    unsigned char nccl_id[GPUHELPER_NCCL_ID_BYTES];
};
struct gh_group_1_0 {
    size_t struct_size;
    int color;
    int rank, size;
    int root;
    unsigned char nccl_id[GPUHELPER_NCCL_ID_BYTES];
};
/* The info struct as released in 1.1 and 1.2 (1.0 and flags). */
struct gh_info_1_2 {
    struct gh_info_1_0 v10;
    unsigned long long flags;
};
#define GH_INFO_SIZE_1_0 sizeof(struct gh_info_1_0)
#define GH_GROUP_SIZE_1_0 sizeof(struct gh_group_1_0)
_Static_assert(offsetof(gpuhelper_info_t, nccl_id) == offsetof(struct gh_info_1_0, nccl_id),
               "gpuhelper_info_t: the 1.0 fields must keep their offsets");
_Static_assert(offsetof(gpuhelper_group_t, nccl_id) == offsetof(struct gh_group_1_0, nccl_id),
               "gpuhelper_group_t: the 1.0 fields must keep their offsets");
/* So that struct_size tells a 1.0 caller from a 1.1 one, the first 1.1 field must start past the
 * end of the 1.0 struct (its tail padding included). */
_Static_assert(offsetof(gpuhelper_info_t, flags) >= GH_INFO_SIZE_1_0,
               "gpuhelper_info_t.flags overlaps the 1.0 struct");
_Static_assert(offsetof(gpuhelper_info_t, flags) == offsetof(struct gh_info_1_2, flags),
               "gpuhelper_info_t: the 1.1 fields must keep their offsets");
_Static_assert(offsetof(gpuhelper_info_t, nvl_clique) >= sizeof(struct gh_info_1_2),
               "gpuhelper_info_t.nvl_clique overlaps the 1.2 struct");
_Static_assert(sizeof(gpuhelper_info_t) >= GH_INFO_SIZE_1_0 && sizeof(gpuhelper_group_t) >= GH_GROUP_SIZE_1_0,
               "the structs only grow");

static size_t gh_min(size_t a, size_t b) { return a < b ? a : b; }

/* Runs when the library is loaded, as does the Go runtime: that pid owns the Go threads. */
__attribute__((constructor)) static void gh_record_pid(void) { gh_pid = getpid(); }

/* Details of the calling thread's last failure: a heap buffer of GH_ERR_BYTES, made on the
 * thread's first call into the library and freed when the thread exits. Only a pointer lives
 * in TLS: a library that is dlopen'ed (by Python, by a plugin host) must keep its static TLS
 * small, since glibc has only a small surplus of it for libraries loaded after start ("cannot
 * allocate memory in static TLS block"). */
#define GH_ERR_BYTES 1024
static __thread char *gh_err;
static __thread int gh_err_nomem; /* a failure found no memory for its message */
static pthread_key_t gh_err_key;  /* only to free the buffer at thread exit */
static pthread_once_t gh_err_once = PTHREAD_ONCE_INIT;
static int gh_err_key_ok;

static void gh_err_free(void *p)
{
    if (gh_err == p)
        gh_err = NULL;
    free(p);
}

static void gh_err_make_key(void) { gh_err_key_ok = pthread_key_create(&gh_err_key, gh_err_free) == 0; }

/* gh_errbuf returns the calling thread's buffer, made on first use; NULL without memory. */
static char *gh_errbuf(void)
{
    char *b;
    if (gh_err != NULL)
        return gh_err;
    b = calloc(1, GH_ERR_BYTES);
    if (b == NULL) {
        gh_err_nomem = 1;
        return NULL;
    }
    /* Without the key the buffer is not freed at thread exit: a leak, but the message works. */
    if (pthread_once(&gh_err_once, gh_err_make_key) == 0 && gh_err_key_ok)
        (void)pthread_setspecific(gh_err_key, b);
    gh_err = b;
    gh_err_nomem = 0;
    return b;
}

/* The buffer and its size for the Go side, which writes its messages there (size 0: none). */
static size_t gh_errlen(void) { return gh_errbuf() != NULL ? GH_ERR_BYTES : 0; }
#define GH_ERR gh_errbuf(), gh_errlen()

__attribute__((format(printf, 1, 2))) static void gh_errf(const char *fmt, ...)
{
    char *b = gh_errbuf();
    va_list ap;
    if (b == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(b, GH_ERR_BYTES, fmt, ap);
    va_end(ap);
}

static int gh_fail(int rc, const char *msg)
{
    gh_errf("gpuhelper: %s", msg);
    return rc;
}

static int gh_forked(void)
{
    if (getpid() == gh_pid)
        return 0;
    gh_errf("gpuhelper: called in pid %ld, a fork of pid %ld that has not exec'd; the library "
            "(its Go runtime) cannot run there: call it before fork or after exec",
            (long)getpid(), (long)gh_pid);
    return 1;
}

/* gh_lib_loaded says whether a library whose file name starts with prefix is in the process.
 * dl_iterate_phdr reads the loader's list of loaded objects: unlike dlopen(RTLD_NOLOAD), it
 * does not walk the library search path (0.3-0.4 ms per call measured). */
struct gh_find {
    const char *prefix;
    int found;
};

static int gh_find_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    struct gh_find *f = data;
    const char *name = info->dlpi_name, *base;
    (void)size;
    if (name == NULL || *name == '\0')
        return 0;
    base = strrchr(name, '/');
    base = base != NULL ? base + 1 : name;
    if (strncmp(base, f->prefix, strlen(f->prefix)) == 0) {
        f->found = 1;
        return 1;
    }
    return 0;
}

static int gh_lib_loaded(const char *prefix)
{
    struct gh_find f = {prefix, 0};
    dl_iterate_phdr(gh_find_cb, &f);
    return f.found;
}

/* gh_cuda_loaded: whether libcuda is in the process already (it reads CUDA_VISIBLE_DEVICES
 * once, when initialised). Also for the Go side (MIG). */
int gh_cuda_loaded(void) { return gh_lib_loaded("libcuda.so"); }

/* gh_nvml_clique writes the NVLink clique of the GPU at PCI bus id bus ("<cluster_uuid>.<clique
 * id>") into out when the process has loaded NVML and initialised it, and NVML reports that
 * GPU's fabric as completed; else "" (returns 0 when it wrote one). Loads nothing. */
struct gh_fabric_v1 { /* nvmlGpuFabricInfo_t (NVML 12.x): the fields it has had since it came */
    unsigned char cluster_uuid[16];
    int status;       /* nvmlReturn_t */
    unsigned int clique_id;
    unsigned char state; /* nvmlGpuFabricState_t: 3 = NVML_GPU_FABRIC_STATE_COMPLETED */
};

int gh_nvml_clique(const char *bus, char *out, size_t len)
{
    void *h, *dev = NULL;
    int (*by_bus)(const char *, void **);
    int (*fabric)(void *, struct gh_fabric_v1 *);
    struct gh_fabric_v1 fi;
    const unsigned char *u = fi.cluster_uuid;
    if (len > 0)
        out[0] = '\0';
    if (len < 48 || bus == NULL || *bus == '\0' || !gh_lib_loaded("libnvidia-ml.so"))
        return -1;
    h = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL)
        return -1;
    *(void **)&by_bus = dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&fabric = dlsym(h, "nvmlDeviceGetGpuFabricInfo");
    memset(&fi, 0, sizeof(fi));
    /* Without the program's nvmlInit, NVML answers NVML_ERROR_UNINITIALIZED: nothing here. */
    if (by_bus == NULL || fabric == NULL || by_bus(bus, &dev) != 0 || fabric(dev, &fi) != 0 || fi.status != 0 ||
        fi.state != 3) {
        dlclose(h);
        return -1;
    }
    dlclose(h);
    snprintf(out, len, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x.%u", u[0], u[1], u[2],
             u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15], fi.clique_id);
    return 0;
}

/* CUDA numbers GPUs fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID is set before it starts.
 * Set it when unset and libcuda is not loaded yet (once loaded, CUDA may have read it). */
static void gh_set_cuda_order(void)
{
    if (getenv("CUDA_DEVICE_ORDER") != NULL || gh_cuda_loaded())
        return;
    if (setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 0) != 0)
        gh_fail(0, "setenv CUDA_DEVICE_ORDER failed; cuda_device may not match pci_bus_id");
}

/* The first gpuhelper_init opens the PMIx session here, in C, before any call into Go: the
 * Go runtime, started when the library was loaded, is still starting on its own thread, and
 * PMIx_Init and the job-fact Gets (a few round trips to the server) overlap that start instead
 * of waiting for it. Meanwhile a helper thread (gh_worker) makes the first call into Go, which
 * waits for the runtime, and scans the GPUs. By the time the PMIx facts are in, Go is ready
 * and the scan is done; the helper thread then runs the Go part of that first init too
 * (ghGoInit, which takes the session over: pmixkv.Session) while the caller waits. The
 * caller's own thread does not enter Go at all during its first init: the first entry of a
 * thread costs Go a stack lookup (pthread_getattr_np), which on the main thread reads all of
 * /proc/self/maps (about 0.35M instructions, measured with callgrind). */
static pthread_once_t gh_open_once = PTHREAD_ONCE_INIT;
static struct pk_session gh_sess;
static int gh_sess_open; /* gh_open ran: gh_sess holds PMIx_Init's status */

/* The helper thread and the one request it serves: the first gpuhelper_init's Go part. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running;     /* the thread started and has not given up serving */
    int claimed;     /* a gpuhelper_init took the request */
    int posted, done;
    gpuhelper_info_t *info;
    int need_id, rc;
    char *err;
    size_t errlen;
    char *root; /* GPUHELPER_SYSROOT, read before the thread starts */
    int scan;   /* 0: the plugin's GPUBIND_* variables choose the GPU, no scan needed */
} gh_w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL, 0, 0, NULL, 0, NULL, 0};

static void *gh_worker(void *p)
{
    (void)p;
    ghGoPrewarm(gh_w.root, gh_w.scan);
    pthread_mutex_lock(&gh_w.mu);
    while (!gh_w.posted)
        pthread_cond_wait(&gh_w.cv, &gh_w.mu);
    pthread_mutex_unlock(&gh_w.mu);
    gh_w.rc = ghGoInit(gh_w.info, gh_w.need_id, gh_w.err, gh_w.errlen);
    pthread_mutex_lock(&gh_w.mu);
    gh_w.done = 1;
    pthread_cond_broadcast(&gh_w.cv);
    pthread_mutex_unlock(&gh_w.mu);
    return NULL;
}

static void gh_start_worker(void)
{
    const char *root = getenv("GPUHELPER_SYSROOT");
    pthread_attr_t attr;
    pthread_t t;
    gh_w.root = strdup(root != NULL ? root : "");
    gh_w.scan = getenv("GPUBIND_GPUS") == NULL && getenv("GPUBIND_PCI_BUS_IDS") == NULL;
    if (gh_w.root == NULL || pthread_attr_init(&attr) != 0)
        return; /* no helper: the caller does it all */
    (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    gh_w.running = pthread_create(&t, &attr, gh_worker, NULL) == 0;
    pthread_attr_destroy(&attr);
}

/* gh_go_init runs ghGoInit: on the helper thread for the first caller, else here. */
static int gh_go_init(gpuhelper_info_t *info, int need_id)
{
    int mine;
    pthread_mutex_lock(&gh_w.mu);
    mine = gh_w.running && !gh_w.claimed;
    gh_w.claimed = 1;
    if (mine) {
        gh_w.info = info;
        gh_w.need_id = need_id;
        gh_w.err = gh_errbuf();
        gh_w.errlen = gh_errlen();
        gh_w.posted = 1;
        pthread_cond_broadcast(&gh_w.cv);
        while (!gh_w.done)
            pthread_cond_wait(&gh_w.cv, &gh_w.mu);
    }
    pthread_mutex_unlock(&gh_w.mu);
    if (mine)
        return gh_w.rc;
    return ghGoInit(info, need_id, GH_ERR);
}

static void gh_open(void)
{
    /* The environment is read, and CUDA_DEVICE_ORDER set, before the helper thread starts:
     * it reads no variables itself. */
    gh_set_cuda_order();
    gh_start_worker();
    if (pk_open(&gh_sess) == 0)
        (void)pk_watch(); /* without it, a dead rank is noticed by timeouts only */
    gh_sess_open = 1;
}

/* gh_session: the session of the first gpuhelper_init, for the Go side (NULL before it). */
void *gh_session(void) { return gh_sess_open ? &gh_sess : NULL; }

/* A failed gpuhelper_init keeps its PMIx session for gpuhelper_finalize (which then joins the
 * other ranks' final barrier). A program that exits without calling it, as programs written for
 * 1.0 and 1.1 do after a failure, must still leave PMIx properly (mpirun reports a process that
 * initialised PMIx and exits without finalizing as an error): at exit, the session of a failed
 * init is released, without a barrier. */
static pthread_once_t gh_exit_once = PTHREAD_ONCE_INIT;

static void gh_at_exit(void)
{
    if (!gh_forked())
        ghGoReleaseFailed();
}

static void gh_register_exit(void) { (void)atexit(gh_at_exit); }

GH_EXPORT int gpuhelper_init(gpuhelper_info_t *info)
{
    gpuhelper_info_t tmp;
    size_t size;
    int rc;

    if (gh_forked())
        return GPUHELPER_EFORK;
    if (info == NULL)
        return gh_fail(GPUHELPER_EINVAL, "gpuhelper_init: info is NULL");
    size = info->struct_size;
    if (size < GH_INFO_SIZE_1_0) {
        gh_errf("gpuhelper: gpuhelper_init: info->struct_size is %zu, expected sizeof(gpuhelper_info_t) "
                "(%zu in this library, at least %zu: the 1.0 size)",
                size, sizeof(gpuhelper_info_t), GH_INFO_SIZE_1_0);
        return GPUHELPER_EINVAL;
    }
    if (pthread_once(&gh_open_once, gh_open) != 0)
        return gh_fail(GPUHELPER_EINTERNAL, "pthread_once failed");
    memset(&tmp, 0, sizeof(tmp));
    /* A 1.0 caller has no flags field to learn that nccl_id is missing: it needs the ID. */
    rc = gh_go_init(&tmp, size < offsetof(gpuhelper_info_t, flags) + sizeof(tmp.flags));
    if (rc != 0) {
        (void)pthread_once(&gh_exit_once, gh_register_exit);
        return rc;
    }
    /* A caller built against an older header passes a smaller struct, one built against a newer
     * header a larger one: fill the fields both know, leave the caller's others alone. */
    memcpy(info, &tmp, gh_min(size, sizeof(tmp)));
    info->struct_size = size;
    return 0;
}

GH_EXPORT int gpuhelper_finalize(void)
{
    if (gh_forked())
        return GPUHELPER_EFORK;
    return ghGoFinalize(GH_ERR);
}

GH_EXPORT int gpuhelper_nccl_id(void *id)
{
    if (gh_forked())
        return GPUHELPER_EFORK;
    if (id == NULL)
        return gh_fail(GPUHELPER_EINVAL, "gpuhelper_nccl_id: id is NULL");
    return ghGoNcclID(id, GH_ERR);
}

GH_EXPORT int gpuhelper_nccl_origin(int *version, char *library, size_t library_bytes)
{
    if (gh_forked())
        return GPUHELPER_EFORK;
    if (library != NULL && library_bytes == 0)
        return gh_fail(GPUHELPER_EINVAL, "gpuhelper_nccl_origin: library_bytes is 0, expected the size of library");
    return ghGoNcclOrigin(version, library, library_bytes, GH_ERR);
}

GH_EXPORT int gpuhelper_nvl_cliques(int *count)
{
    if (gh_forked())
        return GPUHELPER_EFORK;
    if (count == NULL)
        return gh_fail(GPUHELPER_EINVAL, "gpuhelper_nvl_cliques: count is NULL");
    return ghGoNvlCliques(count, GH_ERR);
}

GH_EXPORT int gpuhelper_barrier(void)
{
    if (gh_forked())
        return GPUHELPER_EFORK;
    return ghGoBarrier(GH_ERR);
}

GH_EXPORT int gpuhelper_bcast(int root, void *buf, size_t len)
{
    if (gh_forked())
        return GPUHELPER_EFORK;
    return ghGoBcast(root, buf, len, GH_ERR);
}

GH_EXPORT int gpuhelper_allgather(const void *buf, size_t len, void *out, size_t out_bytes)
{
    if (gh_forked())
        return GPUHELPER_EFORK;
    return ghGoAllgather((void *)buf, len, out, out_bytes, GH_ERR); /* Go only reads buf */
}

/* Ends the job through PMIx when it can, and this process in any case: it must not return.
 * Plain C, no lock and no Go: the PMIx session is usable as soon as PMIx_Init returned in
 * gpuhelper_init, also while another thread is still inside gpuhelper_init or waits in a
 * collective. */
GH_EXPORT int gpuhelper_abort(int code, const char *msg)
{
    int status, rc;
    if (code == 0)
        return gh_fail(GPUHELPER_EINVAL, "gpuhelper_abort: code 0, expected a nonzero exit status");
    /* The shell and the launcher see the low 8 bits: keep a failure a failure (256 would read
     * as success), for the job as for this process. */
    status = (code & 0xff) != 0 ? code & 0xff : 1;
    fprintf(stderr, "gpuhelper: gpuhelper_abort(%d) in pid %ld: %s\n", code, (long)getpid(), msg ? msg : "");
    if (gh_forked())
        fprintf(stderr, "%s: ending this process only\n", gpuhelper_last_error());
    else if (!pk_live())
        fprintf(stderr, "gpuhelper: gpuhelper_abort: no PMIx session to end the job through (no server, "
                        "gpuhelper_init not run, or finalized): ending this process only\n");
    else if ((rc = pk_abort(status, msg ? msg : "")) != 0)
        fprintf(stderr, "gpuhelper: gpuhelper_abort: PMIx_Abort: %s (%d): ending this process only\n",
                pk_strerror(rc), rc);
    /* As MPI_Abort: flush, then end at once, without atexit handlers or destructors, which
     * could wait for threads that are inside collectives. */
    fflush(NULL);
    _exit(status);
}

GH_EXPORT int gpuhelper_set_nccl_get_unique_id(gpuhelper_nccl_get_unique_id_fn fn)
{
    void *p = NULL;
    if (gh_forked())
        return GPUHELPER_EFORK;
    memcpy(&p, &fn, sizeof(p) < sizeof(fn) ? sizeof(p) : sizeof(fn));
    return ghGoSetNcclFn(p, GH_ERR);
}

GH_EXPORT int gpuhelper_scalable_count(void)
{
    if (gh_forked())
        return GPUHELPER_EFORK;
    return ghGoScalableCount(GH_ERR);
}

GH_EXPORT int gpuhelper_scalable_ids(int nids, unsigned char *ids, size_t ids_bytes)
{
    if (gh_forked())
        return GPUHELPER_EFORK;
    return ghGoScalableIDs(nids, ids, ids_bytes, GH_ERR);
}

GH_EXPORT int gpuhelper_group_id(int color, gpuhelper_group_t *group)
{
    gpuhelper_group_t tmp;
    size_t size;
    int rc;

    if (gh_forked())
        return GPUHELPER_EFORK;
    if (group == NULL)
        return gh_fail(GPUHELPER_EINVAL, "gpuhelper_group_id: group is NULL");
    size = group->struct_size;
    if (size < GH_GROUP_SIZE_1_0) {
        gh_errf("gpuhelper: gpuhelper_group_id: group->struct_size is %zu, expected sizeof(gpuhelper_group_t) "
                "(%zu in this library, at least %zu: the 1.0 size)",
                size, sizeof(gpuhelper_group_t), GH_GROUP_SIZE_1_0);
        return GPUHELPER_EINVAL;
    }
    memset(&tmp, 0, sizeof(tmp));
    rc = ghGoGroupID(color, &tmp, GH_ERR);
    if (rc != 0)
        return rc;
    memcpy(group, &tmp, gh_min(size, sizeof(tmp)));
    group->struct_size = size;
    return 0;
}

GH_EXPORT const char *gpuhelper_strerror(int err)
{
    switch (err) {
    case GPUHELPER_SUCCESS: return "GPUHELPER_SUCCESS: success";
    case GPUHELPER_EINVAL: return "GPUHELPER_EINVAL: invalid argument";
    case GPUHELPER_ENOSERVER: return "GPUHELPER_ENOSERVER: no PMIx server for a job of several processes (launch with srun --mpi=pmix)";
    case GPUHELPER_EPMIX: return "GPUHELPER_EPMIX: a PMIx call failed";
    case GPUHELPER_ETIMEOUT: return "GPUHELPER_ETIMEOUT: another rank's data did not arrive in time (GPUHELPER_TIMEOUT)";
    case GPUHELPER_ENCCL: return "GPUHELPER_ENCCL: no NCCL ID (ncclGetUniqueId missing or failed, NCCL versions differ, or NCCL_COMM_ID)";
    case GPUHELPER_EFORK: return "GPUHELPER_EFORK: called in a forked child that has not exec'd";
    case GPUHELPER_EGPU: return "GPUHELPER_EGPU: GPU selection variables (GPUBIND_*, CUDA_VISIBLE_DEVICES) are malformed";
    case GPUHELPER_ENOTINIT: return "GPUHELPER_ENOTINIT: gpuhelper_init has not succeeded";
    case GPUHELPER_EENV: return "GPUHELPER_EENV: a GPUHELPER_* environment variable is malformed";
    case GPUHELPER_EINTERNAL: return "GPUHELPER_EINTERNAL: internal error";
    case GPUHELPER_EFINALIZED: return "GPUHELPER_EFINALIZED: gpuhelper_init after PMIx was released (gpuhelper_finalize): a process initialises once";
    case GPUHELPER_EMIG: return "GPUHELPER_EMIG: this rank's MIG instance cannot be its CUDA device (CUDA was loaded before gpuhelper_init)";
    case GPUHELPER_EPEER: return "GPUHELPER_EPEER: another process of the job ended while this one waited for it";
    case GPUHELPER_EORDER: return "GPUHELPER_EORDER: the ranks made collective calls in different orders";
    }
    return "GPUHELPER_E?: unknown error code";
}

GH_EXPORT const char *gpuhelper_last_error(void)
{
    if (gh_err != NULL)
        return gh_err;
    return gh_err_nomem ? "gpuhelper: out of memory (no room for the error message)" : "";
}

GH_EXPORT const char *gpuhelper_version(void)
{
    return GH_STR(GPUHELPER_VERSION_MAJOR) "." GH_STR(GPUHELPER_VERSION_MINOR) "." GH_STR(GPUHELPER_VERSION_PATCH);
}
