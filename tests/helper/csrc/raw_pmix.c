/* raw_pmix: the PMIx calls gpuhelper_init makes, written by hand, as the baseline for the
 * timing comparison in ../bench_test.go (BenchmarkInit). PMIx_Init; job keys with the wildcard
 * rank; proc keys with our rank; rank 0 Puts and Commits 128 random bytes (standing in for the
 * NCCL ID); the others Get them with PMIX_TIMEOUT and no fence. Prints "TIME rank seconds". */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <pmix.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int get(const pmix_proc_t *p, const char *key, int timeout, pmix_value_t **v)
{
    pmix_info_t info;
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &timeout, PMIX_INT);
    pmix_status_t rc = PMIx_Get(p, key, &info, 1, v);
    PMIX_INFO_DESTRUCT(&info);
    return rc;
}

int main(void)
{
    pmix_proc_t me, wild, root;
    pmix_value_t *v = NULL;
    pmix_status_t rc;
    const char *job[] = {PMIX_JOB_SIZE, PMIX_LOCAL_SIZE, PMIX_NUM_NODES, PMIX_LOCAL_PEERS};
    const char *own[] = {PMIX_LOCAL_RANK, PMIX_NODEID, PMIX_HOSTNAME};
    const char *key = "raw.ncclid.1";

    double t0 = now();
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
    if (me.rank == 0) {
        unsigned char id[128];
        if (getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id)) {
            perror("gpubind: raw_pmix: getrandom");
            return 1;
        }
        pmix_value_t val;
        PMIX_VALUE_CONSTRUCT(&val);
        val.type = PMIX_BYTE_OBJECT;
        val.data.bo.bytes = (char *)id;
        val.data.bo.size = sizeof(id);
        if ((rc = PMIx_Put(PMIX_GLOBAL, key, &val)) != PMIX_SUCCESS || (rc = PMIx_Commit()) != PMIX_SUCCESS) {
            fprintf(stderr, "gpubind: raw_pmix: Put/Commit: %s\n", PMIx_Error_string(rc));
            return 1;
        }
    } else {
        PMIX_LOAD_PROCID(&root, me.nspace, 0);
        /* Retry NOT-FOUND like pmixkv does (a server may answer it before rank 0 commits). */
        for (;;) {
            rc = get(&root, key, 60, &v);
            if (rc != PMIX_ERR_NOT_FOUND)
                break;
            usleep(1000);
        }
        if (rc != PMIX_SUCCESS) {
            fprintf(stderr, "gpubind: raw_pmix: Get(%s): %s\n", key, PMIx_Error_string(rc));
            return 1;
        }
        PMIX_VALUE_RELEASE(v);
    }
    double t1 = now();
    printf("TIME %u %.6f\n", me.rank, t1 - t0);
    fflush(stdout);
    /* Like gpuhelper_finalize: wait for all before leaving (untimed). */
    if ((rc = PMIx_Fence(&wild, 1, NULL, 0)) != PMIX_SUCCESS) {
        fprintf(stderr, "gpubind: raw_pmix: PMIx_Fence: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    if ((rc = PMIx_Finalize(NULL, 0)) != PMIX_SUCCESS) {
        fprintf(stderr, "gpubind: raw_pmix: PMIx_Finalize: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    return 0;
}
