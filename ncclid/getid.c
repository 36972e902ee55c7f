/* Resolve the application's own ncclGetUniqueId: the ID format changes between NCCL versions,
 * so the ID must come from the libnccl that will consume it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "getid.h"

void *ni_resolve(const char *lib, int *from, char *err, size_t errlen)
{
    void *fn = dlsym(RTLD_DEFAULT, "ncclGetUniqueId");
    if (fn != NULL) {
        *from = 1;
        return fn;
    }
    /* Not linked or loaded by the application: load it ourselves. The handle stays open on
     * purpose, the listener thread that ncclGetUniqueId starts lives in that library. */
    void *h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(err, errlen, "ncclGetUniqueId is not in the process and dlopen(%s) failed: %s", lib,
                 e ? e : "unknown error");
        return NULL;
    }
    fn = dlsym(h, "ncclGetUniqueId");
    if (fn == NULL) {
        const char *e = dlerror();
        snprintf(err, errlen, "%s has no ncclGetUniqueId: %s", lib, e ? e : "unknown error");
        return NULL;
    }
    *from = 2;
    return fn;
}

int ni_call(void *fn, void *out)
{
    ni_get_unique_id_fn f;
    /* Function pointers travel through void * here, as dlsym returns them (POSIX allows it). */
    memcpy(&f, &fn, sizeof(f));
    return f(out);
}
