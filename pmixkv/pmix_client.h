/* Plain-C interface to the PMIx calls of package pmixkv. Only standard types appear here, so
 * the cgo preamble never needs <pmix.h>; the PMIx code lives in pmix_client.c. */
#ifndef GPUBIND_PMIXKV_CLIENT_H
#define GPUBIND_PMIXKV_CLIENT_H

#include <stddef.h>
#include <stdint.h>

/* Return codes of the pk_* calls are PMIx status codes (0 = success). These few are named so
 * Go can tell them apart without PMIx headers. */
int pk_err_timeout(void);
int pk_err_unreach(void);
int pk_err_not_found(void);
int pk_err_error(void);
uint32_t pk_rank_wildcard(void);

const char *pk_strerror(int rc);
/* Why libpmix could not be loaded (dlopen on first use), or "" once it is. */
const char *pk_library_error(void);

/* PMIx_Init; on success copies the namespace (NUL-terminated) and this process's rank. */
int pk_init(char *nspace, size_t nspace_len, uint32_t *rank);
int pk_finalize(void);
/* PMIx_Abort of the whole namespace: the launcher ends every process of the job. */
int pk_abort(int status, const char *msg);

/* Get a number of any integer type, or a decimal string, as uint64. timeout_ms <= 0: none. */
int pk_get_number(const char *nspace, uint32_t rank, const char *key, int timeout_ms, uint64_t *out);
/* Get a string; *out is malloc'd and must be freed by the caller. */
int pk_get_string(const char *nspace, uint32_t rank, const char *key, int timeout_ms, char **out);
/* Get a byte object (or a string); *out is malloc'd (may be NULL when *len is 0). */
int pk_get_bytes(const char *nspace, uint32_t rank, const char *key, int timeout_ms, void **out,
                 size_t *len);

/* Put a byte object with global scope. */
int pk_put_bytes(const char *key, const void *data, size_t len);
int pk_commit(void);
/* Fence over all ranks of nspace. */
int pk_fence(const char *nspace, int collect, int timeout_ms);

#endif
