/* gh_init: the libgpuhelper side of `bench/run.sh init` and `bench/run.sh scaling`.
 *
 *   gh_init                  gpuhelper_init; prints a TIME line (benchtime.h)
 *   gh_init dist LIST ITERS  also, ITERS times, for each item of the comma-separated LIST (the
 *                            order rotates every iteration, so no item always goes first): a
 *                            collecting PMIx fence as a barrier, then the item's call alone,
 *                            timed; prints "DIST rank ITEM iteration seconds id-prefix". An item
 *                            is a count K (gpuhelper_scalable_ids(K)), "group" (gpuhelper_group_id
 *                            with GPUHELPER_COLOR_NODE: one ID per node), "barrier"
 *                            (gpuhelper_barrier) or "allgather" (gpuhelper_allgather of 8 bytes
 *                            per rank); the last two print "-" as their ID prefix.
 *
 * The exchange mode (direct modex or fence) comes from GPUHELPER_EXCHANGE. The stub libnccl is
 * linked in, as libnccl is in a real application, so the library finds ncclGetUniqueId in the
 * process. */
#include "benchtime.h"

#include <gpuhelper.h>
#include "barrier.h"

#define MAXK 64

/* Items of the list that are not ID counts. */
enum { OP_GROUP = -1, OP_BARRIER = -2, OP_ALLGATHER = -3 };
static const char *op_names[] = {"group", "barrier", "allgather"};

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
        long k = 0;
        end = (char *)s;
        for (int o = 0; o < 3; o++) {
            size_t l = strlen(op_names[o]);
            if (strncmp(s, op_names[o], l) == 0 && (s[l] == ',' || s[l] == '\0')) {
                k = -1 - o;
                end = (char *)s + l;
            }
        }
        if (k == 0)
            k = strtol(s, &end, 10);
        if (end == s || k == 0 || k > 1024 || *n == MAXK || (*end != ',' && *end != '\0'))
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
                        "(1..1024), group, barrier or allgather, and an iteration count (1..1000)\n", list, iters_s);
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
            size_t nbytes = (size_t)(k > 0 ? k : 1) * GPUHELPER_NCCL_ID_BYTES;
            if (k == OP_ALLGATHER && (size_t)info->size * 8 > nbytes)
                nbytes = (size_t)info->size * 8;
            unsigned char *ids = calloc(1, nbytes);
            if (ids == NULL) {
                perror("gpubind: gh_init: malloc");
                return 1;
            }
            if ((prc = bt_barrier()) != PMIX_SUCCESS) {
                fprintf(stderr, "gpubind: gh_init: PMIx_Fence: %s\n", PMIx_Error_string(prc));
                return 1;
            }
            gpuhelper_group_t group;
            long long mine = info->rank;
            const char *what = "gpuhelper_scalable_ids";
            double t0 = bt_clock(CLOCK_MONOTONIC);
            int rc;
            switch (k) {
            case OP_GROUP:
                what = "gpuhelper_group_id";
                memset(&group, 0, sizeof(group));
                group.struct_size = sizeof(group);
                rc = gpuhelper_group_id(GPUHELPER_COLOR_NODE, &group);
                break;
            case OP_BARRIER:
                what = "gpuhelper_barrier";
                rc = gpuhelper_barrier();
                break;
            case OP_ALLGATHER:
                what = "gpuhelper_allgather";
                rc = gpuhelper_allgather(&mine, 8, ids, nbytes);
                break;
            default:
                rc = gpuhelper_scalable_ids(k, ids, (size_t)k * GPUHELPER_NCCL_ID_BYTES);
            }
            double t1 = bt_clock(CLOCK_MONOTONIC);
            if (rc != 0)
                return fail(what, rc);
            char name[16];
            if (k > 0)
                snprintf(name, sizeof(name), "%d", k);
            else
                snprintf(name, sizeof(name), "%s", op_names[-1 - k]);
            if (k == OP_BARRIER || k == OP_ALLGATHER) {
                /* allgather: every rank's slot must hold that rank's number. */
                for (int r = 0; k == OP_ALLGATHER && r < info->size; r++) {
                    long long got;
                    memcpy(&got, ids + (size_t)r * 8, 8);
                    if (got != r) {
                        fprintf(stderr, "gpubind: gh_init: allgather: slot %d holds %lld\n", r, got);
                        return 1;
                    }
                }
                printf("DIST %d %s %ld %.6f -\n", info->rank, name, it, t1 - t0);
                free(ids);
                continue;
            }
            /* The last ID's prefix (a group: the node's ID): every rank must print the same one
             * (for a group, every rank of the node). */
            const unsigned char *b = k == OP_GROUP ? (const unsigned char *)group.nccl_id
                                                   : ids + (size_t)(k - 1) * GPUHELPER_NCCL_ID_BYTES;
            printf("DIST %d %s %ld %.6f %02x%02x%02x%02x%02x%02x%02x%02x\n", info->rank, name, it, t1 - t0,
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
