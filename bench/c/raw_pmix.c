/* raw_pmix: baseline (a) of `bench/run.sh init`. The minimal PMIx calls for what gpuhelper_init
 * returns, written by hand (same sequence as tests/helper/csrc/raw_pmix.c, but timed from exec
 * like the other programs, see benchtime.h): PMIx_Init; job keys with the wildcard rank; proc keys
 * with our rank; rank 0 creates the ID with ncclGetUniqueId (the stub libnccl) and Puts+Commits
 * it; the others Get it from rank 0 with PMIX_TIMEOUT and no fence. Slurm 22.05 + PMIx 4.2.2 can
 * answer NOT_FOUND at once when the Get beats rank 0's Commit (multi-node jobs), so NOT_FOUND is
 * retried until the deadline. Prints a TIME line (benchtime.h).
 *
 *   raw_pmix [direct|fence] [ITERS]
 *
 * fence (bench/scale.sh): rank 0 Puts+Commits, every rank joins a collecting PMIx_Fence, then
 * Gets locally: what GPUHELPER_EXCHANGE=fence does, by hand. ITERS: after the ID, ITERS times a
 * barrier (untimed) then the same exchange again under a new key, timed alone; prints
 * "DIST rank raw iteration seconds id-prefix" like gh_init's dist. */
#include "benchtime.h"
#include "nccl.h"

#include "barrier.h"

#define TIMEOUT_S 60

static int fence_mode;

static pmix_status_t fence_collect(void) { return bt_barrier(); }

/* exchange: rank 0 Puts+Commits id under key; the others get it (direct: Get from rank 0 with
 * PMIX_TIMEOUT; fence: after a collecting fence, locally). Returns 0 or prints and returns 1. */
static pmix_status_t get_timeout(const pmix_proc_t *p, const char *key, int timeout, pmix_value_t **v);
static int exchange(const pmix_proc_t *me, const char *key, ncclUniqueId *id)
{
    pmix_status_t rc;
    pmix_value_t *v = NULL;
    pmix_proc_t root;
    if (me->rank == 0) {
        pmix_value_t val;
        PMIX_VALUE_CONSTRUCT(&val);
        val.type = PMIX_BYTE_OBJECT;
        val.data.bo.bytes = id->internal;
        val.data.bo.size = sizeof(*id);
        if ((rc = PMIx_Put(PMIX_GLOBAL, key, &val)) != PMIX_SUCCESS || (rc = PMIx_Commit()) != PMIX_SUCCESS) {
            fprintf(stderr, "gpubind: raw_pmix: Put/Commit: %s\n", PMIx_Error_string(rc));
            return 1;
        }
    }
    if (fence_mode && (rc = fence_collect()) != PMIX_SUCCESS) {
        fprintf(stderr, "gpubind: raw_pmix: PMIx_Fence: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    if (me->rank == 0)
        return 0;
    PMIX_LOAD_PROCID(&root, me->nspace, 0);
    double deadline = bt_clock(CLOCK_MONOTONIC) + TIMEOUT_S;
    for (;;) {
        rc = get_timeout(&root, key, TIMEOUT_S, &v);
        if (rc != PMIX_ERR_NOT_FOUND || bt_clock(CLOCK_MONOTONIC) > deadline)
            break;
        usleep(1000);
    }
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "gpubind: raw_pmix: Get(%s): %s\n", key, PMIx_Error_string(rc));
        return 1;
    }
    if (v->type != PMIX_BYTE_OBJECT || v->data.bo.size != NCCL_UNIQUE_ID_BYTES) {
        fprintf(stderr, "gpubind: raw_pmix: Get(%s): expected %d bytes\n", key, NCCL_UNIQUE_ID_BYTES);
        return 1;
    }
    memcpy(id->internal, v->data.bo.bytes, sizeof(*id));
    PMIX_VALUE_RELEASE(v);
    return 0;
}

static pmix_status_t get_timeout(const pmix_proc_t *p, const char *key, int timeout, pmix_value_t **v)
{
    pmix_info_t info;
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &timeout, PMIX_INT);
    pmix_status_t rc = PMIx_Get(p, key, &info, 1, v);
    PMIX_INFO_DESTRUCT(&info);
    return rc;
}

int main(int argc, char **argv)
{
    long iters = 0;
    if (argc > 1) {
        if (strcmp(argv[1], "fence") == 0)
            fence_mode = 1;
        else if (strcmp(argv[1], "direct") != 0)
            argc = 99;
    }
    if (argc > 2) {
        char *end;
        iters = strtol(argv[2], &end, 10);
        if (*end != '\0' || iters < 0 || iters > 1000)
            argc = 99;
    }
    if (argc > 3) {
        fprintf(stderr, "gpubind: raw_pmix: usage: raw_pmix [direct|fence] [ITERS (0..1000)]\n");
        return 2;
    }
    pmix_proc_t me, wild;
    pmix_value_t *v = NULL;
    pmix_status_t rc;
    const char *job[] = {PMIX_JOB_SIZE, PMIX_LOCAL_SIZE, PMIX_NUM_NODES, PMIX_LOCAL_PEERS};
    const char *own[] = {PMIX_LOCAL_RANK, PMIX_NODEID, PMIX_HOSTNAME};
    const char *key = "bench.ncclid.1";

    bt_main();
    if ((rc = PMIx_Init(&me, NULL, 0)) != PMIX_SUCCESS) {
        fprintf(stderr, "gpubind: raw_pmix: PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    for (size_t i = 0; i < sizeof(job) / sizeof(job[0]); i++) {
        if ((rc = PMIx_Get(&wild, job[i], NULL, 0, &v)) != PMIX_SUCCESS) {
            fprintf(stderr, "gpubind: raw_pmix: PMIx_Get(%s): %s\n", job[i], PMIx_Error_string(rc));
            return 1;
        }
        PMIX_VALUE_RELEASE(v);
    }
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
        if ((rc = PMIx_Get(&me, own[i], NULL, 0, &v)) != PMIX_SUCCESS) {
            fprintf(stderr, "gpubind: raw_pmix: PMIx_Get(%s): %s\n", own[i], PMIx_Error_string(rc));
            return 1;
        }
        PMIX_VALUE_RELEASE(v);
    }
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (me.rank == 0) {
        int nrc = ncclGetUniqueId(&id);
        if (nrc != 0) {
            fprintf(stderr, "gpubind: raw_pmix: ncclGetUniqueId: %d\n", nrc);
            return 1;
        }
    }
    if (exchange(&me, key, &id) != 0)
        return 1;
    bt_report((long)me.rank, &id);
    for (long it = 0; it < iters; it++) {
        char k[64];
        snprintf(k, sizeof(k), "bench.ncclid.%ld", it + 2);
        if (me.rank == 0 && ncclGetUniqueId(&id) != 0) {
            fprintf(stderr, "gpubind: raw_pmix: ncclGetUniqueId failed\n");
            return 1;
        }
        if ((rc = bt_barrier()) != PMIX_SUCCESS) {
            fprintf(stderr, "gpubind: raw_pmix: PMIx_Fence: %s\n", PMIx_Error_string(rc));
            return 1;
        }
        double t0 = bt_clock(CLOCK_MONOTONIC);
        if (exchange(&me, k, &id) != 0)
            return 1;
        double t1 = bt_clock(CLOCK_MONOTONIC);
        const unsigned char *b = (const unsigned char *)id.internal;
        printf("DIST %u raw %ld %.6f %02x%02x%02x%02x%02x%02x%02x%02x\n", me.rank, it, t1 - t0,
               b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]);
    }
    fflush(stdout);
    /* Untimed barrier: rank 0's node keeps the ID in its PMIx server; if rank 0 ended at once,
     * Slurm would tear that server down while other nodes still ask it (a real program goes on
     * to ncclCommInitRank, so rank 0 lives on). */
    if ((rc = bt_barrier()) != PMIX_SUCCESS) {
        fprintf(stderr, "gpubind: raw_pmix: PMIx_Fence: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    if ((rc = PMIx_Finalize(NULL, 0)) != PMIX_SUCCESS) {
        fprintf(stderr, "gpubind: raw_pmix: PMIx_Finalize: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    return 0;
}
