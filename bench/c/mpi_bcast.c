/* mpi_bcast: baseline (b) of `bench/run.sh init`: what nccl-tests and NCCL's documentation do.
 * MPI_Init, MPI_Comm_split_type(SHARED) for the local rank, rank 0 creates the ID with
 * ncclGetUniqueId (the stub libnccl), MPI_Bcast of its 128 bytes. Run under srun --mpi=pmix.
 * Prints a TIME line (benchtime.h). */
#include "benchtime.h"
#include "nccl.h"

#include <mpi.h>

static int check(int rc, const char *what)
{
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
            snprintf(msg, sizeof(msg), "error %d", rc);
        fprintf(stderr, "gpubind: mpi_bcast: %s: %s\n", what, msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rank, size, local_rank, local_size;
    MPI_Comm local;
    ncclUniqueId id;

    bt_main();
    check(MPI_Init(&argc, &argv), "MPI_Init");
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    check(MPI_Comm_rank(local, &local_rank), "MPI_Comm_rank(local)");
    check(MPI_Comm_size(local, &local_size), "MPI_Comm_size(local)");
    if (rank == 0) {
        int nrc = ncclGetUniqueId(&id);
        if (nrc != 0) {
            fprintf(stderr, "gpubind: mpi_bcast: ncclGetUniqueId: %d\n", nrc);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    check(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
    bt_report(rank, &id);
    check(MPI_Comm_free(&local), "MPI_Comm_free");
    check(MPI_Finalize(), "MPI_Finalize");
    return 0;
}
