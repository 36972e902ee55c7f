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

/* A PMIx session as pk_open leaves it: PMIx_Init's status, and the job facts, each with the
 * status of its Get (0: found). A C caller (libgpuhelper's entry point) opens it before the
 * first call into Go, so that PMIx_Init overlaps the Go runtime's start; Go takes it over. */
#define PK_NSPACE_BYTES 256
struct pk_session {
    int rc; /* PMIx_Init: 0, PMIX_ERR_UNREACH without a library or a server, or another error */
    char nspace[PK_NSPACE_BYTES];
    uint32_t rank;
    uint64_t size, local_size, num_nodes; /* pmix.job.size, pmix.local.size, pmix.num.nodes */
    uint64_t local_rank, node_id;         /* pmix.lrank, pmix.nodeid (this proc) */
    int size_rc, local_size_rc, num_nodes_rc, local_rank_rc, node_id_rc;
    char *hostname, *lpeers, *nlist; /* pmix.hname (this proc), pmix.lpeers, pmix.nlist:
                                        malloc'd, NULL when the Get failed */
    int hostname_rc, lpeers_rc, nlist_rc;
};

/* pk_open: PMIx_Init, then the job facts with the wildcard rank and this process's own, all
 * in C. A missing fact is not an error here (its *_rc says so): the Go side derives what it
 * can. Returns s->rc. */
int pk_open(struct pk_session *s);
/* pk_live says whether PMIx is initialised now (pk_open succeeded, pk_finalize not called). */
int pk_live(void);
int pk_finalize(void);
/* PMIx_Abort of the whole namespace: the launcher ends every process of the job. */
int pk_abort(int status, const char *msg);

/* pk_watch registers a PMIx event handler for the termination of other processes of the job
 * (aborted, terminated, lost): the first one is remembered, pk_dead reports it, and every wait
 * of pk_get_* and pk_fence (a request with a deadline) ends at once with PMIX_ERR_PROC_ABORTED
 * instead of waiting out its timeout. Returns the registration status (0, or the PMIx error:
 * then deaths are noticed only by timeouts). */
int pk_watch(void);
/* pk_dead: -1 while no other process of the job is known to have ended, else its rank, with
 * the event's status in *status and its name in why (NUL-terminated in why_len bytes). */
long pk_dead(int *status, char *why, size_t why_len);
int pk_err_proc_aborted(void);

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
