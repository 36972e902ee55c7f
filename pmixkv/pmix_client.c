/* The PMIx calls of package pmixkv. Kept out of Go preambles so <pmix.h> reaches no generated
 * header: cgo copies the preamble of a file with //export into the library's header, and every
 * program built against libgpuhelper would then need the PMIx headers. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include <dlfcn.h>
#include <pmix.h>

#include "pmix_client.h"

/* libpmix is loaded with dlopen on first use, not linked (no DT_NEEDED), so that a program using
 * libgpuhelper starts, and runs as a singleton, on a host without PMIx. Every PMIx function
 * used here, directly or through pmix.h's macros, goes through a pointer resolved then. */
#define PK_FUNCTIONS(X)                                                                            \
    X(PMIx_Init) X(PMIx_Finalize) X(PMIx_Abort) X(PMIx_Error_string) X(PMIx_Get) X(PMIx_Get_nb)     \
    X(PMIx_Put) X(PMIx_Commit) X(PMIx_Fence_nb) X(PMIx_Info_load) X(PMIx_Value_destruct)           \
    X(PMIx_Value_xfer) X(PMIx_Register_event_handler)
#define PK_POINTER(f) static __typeof__(f) *pk_##f;
PK_FUNCTIONS(PK_POINTER)
#define PMIx_Init (*pk_PMIx_Init)
#define PMIx_Finalize (*pk_PMIx_Finalize)
#define PMIx_Abort (*pk_PMIx_Abort)
#define PMIx_Error_string (*pk_PMIx_Error_string)
#define PMIx_Get (*pk_PMIx_Get)
#define PMIx_Get_nb (*pk_PMIx_Get_nb)
#define PMIx_Put (*pk_PMIx_Put)
#define PMIx_Commit (*pk_PMIx_Commit)
#define PMIx_Fence_nb (*pk_PMIx_Fence_nb)
#define PMIx_Info_load (*pk_PMIx_Info_load)
#define PMIx_Value_destruct (*pk_PMIx_Value_destruct)
#define PMIx_Value_xfer (*pk_PMIx_Value_xfer)
#define PMIx_Register_event_handler (*pk_PMIx_Register_event_handler)

static pthread_once_t pk_once = PTHREAD_ONCE_INIT;
static int pk_loaded;
static char pk_load_err[512];

/* The library: $GPUHELPER_PMIX_LIBRARY if set, else libpmix.so.2 (found through this object's
 * RUNPATH, the build's PMIx libdir, then the loader's usual search). RTLD_LOCAL: its symbols
 * must not become the process's, where an MPI library with a PMIx of its own, loaded later,
 * would bind to ours (PMIx 4 builds its plugins into the library, so none needs them global).
 * A libpmix the program itself links is the same object, shared. */
static void pk_load(void)
{
    const char *name = getenv("GPUHELPER_PMIX_LIBRARY");
    void *h;
    if (name == NULL || *name == '\0')
        name = "libpmix.so.2";
    h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(pk_load_err, sizeof(pk_load_err), "dlopen(%s) failed: %s", name, e ? e : "?");
        return;
    }
#define PK_RESOLVE(f)                                                                              \
    if ((*(void **)&pk_##f = dlsym(h, #f)) == NULL) {                                              \
        snprintf(pk_load_err, sizeof(pk_load_err), "%s has no %s", name, #f);                      \
        return;                                                                                    \
    }
    PK_FUNCTIONS(PK_RESOLVE)
    pk_loaded = 1;
}

const char *pk_library_error(void)
{
    (void)pthread_once(&pk_once, pk_load);
    return pk_loaded ? "" : pk_load_err;
}

int pk_err_timeout(void) { return PMIX_ERR_TIMEOUT; }
int pk_err_unreach(void) { return PMIX_ERR_UNREACH; }
int pk_err_not_found(void) { return PMIX_ERR_NOT_FOUND; }
int pk_err_error(void) { return PMIX_ERROR; }
uint32_t pk_rank_wildcard(void) { return PMIX_RANK_WILDCARD; }

const char *pk_strerror(int rc)
{
    if (*pk_library_error() != '\0')
        return "PMIx library not loaded";
    return PMIx_Error_string(rc);
}

static int pk_is_live;
static char pk_ns[PMIX_MAX_NSLEN + 1]; /* this process's namespace and rank, once open */
static pmix_rank_t pk_me;
static pthread_mutex_t pk_live_mu = PTHREAD_MUTEX_INITIALIZER;

int pk_live(void)
{
    int v;
    pthread_mutex_lock(&pk_live_mu);
    v = pk_is_live;
    pthread_mutex_unlock(&pk_live_mu);
    return v;
}

/* A blocking Get of a number (any integer type, or a decimal string). */
static int get_number(const pmix_proc_t *p, const char *key, uint64_t *out);

static int get_string(const pmix_proc_t *p, const char *key, char **out)
{
    pmix_value_t *v = NULL;
    pmix_status_t rc = PMIx_Get(p, key, NULL, 0, &v);
    *out = NULL;
    if (rc != PMIX_SUCCESS)
        return rc;
    if (v == NULL)
        return PMIX_ERR_NOT_FOUND;
    if (v->type != PMIX_STRING || v->data.string == NULL)
        rc = PMIX_ERR_TYPE_MISMATCH;
    else if ((*out = strdup(v->data.string)) == NULL)
        rc = PMIX_ERR_NOMEM;
    PMIX_VALUE_RELEASE(v);
    return rc;
}

int pk_open(struct pk_session *s)
{
    pmix_proc_t me, wild;
    memset(s, 0, sizeof(*s));
    memset(&me, 0, sizeof(me));
    if (*pk_library_error() != '\0')
        return s->rc = PMIX_ERR_UNREACH; /* no PMIx here: no server to reach either */
    if ((s->rc = PMIx_Init(&me, NULL, 0)) != PMIX_SUCCESS)
        return s->rc;
    pthread_mutex_lock(&pk_live_mu);
    pk_is_live = 1;
    pthread_mutex_unlock(&pk_live_mu);
    snprintf(s->nspace, sizeof(s->nspace), "%s", me.nspace);
    s->rank = me.rank;
    snprintf(pk_ns, sizeof(pk_ns), "%s", me.nspace);
    pk_me = me.rank;
    /* The same Gets, in the same order, as a hand-written client (bench/c/raw_pmix.c), and
     * the node list: job facts with the wildcard rank, then this process's own. */
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    s->size_rc = get_number(&wild, PMIX_JOB_SIZE, &s->size);
    s->local_size_rc = get_number(&wild, PMIX_LOCAL_SIZE, &s->local_size);
    s->num_nodes_rc = get_number(&wild, PMIX_NUM_NODES, &s->num_nodes);
    s->lpeers_rc = get_string(&wild, PMIX_LOCAL_PEERS, &s->lpeers);
    s->nlist_rc = get_string(&wild, PMIX_NODE_LIST, &s->nlist);
    s->local_rank_rc = get_number(&me, PMIX_LOCAL_RANK, &s->local_rank);
    s->node_id_rc = get_number(&me, PMIX_NODEID, &s->node_id);
    s->hostname_rc = get_string(&me, PMIX_HOSTNAME, &s->hostname);
    return PMIX_SUCCESS;
}

int pk_finalize(void)
{
    pthread_mutex_lock(&pk_live_mu);
    pk_is_live = 0;
    pthread_mutex_unlock(&pk_live_mu);
    return PMIx_Finalize(NULL, 0);
}

int pk_abort(int status, const char *msg)
{
    if (!pk_live())
        return PMIX_ERR_INIT;
    return PMIx_Abort(status, msg, NULL, 0);
}

/* Deaths of other processes of the job, from the event handler; req_wait looks every
 * PK_DEAD_POLL_MS while it waits. */
#define PK_DEAD_POLL_MS 100
static pthread_mutex_t pk_dead_mu = PTHREAD_MUTEX_INITIALIZER;
static long pk_dead_rank = -1;
static int pk_dead_status;
static char pk_dead_why[128];

int pk_err_proc_aborted(void) { return PMIX_ERR_PROC_ABORTED; }

long pk_dead(int *status, char *why, size_t why_len)
{
    long r;
    pthread_mutex_lock(&pk_dead_mu);
    r = pk_dead_rank;
    if (status != NULL)
        *status = pk_dead_status;
    if (why != NULL && why_len > 0)
        snprintf(why, why_len, "%s", pk_dead_why);
    pthread_mutex_unlock(&pk_dead_mu);
    return r;
}


static void pk_on_death(size_t id, pmix_status_t status, const pmix_proc_t *source, pmix_info_t info[],
                        size_t ninfo, pmix_info_t results[], size_t nresults,
                        pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    const pmix_proc_t *who = NULL;
    (void)id;
    (void)results;
    (void)nresults;
    for (size_t i = 0; i < ninfo; i++)
        if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROC) && info[i].value.type == PMIX_PROC)
            who = info[i].value.data.proc;
    if (who == NULL)
        who = source;
    /* Our own job's other processes only; an event about this process or another job is not
     * a peer's death. */
    if (who != NULL && strncmp(who->nspace, pk_ns, PMIX_MAX_NSLEN) == 0 && who->rank != pk_me &&
        who->rank < PMIX_RANK_VALID) {
        pthread_mutex_lock(&pk_dead_mu);
        if (pk_dead_rank < 0) {
            pk_dead_rank = (long)who->rank;
            pk_dead_status = status;
            snprintf(pk_dead_why, sizeof(pk_dead_why), "%s", PMIx_Error_string(status));
        }
        pthread_mutex_unlock(&pk_dead_mu);
    }
    if (cbfunc != NULL)
        cbfunc(PMIX_SUCCESS, NULL, 0, NULL, NULL, cbdata);
}

static void pk_watch_done(pmix_status_t status, size_t ref, void *cbdata)
{
    (void)status;
    (void)ref;
    (void)cbdata;
}

/* Abnormal ends only: a process that ends normally (PMIX_PROC_TERMINATED) has finalized, and
 * gpuhelper_finalize is a barrier, so nobody waits for it any more. */
int pk_watch(void)
{
    pmix_status_t codes[] = {PMIX_ERR_PROC_ABORTED, PMIX_ERR_PROC_TERM_WO_SYNC, PMIX_ERR_PROC_ABORTED_BY_SIG,
                             PMIX_ERR_PROC_ABORTING};
    pmix_status_t rc;
    if (!pk_live())
        return PMIX_ERR_INIT;
    /* Non-blocking: the registration's round trip to the server must not delay the caller. */
    rc = PMIx_Register_event_handler(codes, sizeof(codes) / sizeof(codes[0]), NULL, 0, pk_on_death, pk_watch_done, NULL);
    return rc < 0 ? rc : PMIX_SUCCESS;
}

/* A non-blocking request waited for with our own deadline. PMIX_TIMEOUT alone is not enough:
 * Slurm's mpi/pmix forwards a Get for a remote rank's key to that node and waits there with its
 * own timeout (PMIxTimeout, 300 s by default), ignoring the client's. When our deadline passes
 * first, the caller gives up and the request is abandoned: the callback, which may still come,
 * frees it (refs counts the caller and the callback). */
struct req {
    pmix_proc_t proc[1]; /* the nb calls may read these after returning: keep them here */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    int done;
    pmix_status_t rc;
    pmix_value_t *val; /* copy of the Get's value, owned by the request until taken */
    pmix_info_t info[2];
    size_t ninfo;
};

static struct req *req_new(void)
{
    struct req *r = calloc(1, sizeof(*r));
    pthread_condattr_t ca;
    if (r == NULL)
        return NULL;
    if (pthread_condattr_init(&ca) != 0) {
        free(r);
        return NULL;
    }
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (pthread_mutex_init(&r->mu, NULL) != 0 || pthread_cond_init(&r->cv, &ca) != 0) {
        pthread_condattr_destroy(&ca);
        free(r);
        return NULL;
    }
    pthread_condattr_destroy(&ca);
    r->refs = 2;
    return r;
}

/* req_put drops one reference; the last one frees. Called with r->mu held; unlocks it. */
static void req_put(struct req *r)
{
    int last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (!last)
        return;
    for (size_t i = 0; i < r->ninfo; i++)
        PMIX_INFO_DESTRUCT(&r->info[i]);
    if (r->val != NULL)
        PMIX_VALUE_RELEASE(r->val);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static void req_finish(struct req *r, pmix_status_t rc)
{
    pthread_mutex_lock(&r->mu);
    r->rc = rc;
    r->done = 1;
    pthread_cond_broadcast(&r->cv);
    req_put(r);
}

static void get_cb(pmix_status_t status, pmix_value_t *kv, void *cbdata)
{
    struct req *r = cbdata;
    /* kv belongs to PMIx and is released after we return: copy it. */
    if (status == PMIX_SUCCESS && kv != NULL) {
        PMIX_VALUE_CREATE(r->val, 1);
        if (r->val == NULL)
            status = PMIX_ERR_NOMEM;
        else if ((status = PMIx_Value_xfer(r->val, kv)) != PMIX_SUCCESS) {
            PMIX_VALUE_RELEASE(r->val);
            r->val = NULL;
        }
    } else if (status == PMIX_SUCCESS) {
        status = PMIX_ERR_NOT_FOUND;
    }
    req_finish(r, status);
}

static void op_cb(pmix_status_t status, void *cbdata) { req_finish(cbdata, status); }

/* req_wait waits until the callback ran or timeout_ms passed; takes *val when asked. Returns
 * the request's status or PMIX_ERR_TIMEOUT, and drops the caller's reference. */
static pmix_status_t req_wait(struct req *r, int timeout_ms, pmix_value_t **val)
{
    struct timespec dl;
    pmix_status_t rc;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&r->mu);
    while (!r->done) {
        /* Wake up every PK_DEAD_POLL_MS to see whether another process of the job died: then
         * the data may never come, and waiting out the deadline helps nobody. */
        struct timespec now, slice;
        clock_gettime(CLOCK_MONOTONIC, &now);
        slice = now;
        slice.tv_nsec += PK_DEAD_POLL_MS * 1000000L;
        if (slice.tv_nsec >= 1000000000L) {
            slice.tv_sec++;
            slice.tv_nsec -= 1000000000L;
        }
        int last = slice.tv_sec > dl.tv_sec || (slice.tv_sec == dl.tv_sec && slice.tv_nsec >= dl.tv_nsec);
        if (last)
            slice = dl;
        int e = pthread_cond_timedwait(&r->cv, &r->mu, &slice);
        if (r->done)
            break;
        if (pk_dead(NULL, NULL, 0) >= 0) {
            req_put(r);
            return PMIX_ERR_PROC_ABORTED;
        }
        if (e == ETIMEDOUT && last) {
            req_put(r);
            return PMIX_ERR_TIMEOUT;
        }
    }
    rc = r->rc;
    if (val != NULL) {
        *val = r->val;
        r->val = NULL;
    }
    req_put(r);
    return rc;
}

static void load_timeout(struct req *r, int timeout_ms)
{
    int s = (timeout_ms + 999) / 1000;
    PMIX_INFO_LOAD(&r->info[r->ninfo], PMIX_TIMEOUT, &s, PMIX_INT);
    r->ninfo++;
}

/* get fetches key of (nspace, rank). timeout_ms > 0 adds PMIX_TIMEOUT (without it a same-node
 * Get gives up after about 2 s) and bounds the wait here as well. */
static int get(const char *nspace, uint32_t rank, const char *key, int timeout_ms, pmix_value_t **val)
{
    pmix_proc_t proc;
    pmix_status_t rc;

    *val = NULL;
    if (timeout_ms <= 0) {
        memset(&proc, 0, sizeof(proc));
        PMIX_LOAD_PROCID(&proc, nspace, rank);
        rc = PMIx_Get(&proc, key, NULL, 0, val);
    } else {
        struct req *r = req_new();
        if (r == NULL)
            return PMIX_ERR_NOMEM;
        PMIX_LOAD_PROCID(r->proc, nspace, rank);
        load_timeout(r, timeout_ms);
        rc = PMIx_Get_nb(r->proc, key, r->info, r->ninfo, get_cb, r);
        if (rc != PMIX_SUCCESS) {
            pthread_mutex_lock(&r->mu);
            r->refs--; /* the callback will not run */
            req_put(r);
            return rc;
        }
        rc = req_wait(r, timeout_ms, val);
    }
    if (rc == PMIX_SUCCESS && *val == NULL)
        rc = PMIX_ERR_NOT_FOUND;
    return rc;
}

/* to_number converts a value of any integer type, or a decimal string, and releases it:
 * launchers differ in the types they use (Slurm and Open MPI). */
static int to_number(pmix_value_t *v, uint64_t *out)
{
    pmix_status_t rc = PMIX_SUCCESS;
    switch (v->type) {
    case PMIX_UINT8: *out = v->data.uint8; break;
    case PMIX_UINT16: *out = v->data.uint16; break;
    case PMIX_UINT32: *out = v->data.uint32; break;
    case PMIX_UINT64: *out = v->data.uint64; break;
    case PMIX_UINT: *out = v->data.uint; break;
    case PMIX_SIZE: *out = v->data.size; break;
    case PMIX_PROC_RANK: *out = v->data.rank; break;
    case PMIX_INT8: if (v->data.int8 < 0) rc = PMIX_ERR_BAD_PARAM; else *out = (uint64_t)v->data.int8; break;
    case PMIX_INT16: if (v->data.int16 < 0) rc = PMIX_ERR_BAD_PARAM; else *out = (uint64_t)v->data.int16; break;
    case PMIX_INT32: if (v->data.int32 < 0) rc = PMIX_ERR_BAD_PARAM; else *out = (uint64_t)v->data.int32; break;
    case PMIX_INT64: if (v->data.int64 < 0) rc = PMIX_ERR_BAD_PARAM; else *out = (uint64_t)v->data.int64; break;
    case PMIX_INT: if (v->data.integer < 0) rc = PMIX_ERR_BAD_PARAM; else *out = (uint64_t)v->data.integer; break;
    case PMIX_STRING: {
        char *end = NULL;
        if (v->data.string == NULL || v->data.string[0] == '\0') {
            rc = PMIX_ERR_BAD_PARAM;
            break;
        }
        errno = 0;
        unsigned long long n = strtoull(v->data.string, &end, 10);
        if (errno != 0 || *end != '\0')
            rc = PMIX_ERR_BAD_PARAM;
        else
            *out = n;
        break;
    }
    default: rc = PMIX_ERR_TYPE_MISMATCH; break;
    }
    PMIX_VALUE_RELEASE(v);
    return rc;
}

int pk_get_number(const char *nspace, uint32_t rank, const char *key, int timeout_ms, uint64_t *out)
{
    pmix_value_t *v = NULL;
    pmix_status_t rc = get(nspace, rank, key, timeout_ms, &v);
    if (rc != PMIX_SUCCESS)
        return rc;
    return to_number(v, out);
}

static int get_number(const pmix_proc_t *p, const char *key, uint64_t *out)
{
    pmix_value_t *v = NULL;
    pmix_status_t rc = PMIx_Get(p, key, NULL, 0, &v);
    if (rc != PMIX_SUCCESS)
        return rc;
    if (v == NULL)
        return PMIX_ERR_NOT_FOUND;
    return to_number(v, out);
}

int pk_get_string(const char *nspace, uint32_t rank, const char *key, int timeout_ms, char **out)
{
    pmix_value_t *v = NULL;
    pmix_status_t rc = get(nspace, rank, key, timeout_ms, &v);
    if (rc != PMIX_SUCCESS)
        return rc;
    if (v->type != PMIX_STRING || v->data.string == NULL) {
        PMIX_VALUE_RELEASE(v);
        return PMIX_ERR_TYPE_MISMATCH;
    }
    *out = strdup(v->data.string);
    PMIX_VALUE_RELEASE(v);
    return *out ? PMIX_SUCCESS : PMIX_ERR_NOMEM;
}

int pk_get_bytes(const char *nspace, uint32_t rank, const char *key, int timeout_ms, void **out,
                 size_t *len)
{
    pmix_value_t *v = NULL;
    const void *src;
    size_t n;
    pmix_status_t rc = get(nspace, rank, key, timeout_ms, &v);
    if (rc != PMIX_SUCCESS)
        return rc;
    if (v->type == PMIX_BYTE_OBJECT) {
        src = v->data.bo.bytes;
        n = v->data.bo.size;
    } else if (v->type == PMIX_STRING && v->data.string != NULL) {
        src = v->data.string;
        n = strlen(v->data.string);
    } else {
        PMIX_VALUE_RELEASE(v);
        return PMIX_ERR_TYPE_MISMATCH;
    }
    *out = NULL;
    *len = n;
    if (n > 0) {
        *out = malloc(n);
        if (*out == NULL) {
            PMIX_VALUE_RELEASE(v);
            return PMIX_ERR_NOMEM;
        }
        memcpy(*out, src, n);
    }
    PMIX_VALUE_RELEASE(v);
    return PMIX_SUCCESS;
}

int pk_put_bytes(const char *key, const void *data, size_t len)
{
    pmix_value_t v;
    pmix_status_t rc;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.size = len;
    v.data.bo.bytes = NULL;
    if (len > 0) {
        v.data.bo.bytes = malloc(len);
        if (v.data.bo.bytes == NULL)
            return PMIX_ERR_NOMEM;
        memcpy(v.data.bo.bytes, data, len);
    }
    rc = PMIx_Put(PMIX_GLOBAL, key, &v);
    PMIX_VALUE_DESTRUCT(&v);
    return rc;
}

int pk_commit(void) { return PMIx_Commit(); }

int pk_fence(const char *nspace, int collect, int timeout_ms)
{
    bool flag = collect != 0;
    pmix_status_t rc;
    struct req *r = req_new();

    if (r == NULL)
        return PMIX_ERR_NOMEM;
    PMIX_LOAD_PROCID(r->proc, nspace, PMIX_RANK_WILDCARD);
    if (collect) {
        PMIX_INFO_LOAD(&r->info[r->ninfo], PMIX_COLLECT_DATA, &flag, PMIX_BOOL);
        r->ninfo++;
    }
    if (timeout_ms > 0)
        load_timeout(r, timeout_ms);
/* GCC 12 misreads the heap-allocated proc array here as a 256-byte region (a false positive
 * of -Wstringop-overread; the same call shape in get() passes). */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overread"
#endif
    rc = PMIx_Fence_nb(r->proc, 1, r->info, r->ninfo, op_cb, r);
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic pop
#endif
    if (rc != PMIX_SUCCESS) {
        pthread_mutex_lock(&r->mu);
        r->refs--;
        req_put(r);
        return rc;
    }
    /* No timeout: wait as long as it takes (INT32_MAX ms, about 24 days). */
    return req_wait(r, timeout_ms > 0 ? timeout_ms : INT32_MAX, NULL);
}
