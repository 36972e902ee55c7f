/* Resolve the application's own ncclGetUniqueId: the ID format changes between NCCL versions,
 * so the ID must come from the libnccl that will consume it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "getid.h"

void *ni_in_process(void) { return dlsym(RTLD_DEFAULT, "ncclGetUniqueId"); }

void *ni_resolve(const char *lib, int *from, char *err, size_t errlen)
{
    void *fn = ni_in_process();
    if (fn != NULL) {
        *from = 1;
        return fn;
    }
    /* Not linked or loaded by the application: load it ourselves. RTLD_LOCAL: its symbols must
     * not become the process's, where they would stand in for (or clash with) an NCCL the
     * application loads later. The handle stays open on purpose: the listener thread that
     * ncclGetUniqueId starts lives in that library. */
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
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

int ni_describe(void *fn, char *path, size_t pathlen, int *version)
{
    Dl_info di, dv;
    void *h, *gv;
    int (*get_version)(int *);
    int v = 0;

    *version = 0;
    if (pathlen > 0)
        path[0] = '\0';
    memset(&di, 0, sizeof(di));
    if (dladdr(fn, &di) == 0 || di.dli_fbase == NULL)
        return -1;
    if (di.dli_fname != NULL && pathlen > 0)
        snprintf(path, pathlen, "%s", di.dli_fname);
    /* The loaded file's own handle (RTLD_NOLOAD: never loads); for the main program, whose
     * dli_fname may not name it, the program's handle. */
    h = di.dli_fname != NULL && di.dli_fname[0] != '\0' ? dlopen(di.dli_fname, RTLD_LAZY | RTLD_NOLOAD) : NULL;
    if (h == NULL)
        h = dlopen(NULL, RTLD_LAZY);
    if (h == NULL)
        return 0;
    gv = dlsym(h, "ncclGetVersion");
    /* A handle's lookup also searches the file's dependencies: count only the same file's. */
    memset(&dv, 0, sizeof(dv));
    if (gv != NULL && dladdr(gv, &dv) != 0 && dv.dli_fbase == di.dli_fbase) {
        memcpy(&get_version, &gv, sizeof(get_version));
        if (get_version(&v) == 0 && v > 0)
            *version = v;
    }
    dlclose(h);
    return 0;
}

int ni_call(void *fn, void *out)
{
    ni_get_unique_id_fn f;
    /* Function pointers travel through void * here, as dlsym returns them (POSIX allows it). */
    memcpy(&f, &fn, sizeof(f));
    return f(out);
}
