/* hello: each rank prints what libgpuhelper tells it. Run it under a launcher:
 *   srun --mpi=pmix -n 4 ./hello
 *   srun --mpi=pmix --gpu-bind-topo -n 8 ./hello     (with the gpubind plugin)
 *   mpirun -n 4 ./hello
 * Build: cc -o hello hello.c $(pkg-config --cflags --libs gpuhelper) */
#include <stdio.h>
#include <stdlib.h>

#include <gpuhelper.h>

int main(void)
{
    gpuhelper_info_t info = {.struct_size = sizeof(info)};
    int rc = gpuhelper_init(&info);
    if (rc != GPUHELPER_SUCCESS) {
        fprintf(stderr, "hello: gpuhelper_init: %s\n  %s\n", gpuhelper_strerror(rc), gpuhelper_last_error());
        return 1;
    }
    char id[2 * 8 + 1];
    for (int i = 0; i < 8; i++)
        snprintf(id + 2 * i, 3, "%02x", info.nccl_id[i]);
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    printf("hello: rank %d/%d local %d/%d node %d/%d: cuda_device %d bus %s uuid %s "
           "(CUDA_VISIBLE_DEVICES=%s) nccl_id %s... (libgpuhelper %s)\n",
           info.rank, info.size, info.local_rank, info.local_size, info.node_id, info.num_nodes,
           info.cuda_device, info.pci_bus_id[0] ? info.pci_bus_id : "-",
           info.gpu_uuid[0] ? info.gpu_uuid : "-", cvd ? cvd : "(unset)", id, gpuhelper_version());
    fflush(stdout);
    rc = gpuhelper_finalize();
    if (rc != GPUHELPER_SUCCESS) {
        fprintf(stderr, "hello: gpuhelper_finalize: %s\n  %s\n", gpuhelper_strerror(rc), gpuhelper_last_error());
        return 1;
    }
    return 0;
}
