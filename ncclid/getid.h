/* Finding and calling ncclGetUniqueId without NCCL's headers: an ncclUniqueId is 128 opaque
 * bytes and ncclResult_t is an int-sized enum (0 = ncclSuccess). */
#ifndef GPUBIND_NCCLID_GETID_H
#define GPUBIND_NCCLID_GETID_H

#include <stddef.h>

typedef int (*ni_get_unique_id_fn)(void *id);

/* ni_resolve returns the process's own ncclGetUniqueId (dlsym RTLD_DEFAULT), else the one of
 * lib (dlopen'd, kept open), else NULL with a reason in err. *from says which: 1 process,
 * 2 dlopen. */
void *ni_resolve(const char *lib, int *from, char *err, size_t errlen);
/* ni_call calls fn(out) and returns its ncclResult_t. */
int ni_call(void *fn, void *out);

#endif
