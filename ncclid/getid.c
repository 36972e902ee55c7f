/* Resolve the application's own ncclGetUniqueId: the ID format changes between NCCL versions,
 * so the ID must come from the libnccl that will consume it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "getid.h"

void *ni_in_process(void) { return dlsym(RTLD_DEFAULT, "ncclGetUniqueId"); }

void *ni_open(const char *lib, char *err, size_t errlen)
{
    void *fn;
    /* Not linked or loaded by the application: load it ourselves. RTLD_LOCAL: its symbols must
     * not become the process's, where they would stand in for (or clash with) an NCCL the
     * application loads later. The handle stays open on purpose: the listener thread that
     * ncclGetUniqueId starts lives in that library. */
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(err, errlen, "dlopen(%s) failed: %s", lib, e ? e : "unknown error");
        return NULL;
    }
    fn = dlsym(h, "ncclGetUniqueId");
    if (fn == NULL) {
        const char *e = dlerror();
        snprintf(err, errlen, "%s has no ncclGetUniqueId: %s", lib, e ? e : "unknown error");
        return NULL;
    }
    return fn;
}

/* ni_loaded: see getid.h. dl_iterate_phdr reads the loader's list of loaded objects, whatever
 * their scope (a library loaded RTLD_LOCAL, or as a dependency of one, is invisible to
 * dlsym(RTLD_DEFAULT)). */
struct ni_find {
    const char *prefix;
    char *path;
    size_t pathlen;
    void *fn;
};

static int ni_find_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    struct ni_find *f = data;
    const char *name = info->dlpi_name, *base;
    void *h, *fn;
    Dl_info di;
    (void)size;
    if (name == NULL || *name == '\0')
        return 0;
    base = strrchr(name, '/');
    base = base != NULL ? base + 1 : name;
    if (strncmp(base, f->prefix, strlen(f->prefix)) != 0)
        return 0;
    /* Its own handle (RTLD_NOLOAD: loads nothing). A handle's lookup also searches the file's
     * dependencies: only a symbol of this very file counts (NCCL's net plugins, libnccl-net*.so,
     * share the prefix and have none). */
    h = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL)
        return 0;
    fn = dlsym(h, "ncclGetUniqueId");
    memset(&di, 0, sizeof(di));
    if (fn != NULL && dladdr(fn, &di) != 0 && di.dli_fbase == (void *)info->dlpi_addr) {
        f->fn = fn;
        if (f->pathlen > 0)
            snprintf(f->path, f->pathlen, "%s", name);
    }
    /* The handle is dropped: the object stays, loaded by whoever loaded it (this added only a
     * reference). */
    dlclose(h);
    return f->fn != NULL;
}

void *ni_loaded(const char *prefix, char *path, size_t pathlen)
{
    struct ni_find f = {prefix, path, pathlen, NULL};
    if (pathlen > 0)
        path[0] = '\0';
    dl_iterate_phdr(ni_find_cb, &f);
    return f.fn;
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
