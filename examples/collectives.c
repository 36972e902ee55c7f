/* collectives: the small collectives of libgpuhelper 1.1 around a (here absent) NCCL program:
 * rank 0 broadcasts a run id, every rank contributes its GPU and host to an allgather, rank 0
 * prints the table, and any failure ends the whole job with gpuhelper_abort. Needs no NCCL.
 *   srun --mpi=pmix -n 4 ./collectives
 *   mpirun -n 4 ./collectives
 * Build: cc -o collectives collectives.c $(pkg-config --cflags --libs gpuhelper) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gpuhelper.h>

/* What each rank tells the others: fixed size, plain bytes. */
struct entry {
    int rank, node_id, cuda_device;
    char pci_bus_id[32];
    char host[64];
};

static void check(int rc, const char *what)
{
    char msg[1200];
    if (rc == GPUHELPER_SUCCESS)
        return;
    snprintf(msg, sizeof(msg), "%s: %s: %s", what, gpuhelper_strerror(rc), gpuhelper_last_error());
    gpuhelper_abort(1, msg); /* ends every rank, not just this one */
}

int main(void)
{
    gpuhelper_info_t info = {.struct_size = sizeof(info)};
    int rc = gpuhelper_init(&info);
    if (rc != GPUHELPER_SUCCESS) { /* no job to abort yet */
        fprintf(stderr, "collectives: gpuhelper_init: %s\n  %s\n", gpuhelper_strerror(rc), gpuhelper_last_error());
        return 1;
    }

    /* 1. Rank 0 picks a run id; everyone gets it. */
    char run[32] = "";
    if (info.rank == 0)
        snprintf(run, sizeof(run), "run-%ld", (long)time(NULL));
    check(gpuhelper_bcast(0, run, sizeof(run)), "gpuhelper_bcast");

    /* 2. Every rank's GPU and host, on every rank. */
    struct entry me, *all = calloc((size_t)info.size, sizeof(*all));
    if (all == NULL)
        gpuhelper_abort(1, "collectives: out of memory");
    memset(&me, 0, sizeof(me));
    me.rank = info.rank;
    me.node_id = info.node_id;
    me.cuda_device = info.cuda_device;
    snprintf(me.pci_bus_id, sizeof(me.pci_bus_id), "%s", info.pci_bus_id[0] ? info.pci_bus_id : "-");
    if (gethostname(me.host, sizeof(me.host) - 1) != 0)
        strcpy(me.host, "?");
    check(gpuhelper_allgather(&me, sizeof(me), all, (size_t)info.size * sizeof(*all)), "gpuhelper_allgather");

    if (info.rank == 0) {
        printf("collectives: %s: %d ranks on %d nodes\n", run, info.size, info.num_nodes);
        for (int r = 0; r < info.size; r++)
            printf("collectives: %s: rank %d node %d host %s cuda_device %d bus %s\n", run, all[r].rank,
                   all[r].node_id, all[r].host, all[r].cuda_device, all[r].pci_bus_id);
        fflush(stdout);
    }
    free(all);

    /* 3. Everyone done before anyone leaves (gpuhelper_finalize waits as well). */
    check(gpuhelper_barrier(), "gpuhelper_barrier");
    rc = gpuhelper_finalize();
    if (rc != GPUHELPER_SUCCESS) {
        fprintf(stderr, "collectives: gpuhelper_finalize: %s\n  %s\n", gpuhelper_strerror(rc), gpuhelper_last_error());
        return 1;
    }
    return 0;
}
