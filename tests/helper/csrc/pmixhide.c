/* pmixhide: a PMIx client library that hides some job facts, to run libgpuhelper against a
 * server that lacks them (GPUHELPER_PMIX_LIBRARY=.../libpmixhide.so). It links libpmix, so
 * every other PMIx_* call is libpmix's own (a dlopen handle's lookup searches the library's
 * dependencies); PMIx_Get answers NOT-FOUND for the keys in $PMIXHIDE_KEYS (comma-separated)
 * and passes the others on. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <pmix.h>

static int hidden(const char *key)
{
    const char *list = getenv("PMIXHIDE_KEYS");
    size_t n = strlen(key);
    while (list != NULL && *list != '\0') {
        const char *end = strchr(list, ',');
        size_t len = end != NULL ? (size_t)(end - list) : strlen(list);
        if (len == n && strncmp(list, key, n) == 0)
            return 1;
        list = end != NULL ? end + 1 : NULL;
    }
    return 0;
}

pmix_status_t PMIx_Get(const pmix_proc_t *proc, const char key[], const pmix_info_t info[], size_t ninfo,
                       pmix_value_t **val)
{
    static pmix_status_t (*real)(const pmix_proc_t *, const char *, const pmix_info_t[], size_t, pmix_value_t **);
    if (hidden(key))
        return PMIX_ERR_NOT_FOUND;
    if (real == NULL) {
        void *h = dlopen("libpmix.so.2", RTLD_LAZY | RTLD_NOLOAD);
        if (h == NULL || (*(void **)&real = dlsym(h, "PMIx_Get")) == NULL)
            return PMIX_ERR_INIT;
    }
    return real(proc, key, info, ninfo, val);
}
