/* hello: each rank prints what libgpuhelper tells it. Run it under a launcher:
 *   srun --mpi=pmix -n 4 ./hello
 *   srun --mpi=pmix --gpu-bind-topo -n 8 ./hello     (with the gpubind plugin)
 *   mpirun -n 4 ./hello
 * Runs without NCCL: it then prints "nccl_id none (why)".
 * Build: cc -o hello hello.c $(pkg-config --cflags --libs gpuhelper) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gpuhelper.h>

int main(void)
{
    gpuhelper_info_t info = {.struct_size = sizeof(info)};
    int rc = gpuhelper_init(&info);
    if (rc != GPUHELPER_SUCCESS) {
        fprintf(stderr, "hello: gpuhelper_init: %s\n  %s\n", gpuhelper_strerror(rc), gpuhelper_last_error());
        return 1;
    }
    /* No NCCL is needed for the facts above. The NCCL ID is in info.nccl_id when rank 0 could
     * make it (flags & GPUHELPER_INFO_NCCL_ID); gpuhelper_nccl_id (collective: every rank calls
     * it) returns it, or GPUHELPER_ENCCL and rank 0's reason when there is no NCCL. */
    unsigned char nid[GPUHELPER_NCCL_ID_BYTES];
    char id[2 * 8 + 4] = "";
    const char *why = "";
    rc = gpuhelper_nccl_id(nid);
    if (rc == GPUHELPER_SUCCESS) {
        for (int i = 0; i < 8; i++)
            snprintf(id + 2 * i, 3, "%02x", nid[i]);
        strcat(id, "...");
    } else if (rc == GPUHELPER_ENCCL) {
        strcpy(id, "none");
        why = gpuhelper_last_error();
    } else {
        fprintf(stderr, "hello: gpuhelper_nccl_id: %s\n  %s\n", gpuhelper_strerror(rc), gpuhelper_last_error());
        return 1;
    }
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    printf("hello: rank %d/%d local %d/%d node %d/%d: cuda_device %d bus %s uuid %s "
           "(CUDA_VISIBLE_DEVICES=%s) nccl_id %s%s%s%s (libgpuhelper %s)\n",
           info.rank, info.size, info.local_rank, info.local_size, info.node_id, info.num_nodes,
           info.cuda_device, info.pci_bus_id[0] ? info.pci_bus_id : "-",
           info.gpu_uuid[0] ? info.gpu_uuid : "-", cvd ? cvd : "(unset)", id, *why ? " (" : "", why,
           *why ? ")" : "", gpuhelper_version());
    fflush(stdout);
    rc = gpuhelper_finalize();
    if (rc != GPUHELPER_SUCCESS) {
        fprintf(stderr, "hello: gpuhelper_finalize: %s\n  %s\n", gpuhelper_strerror(rc), gpuhelper_last_error());
        return 1;
    }
    return 0;
}
