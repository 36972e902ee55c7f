/* Finding and calling ncclGetUniqueId without NCCL's headers: an ncclUniqueId is 128 opaque
 * bytes and ncclResult_t is an int-sized enum (0 = ncclSuccess). */
#ifndef GPUBIND_NCCLID_GETID_H
#define GPUBIND_NCCLID_GETID_H

#include <stddef.h>

typedef int (*ni_get_unique_id_fn)(void *id);

/* ni_in_process returns the process's own ncclGetUniqueId (dlsym RTLD_DEFAULT), or NULL. It
 * loads nothing, and it cannot see an NCCL linked statically into a program: such programs pass
 * their function with gpuhelper_set_nccl_get_unique_id. */
void *ni_in_process(void);
/* ni_open dlopens lib (RTLD_NOW | RTLD_LOCAL, kept open) and returns its ncclGetUniqueId, or
 * NULL with "dlopen(lib) failed: ..." or "lib has no ncclGetUniqueId: ..." in err. */
void *ni_open(const char *lib, char *err, size_t errlen);
/* ni_loaded returns the ncclGetUniqueId of a library already loaded in the process, in any
 * scope, whose file name starts with prefix ("libnccl", "librccl") and which defines it itself,
 * with that file's path in path; NULL when there is none. Loads nothing. */
void *ni_loaded(const char *prefix, char *path, size_t pathlen);
/* ni_describe finds the file that holds fn (dladdr) and, when that same file exports
 * ncclGetVersion, its version; loads nothing. Returns 0, or -1 when fn is in no loaded file. */
int ni_describe(void *fn, char *path, size_t pathlen, int *version);
/* ni_call calls fn(out) and returns its ncclResult_t. */
int ni_call(void *fn, void *out);

#endif
