/* bt_barrier: a real barrier over all ranks of the job, outside the timed part.
 * Found here (Slurm 22.05.8 mpi/pmix_v4, OpenPMIx 4.2.2): a PMIx_Fence without PMIX_COLLECT_DATA
 * completes on each node as soon as that node's own ranks arrive, even in a 2-node job; only a
 * collecting fence waits for every node. */
#ifndef BENCH_BARRIER_H
#define BENCH_BARRIER_H

#include <stdbool.h>

#include <pmix.h>

static inline pmix_status_t bt_barrier(void)
{
    pmix_info_t info;
    bool collect = true;
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    pmix_status_t rc = PMIx_Fence(NULL, 0, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    return rc;
}

#endif
