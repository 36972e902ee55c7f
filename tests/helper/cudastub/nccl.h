/* Declarations of the NCCL calls examples/nccl_allreduce.cu uses, written from NCCL's API
 * documentation, for a syntax check without NCCL (tests/helper: TestExamples). Not linked. */
#ifndef GPUBIND_CUDASTUB_NCCL_H
#define GPUBIND_CUDASTUB_NCCL_H
#include <stddef.h>
#include "cuda_runtime.h"

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
typedef struct ncclComm *ncclComm_t;
typedef enum { ncclSuccess = 0 } ncclResult_t;
typedef enum { ncclFloat = 7 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;

const char *ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
#endif
