/* nodeid: prints "NODEID rank id num_nodes" as the PMIx server hands them out (PMIX_NODEID and
 * PMIX_NUM_NODES, raw), so tests/helper can show that a launcher numbers nodes sparsely. */
#include <pmix.h>
#include <stdio.h>

static int num(const pmix_proc_t *p, const char *key, unsigned long *out)
{
    pmix_value_t *v = NULL;
    pmix_status_t rc = PMIx_Get(p, key, NULL, 0, &v);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "gpubind: nodeid: PMIx_Get(%s): %s\n", key, PMIx_Error_string(rc));
        return -1;
    }
    switch (v->type) {
    case PMIX_UINT32: *out = v->data.uint32; break;
    case PMIX_UINT16: *out = v->data.uint16; break;
    case PMIX_UINT64: *out = (unsigned long)v->data.uint64; break;
    case PMIX_INT: *out = (unsigned long)v->data.integer; break;
    default:
        fprintf(stderr, "gpubind: nodeid: %s has PMIx type %d\n", key, (int)v->type);
        PMIX_VALUE_RELEASE(v);
        return -1;
    }
    PMIX_VALUE_RELEASE(v);
    return 0;
}

int main(void)
{
    pmix_proc_t me, wild;
    unsigned long id, n;
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "gpubind: nodeid: PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    int bad = num(&me, PMIX_NODEID, &id) != 0 || num(&wild, PMIX_NUM_NODES, &n) != 0;
    if (!bad)
        printf("NODEID %u %lu %lu\n", me.rank, id, n);
    rc = PMIx_Finalize(NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "gpubind: nodeid: PMIx_Finalize: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    return bad;
}
