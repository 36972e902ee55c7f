/* Declarations of the CUDA runtime calls examples/nccl_allreduce.cu uses, written from the
 * CUDA runtime API reference, so that the example can be syntax-checked with a plain C++
 * compiler where nvcc is absent (tests/helper: TestExamples). Nothing here is linked or run. */
#ifndef GPUBIND_CUDASTUB_CUDA_RUNTIME_H
#define GPUBIND_CUDASTUB_CUDA_RUNTIME_H
#include <stddef.h>

typedef enum cudaError { cudaSuccess = 0 } cudaError_t;
typedef enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 } cudaMemcpyKind;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
struct cudaDeviceProp {
    char name[256];
    int pciBusID, pciDeviceID, pciDomainID;
};

const char *cudaGetErrorString(cudaError_t error);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *pciBusId);
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaStreamCreate(cudaStream_t *pStream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);
#endif
