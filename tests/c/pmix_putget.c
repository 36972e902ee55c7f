/* pmix_putget: a minimal PMIx client for the cluster harness tests.
 *
 * Rank 0 puts 128 bytes (PMIX_BYTE_OBJECT) under a key carrying a sequence number and
 * commits; every rank (0 included) Gets the key from rank 0 with PMIX_TIMEOUT and no fence
 * (direct modex: the server fetches it from rank 0 on demand) and checks each byte, then
 * all fence (collecting: see below) so that rank 0 stays until every rank has read. Prints one
 * line per rank:
 *   pmix_putget rank R of N ok KEY retries K
 * Usage: pmix_putget [SEQ]   (SEQ: 0..1000000, default 1; keys are never reused)
 * Exit status 0 on success, 1 with a "gpubind: pmix_putget: " message on stderr otherwise.
 */
#include <errno.h>
#include <pmix.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BLOB_LEN 128
#define GET_TIMEOUT_S 30

static int fail(const char *what, pmix_status_t rc)
{
    fprintf(stderr, "gpubind: pmix_putget: %s: %s (%d)\n", what, PMIx_Error_string(rc), rc);
    return 1;
}

static unsigned char pattern(size_t i, long seq) { return (unsigned char)((i * 7 + (size_t)seq * 13 + 1) & 0xff); }

/* job_size reads PMIX_JOB_SIZE with the wildcard rank; launchers differ in the value type. */
static int job_size(const pmix_proc_t *me, uint32_t *out)
{
    pmix_proc_t wild;
    pmix_value_t *val = NULL;
    pmix_status_t rc;

    PMIX_PROC_CONSTRUCT(&wild);
    PMIX_LOAD_PROCID(&wild, me->nspace, PMIX_RANK_WILDCARD);
    rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val);
    if (rc != PMIX_SUCCESS)
        return fail("PMIx_Get(PMIX_JOB_SIZE)", rc);
    switch (val->type) {
    case PMIX_UINT32: *out = val->data.uint32; break;
    case PMIX_UINT16: *out = val->data.uint16; break;
    case PMIX_INT: *out = (uint32_t)val->data.integer; break;
    case PMIX_UINT64: *out = (uint32_t)val->data.uint64; break;
    default:
        fprintf(stderr, "gpubind: pmix_putget: PMIX_JOB_SIZE has unexpected type %d\n", val->type);
        PMIX_VALUE_RELEASE(val);
        return 1;
    }
    PMIX_VALUE_RELEASE(val);
    return 0;
}

int main(int argc, char **argv)
{
    pmix_proc_t me, root;
    pmix_status_t rc;
    pmix_value_t put, *got = NULL;
    pmix_info_t info;
    unsigned char blob[BLOB_LEN];
    char key[PMIX_MAX_KEYLEN + 1];
    char *end = NULL;
    long seq = 1;
    uint32_t size = 0;
    int timeout = GET_TIMEOUT_S, bad = 0, retries = 0;
    bool collect = true;
    struct timespec t0, now, pause = {0, 10 * 1000 * 1000};
    size_t i;

    if (argc > 2) {
        fprintf(stderr, "gpubind: pmix_putget: usage: %s [SEQ]\n", argv[0]);
        return 2;
    }
    if (argc == 2) {
        errno = 0;
        seq = strtol(argv[1], &end, 10);
        if (errno != 0 || end == argv[1] || *end != '\0' || seq < 0 || seq > 1000000) {
            fprintf(stderr, "gpubind: pmix_putget: SEQ %s: expected an integer 0..1000000\n", argv[1]);
            return 2;
        }
    }
    /* Keys starting with "pmix" are reserved; a fresh name per sequence avoids a stale cache. */
    snprintf(key, sizeof(key), "gpbtest.blob.%ld", seq);

    rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS)
        return fail("PMIx_Init", rc);
    if (job_size(&me, &size) != 0)
        goto out_fail;

    if (me.rank == 0) {
        for (i = 0; i < BLOB_LEN; i++)
            blob[i] = pattern(i, seq);
        PMIX_VALUE_CONSTRUCT(&put);
        put.type = PMIX_BYTE_OBJECT;
        put.data.bo.bytes = (char *)blob;
        put.data.bo.size = BLOB_LEN;
        rc = PMIx_Put(PMIX_GLOBAL, key, &put);
        if (rc != PMIX_SUCCESS) {
            fail("PMIx_Put", rc);
            goto out_fail;
        }
        rc = PMIx_Commit();
        if (rc != PMIX_SUCCESS) {
            fail("PMIx_Commit", rc);
            goto out_fail;
        }
    }

    PMIX_PROC_CONSTRUCT(&root);
    PMIX_LOAD_PROCID(&root, me.nspace, 0);
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &timeout, PMIX_INT);
    /* Verified with Slurm 22.05 + PMIx 4.2.2: in a job spanning several nodes, a Get by a
     * rank on rank 0's node can return NOT_FOUND at once, despite PMIX_TIMEOUT, when it
     * arrives before rank 0's commit (remote ranks and single-node jobs wait as documented).
     * So NOT_FOUND is retried until the same deadline; the count is printed. */
    if (clock_gettime(CLOCK_MONOTONIC, &t0) != 0) {
        fprintf(stderr, "gpubind: pmix_putget: clock_gettime: %s\n", strerror(errno));
        goto out_fail;
    }
    for (;;) {
        rc = PMIx_Get(&root, key, &info, 1, &got);
        if (rc != PMIX_ERR_NOT_FOUND)
            break;
        if (clock_gettime(CLOCK_MONOTONIC, &now) != 0) {
            fprintf(stderr, "gpubind: pmix_putget: clock_gettime: %s\n", strerror(errno));
            goto out_fail;
        }
        if (now.tv_sec - t0.tv_sec >= GET_TIMEOUT_S)
            break;
        retries++;
        nanosleep(&pause, NULL); /* an early wake-up only shortens the pause */
    }
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS) {
        fail("PMIx_Get(rank 0 blob)", rc);
        goto out_fail;
    }
    if (got->type != PMIX_BYTE_OBJECT || got->data.bo.size != BLOB_LEN) {
        fprintf(stderr, "gpubind: pmix_putget: rank %u: got type %d size %zu, expected byte object of %d\n",
                me.rank, got->type, got->type == PMIX_BYTE_OBJECT ? got->data.bo.size : 0, BLOB_LEN);
        PMIX_VALUE_RELEASE(got);
        goto out_fail;
    }
    for (i = 0; i < BLOB_LEN; i++)
        if ((unsigned char)got->data.bo.bytes[i] != pattern(i, seq))
            bad++;
    PMIX_VALUE_RELEASE(got);
    if (bad) {
        fprintf(stderr, "gpubind: pmix_putget: rank %u: %d of %d bytes differ\n", me.rank, bad, BLOB_LEN);
        goto out_fail;
    }
    /* Rank 0 must not leave before the others have read its data. Under Slurm's mpi/pmix a
     * fence without PMIX_COLLECT_DATA completes on each node as soon as that node's ranks are
     * in, so it holds nobody across nodes; a collecting one waits (docs/helper.md, "A fence is
     * a barrier only with data collection"). */
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    rc = PMIx_Fence(NULL, 0, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS) {
        fail("PMIx_Fence", rc);
        goto out_fail;
    }
    printf("pmix_putget rank %u of %u ok %s retries %d\n", me.rank, size, key, retries);
    fflush(stdout);
    rc = PMIx_Finalize(NULL, 0);
    if (rc != PMIX_SUCCESS)
        return fail("PMIx_Finalize", rc);
    return 0;

out_fail:
    PMIx_Finalize(NULL, 0);
    return 1;
}
