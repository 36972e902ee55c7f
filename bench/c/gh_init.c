/* gh_init: the libgpuhelper side of `bench/run.sh init` and `bench/run.sh scaling`.
 *
 *   gh_init                  gpuhelper_init; prints a TIME line (benchtime.h)
 *   gh_init dist LIST ITERS  also, ITERS times, for each count K of the comma-separated LIST (the
 *                            order rotates every iteration, so no K always goes first): a collecting PMIx
 *                            fence as a barrier, then gpuhelper_scalable_ids(K); prints
 *                            "DIST rank K iteration seconds" for the call alone.
 *
 * The exchange mode (direct modex or fence) comes from GPUHELPER_EXCHANGE. The stub libnccl is
 * linked in, as libnccl is in a real application, so the library finds ncclGetUniqueId in the
 * process. */
#include "benchtime.h"

#include <gpuhelper.h>
#include "barrier.h"

#define MAXK 64

static int fail(const char *what, int rc)
{
    fprintf(stderr, "gpubind: gh_init: %s: %s: %s\n", what, gpuhelper_strerror(rc), gpuhelper_last_error());
    return 1;
}

static int parse_list(const char *s, int *ks, int *n)
{
    char *end;
    *n = 0;
    while (*s != '\0') {
        long k = strtol(s, &end, 10);
        if (end == s || k < 1 || k > 1024 || *n == MAXK || (*end != ',' && *end != '\0'))
            return -1;
        ks[(*n)++] = (int)k;
        s = *end == ',' ? end + 1 : end;
    }
    return *n > 0 ? 0 : -1;
}

static int dist(const gpuhelper_info_t *info, const char *list, const char *iters_s)
{
    int ks[MAXK], nk;
    char *end;
    long iters = strtol(iters_s, &end, 10);
    if (parse_list(list, ks, &nk) != 0 || *end != '\0' || iters < 1 || iters > 1000) {
        fprintf(stderr, "gpubind: gh_init: dist %s %s: expected a comma-separated list of ID counts "
                        "(1..1024) and an iteration count (1..1000)\n", list, iters_s);
        return 1;
    }
    pmix_status_t prc;
    for (long it = 0; it < iters; it++) {
        for (int j = 0; j < nk; j++) {
            int k = ks[(j + it) % nk];
            if (k > info->size) {
                fprintf(stderr, "gpubind: gh_init: %d IDs for %d ranks: expected at most one per rank\n", k, info->size);
                return 1;
            }
            unsigned char *ids = malloc((size_t)k * GPUHELPER_NCCL_ID_BYTES);
            if (ids == NULL) {
                perror("gpubind: gh_init: malloc");
                return 1;
            }
            if ((prc = bt_barrier()) != PMIX_SUCCESS) {
                fprintf(stderr, "gpubind: gh_init: PMIx_Fence: %s\n", PMIx_Error_string(prc));
                return 1;
            }
            double t0 = bt_clock(CLOCK_MONOTONIC);
            int rc = gpuhelper_scalable_ids(k, ids, (size_t)k * GPUHELPER_NCCL_ID_BYTES);
            double t1 = bt_clock(CLOCK_MONOTONIC);
            if (rc != 0)
                return fail("gpuhelper_scalable_ids", rc);
            /* The last ID's prefix: every rank must print the same one. */
            const unsigned char *b = ids + (size_t)(k - 1) * GPUHELPER_NCCL_ID_BYTES;
            printf("DIST %d %d %ld %.6f %02x%02x%02x%02x%02x%02x%02x%02x\n", info->rank, k, it, t1 - t0,
                   b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]);
            free(ids);
        }
    }
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    gpuhelper_info_t info;

    bt_main();
    if (argc != 1 && !(argc == 4 && strcmp(argv[1], "dist") == 0)) {
        fprintf(stderr, "gpubind: gh_init: usage: gh_init [dist LIST ITERS]\n");
        return 2;
    }
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    int rc = gpuhelper_init(&info);
    if (rc != 0)
        return fail("gpuhelper_init", rc);
    bt_report(info.rank, info.nccl_id);
    /* Our own PMIx handle (reference-counted: the same connection as the library's) for the
     * barriers, which are not timed. The last one keeps rank 0 alive until every rank has its
     * IDs: rank 0's node serves them, and Slurm ends that server when its tasks end. */
    pmix_proc_t me;
    pmix_status_t prc = PMIx_Init(&me, NULL, 0);
    if (prc != PMIX_SUCCESS) {
        fprintf(stderr, "gpubind: gh_init: PMIx_Init: %s\n", PMIx_Error_string(prc));
        return 1;
    }
    if (argc == 4 && dist(&info, argv[2], argv[3]) != 0)
        return 1;
    if ((prc = bt_barrier()) != PMIX_SUCCESS || (prc = PMIx_Finalize(NULL, 0)) != PMIX_SUCCESS) {
        fprintf(stderr, "gpubind: gh_init: PMIx_Fence/Finalize: %s\n", PMIx_Error_string(prc));
        return 1;
    }
    if ((rc = gpuhelper_finalize()) != 0)
        return fail("gpuhelper_finalize", rc);
    return 0;
}
