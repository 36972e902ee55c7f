/* nccl_allreduce: NCCL bootstrapped by libgpuhelper, no MPI.
 *
 *   gpuhelper_init -> cudaSetDevice -> ncclCommInitRank -> float all-reduce -> sum check
 *
 * Every rank fills its buffer with its communicator rank+1; after the sum all-reduce every
 * element must be size*(size+1)/2 for the communicator's size. Prints each rank's place, GPU, bus id, the first bytes of the NCCL ID, the
 * check and the times. Run with a launcher that has a PMIx server (or alone, as 1 rank):
 *   srun --mpi=pmix --gpu-bind-topo -N2 --ntasks-per-node=8 ./nccl_allreduce [COUNT [ITERS]]
 *   mpirun -n 8 ./nccl_allreduce
 * Build: nvcc -O2 -o nccl_allreduce nccl_allreduce.cu $(pkg-config --cflags gpuhelper) \
 *        -Xlinker -rpath,$(pkg-config --variable=libdir gpuhelper) \
 *        -L$(pkg-config --variable=libdir gpuhelper) -lgpuhelper -lnccl
 * (examples/Makefile does this.) No kernels: buffers are filled by copies, so the file is plain
 * C++ over the CUDA runtime API. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include <gpuhelper.h>

#define CUDA_CHECK(call)                                                                          \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "nccl_allreduce: rank %d: %s: %s\n", g_rank, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

#define NCCL_CHECK(call)                                                                          \
    do {                                                                                          \
        ncclResult_t r_ = (call);                                                                 \
        if (r_ != ncclSuccess) {                                                                  \
            fprintf(stderr, "nccl_allreduce: rank %d: %s: %s\n", g_rank, #call, ncclGetErrorString(r_)); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static int g_rank = -1;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    size_t count = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)1 << 24; /* floats */
    int iters = argc > 2 ? atoi(argv[2]) : 20;
    if (count == 0 || iters < 1) {
        fprintf(stderr, "nccl_allreduce: usage: nccl_allreduce [COUNT>0 [ITERS>0]]\n");
        return 2;
    }

    /* 1. Rank, GPU and NCCL ID in one call. The IDs must come from the NCCL this program calls:
     * hand the library its ncclGetUniqueId (also right for an NCCL linked statically). */
    int rc = gpuhelper_set_nccl_get_unique_id((gpuhelper_nccl_get_unique_id_fn)ncclGetUniqueId);
    if (rc != GPUHELPER_SUCCESS) {
        fprintf(stderr, "nccl_allreduce: gpuhelper_set_nccl_get_unique_id: %s\n  %s\n", gpuhelper_strerror(rc),
                gpuhelper_last_error());
        return 1;
    }
    gpuhelper_info_t info;
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    double t0 = now_ms();
    rc = gpuhelper_init(&info);
    double t_init = now_ms() - t0;
    if (rc != GPUHELPER_SUCCESS) {
        fprintf(stderr, "nccl_allreduce: gpuhelper_init: %s\n  %s\n", gpuhelper_strerror(rc), gpuhelper_last_error());
        return 1;
    }
    g_rank = info.rank;
    if (info.cuda_device < 0) {
        fprintf(stderr, "nccl_allreduce: rank %d: no GPU visible (CUDA_VISIBLE_DEVICES=%s)\n", info.rank,
                getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "(unset)");
        return 1;
    }

    /* 2. The GPU. The bus id is authoritative; cudaDeviceGetByPCIBusId guards against a CUDA
     * device order other than PCI order (CUDA started before gpuhelper_init, or
     * CUDA_DEVICE_ORDER set to something else). */
    int dev = info.cuda_device;
    if (info.pci_bus_id[0] != '\0') {
        int by_bus = -1;
        if (cudaDeviceGetByPCIBusId(&by_bus, info.pci_bus_id) == cudaSuccess && by_bus != dev) {
            fprintf(stderr, "nccl_allreduce: rank %d: cuda_device %d but bus %s is CUDA device %d; using %d\n",
                    info.rank, dev, info.pci_bus_id, by_bus, by_bus);
            dev = by_bus;
        }
    }
    CUDA_CHECK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    char bus[32];
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, (int)sizeof(bus), dev));

    /* 3. The communicator, from the ID every rank received. With
     * GPUHELPER_EXAMPLE_GROUP=node|rank the communicator is a sub-communicator instead: one per
     * node, or one per rank (a one-rank communicator each, which lets several processes share
     * one GPU, where NCCL refuses two ranks of one communicator). */
    ncclUniqueId id;
    memcpy(&id, info.nccl_id, sizeof(id));
    int comm_rank = info.rank, comm_size = info.size;
    const char *group = getenv("GPUHELPER_EXAMPLE_GROUP");
    if (group != NULL && group[0] != '\0') {
        gpuhelper_group_t g;
        memset(&g, 0, sizeof(g));
        g.struct_size = sizeof(g);
        int color;
        if (strcmp(group, "node") == 0)
            color = GPUHELPER_COLOR_NODE;
        else if (strcmp(group, "rank") == 0)
            color = info.rank;
        else {
            fprintf(stderr, "nccl_allreduce: GPUHELPER_EXAMPLE_GROUP=%s: expected node or rank\n", group);
            return 2;
        }
        rc = gpuhelper_group_id(color, &g);
        if (rc != GPUHELPER_SUCCESS) {
            fprintf(stderr, "nccl_allreduce: gpuhelper_group_id: %s\n  %s\n", gpuhelper_strerror(rc), gpuhelper_last_error());
            return 1;
        }
        memcpy(&id, g.nccl_id, sizeof(id));
        comm_rank = g.rank;
        comm_size = g.size;
        printf("nccl_allreduce: rank %d: group %s color %d: rank %d/%d, root %d, group nccl_id %02x%02x%02x%02x%02x%02x%02x%02x...\n",
               info.rank, group, g.color, g.rank, g.size, g.root, g.nccl_id[0], g.nccl_id[1], g.nccl_id[2],
               g.nccl_id[3], g.nccl_id[4], g.nccl_id[5], g.nccl_id[6], g.nccl_id[7]);
        fflush(stdout);
    }
    ncclComm_t comm;
    t0 = now_ms();
    NCCL_CHECK(ncclCommInitRank(&comm, comm_size, id, comm_rank));
    double t_comm = now_ms() - t0;

    /* 4. A float all-reduce (sum). */
    size_t bytes = count * sizeof(float);
    std::vector<float> host(count, (float)(comm_rank + 1));
    float *send = NULL, *recv = NULL;
    CUDA_CHECK(cudaMalloc((void **)&send, bytes));
    CUDA_CHECK(cudaMalloc((void **)&recv, bytes));
    CUDA_CHECK(cudaMemcpy(send, host.data(), bytes, cudaMemcpyHostToDevice));
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    NCCL_CHECK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream)); /* warm-up */
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < iters; i++)
        NCCL_CHECK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream));
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    double avg_ms = ms / iters;

    /* 5. The check: every element is 1 + 2 + ... + size (exact in float for these sizes). */
    CUDA_CHECK(cudaMemcpy(host.data(), recv, bytes, cudaMemcpyDeviceToHost));
    double want = (double)comm_size * (comm_size + 1) / 2.0;
    size_t bad = 0;
    for (size_t i = 0; i < count; i++)
        if ((double)host[i] != want)
            bad++;

    /* Bus bandwidth as nccl-tests defines it for all-reduce: 2(n-1)/n of the algorithm rate. */
    double algbw = (double)bytes / (avg_ms / 1e3) / 1e9;
    double busbw = comm_size > 1 ? algbw * 2.0 * (comm_size - 1) / comm_size : 0.0;
    int nccl_version = 0;
    NCCL_CHECK(ncclGetVersion(&nccl_version));
    printf("nccl_allreduce: rank %d/%d node %d/%d local %d/%d: GPU %d (%s) bus %s (helper said cuda_device %d bus %s uuid %s) "
           "nccl_id %02x%02x%02x%02x%02x%02x%02x%02x... | gpuhelper_init %.2f ms, ncclCommInitRank %.2f ms, "
           "all-reduce %zu floats x %d: %.3f ms avg, busbw %.1f GB/s | sum check %s (want %.0f, %zu bad) | NCCL %d, libgpuhelper %s\n",
           info.rank, info.size, info.node_id, info.num_nodes, info.local_rank, info.local_size, dev, prop.name, bus,
           info.cuda_device, info.pci_bus_id[0] ? info.pci_bus_id : "-", info.gpu_uuid[0] ? info.gpu_uuid : "-",
           info.nccl_id[0], info.nccl_id[1], info.nccl_id[2], info.nccl_id[3], info.nccl_id[4], info.nccl_id[5],
           info.nccl_id[6], info.nccl_id[7], t_init, t_comm, count, iters, avg_ms, busbw, bad == 0 ? "OK" : "FAILED",
           want, bad, nccl_version, gpuhelper_version());
    fflush(stdout);

    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    CUDA_CHECK(cudaStreamDestroy(stream));
    CUDA_CHECK(cudaFree(send));
    CUDA_CHECK(cudaFree(recv));
    NCCL_CHECK(ncclCommDestroy(comm));
    rc = gpuhelper_finalize();
    if (rc != GPUHELPER_SUCCESS) {
        fprintf(stderr, "nccl_allreduce: gpuhelper_finalize: %s\n  %s\n", gpuhelper_strerror(rc), gpuhelper_last_error());
        return 1;
    }
    return bad == 0 ? 0 : 1;
}
