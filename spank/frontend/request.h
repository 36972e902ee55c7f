/*
 * The engine request of one step, typed. slurmstepd fills it once
 * (gb_request_fill reads the step environment; stepd.c sets the facts) and
 * writes it as text only for the launcher (spank/PROTOCOL.md section 1).
 * The plan cache builds its key from the same fields (plancache.c).
 */
#ifndef GPUBIND_REQUEST_H
#define GPUBIND_REQUEST_H

#include <slurm/spank.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Indices of gb_request.env: the order of request_env in request.c. */
enum gb_request_env {
	GB_REQ_STEP_GPUS,
	GB_REQ_JOB_GPUS,
	GB_REQ_CUDA_VISIBLE_DEVICES,
	GB_REQ_ROCR_VISIBLE_DEVICES,
	GB_REQ_SLURM_CONF,
	GB_REQ_OPTION,
	GB_REQ_NENV
};

struct gb_config;

struct gb_request {
	const struct gb_config *conf; /* the plugstack settings (args.c) */
	const char *option;           /* the effective option text */
	/*
	 * The engine's strict checks (an assumed GRES order is an error):
	 * always for a step that only default= binds, else unless mode=optional.
	 */
	int enforce;
	uid_t uid;                    /* the job user */
	gid_t gid;
	const char *node_name;
	uint32_t local_tasks;
	const uint32_t *global_ids;   /* local_tasks of them */
	/* Filled by gb_request_fill, freed by gb_request_free: */
	char *slurm_conf;             /* slurmstepd's own SLURM_CONF, or NULL */
	char *env[GB_REQ_NENV];       /* the step's values, NULL where unset */
};

/*
 * Reads the step environment the engine is sent (request_env) with
 * spank_getenv. A job's SLURM_CONF is read only when slurmstepd has none of
 * its own: where gres.conf lives is the daemon's business. 0, or -1 logged.
 */
int gb_request_fill(struct gb_request *r, spank_t sp);
void gb_request_free(struct gb_request *r);

/*
 * The request as KEY=VALUE lines, malloc'd (*len its length), or NULL with
 * why set (a value holds a newline, or memory ran out). for_key: the plan
 * cache's words, without what the plan does not read (SLURM_JOB_GPUS when
 * SLURM_STEP_GPUS is set, gpubind.resolveStep), so a user's junk there
 * neither grows nor splits the key.
 */
char *gb_request_format(const struct gb_request *r, int for_key, size_t *len,
			char *why, size_t whylen);

/*
 * spank_getenv into a malloc'd buffer, growing on ESPANK_NOSPACE. The
 * value, or NULL when unset (*failed set on a real error, logged).
 */
char *gb_spank_getenv(spank_t sp, const char *name, int *failed);

#endif
