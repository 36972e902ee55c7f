/* The one NCCL declaration the baselines need. They link the stub libnccl.so.2
 * (tests/stubnccl), exactly as a real application links libnccl; the ID bytes are opaque. */
#ifndef BENCH_NCCL_H
#define BENCH_NCCL_H
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
int ncclGetUniqueId(ncclUniqueId *uniqueId);
#endif
