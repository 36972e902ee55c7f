/*
 * The engine request: read once from the step (gb_request_fill), written as
 * the launcher's KEY=VALUE text (gb_request_format, spank/PROTOCOL.md
 * section 1) and, in the same words, as the plan cache's key.
 */
#include "gpubind.h"
#include "request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The longest step environment value read (ESPANK_NOSPACE doubling stops). */
#define GB_ENV_MAX (1024 * 1024)

/*
 * Step environment values handed to the engine: the env.NAME list of
 * spank/PROTOCOL.md section 1, which the engine reads (envKeys in
 * spank/engine/engine.go). TestEnvKeysNamedOnce checks all three agree.
 * Indexed by enum gb_request_env.
 */
static const char *const request_env[] = {
	"SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES",
	"ROCR_VISIBLE_DEVICES", "SLURM_CONF", GB_ENV_OPTION,
};

_Static_assert(sizeof(request_env) / sizeof(request_env[0]) == GB_REQ_NENV,
	       "request_env and enum gb_request_env differ");

char *gb_spank_getenv(spank_t sp, const char *name, int *failed)
{
	int len = 256;

	*failed = 0;
	for (;;) {
		char *buf = malloc(len);
		spank_err_t rc;

		if (!buf) {
			gb_error("out of memory reading %s", name);
			*failed = 1;
			return NULL;
		}
		rc = spank_getenv(sp, name, buf, len);
		if (rc == ESPANK_SUCCESS)
			return buf;
		free(buf);
		if (rc == ESPANK_ENV_NOEXIST)
			return NULL;
		if (rc == ESPANK_NOSPACE && len < GB_ENV_MAX) {
			len *= 4;
			continue;
		}
		gb_spank_error("spank_getenv", name, rc);
		*failed = 1;
		return NULL;
	}
}

int gb_request_fill(struct gb_request *r, spank_t sp)
{
	int failed = 0;

	if (getenv("SLURM_CONF") &&
	    !(r->slurm_conf = strdup(getenv("SLURM_CONF")))) {
		gb_error("out of memory reading SLURM_CONF");
		return -1;
	}
	for (int i = 0; i < GB_REQ_NENV; i++) {
		if (i == GB_REQ_SLURM_CONF && r->slurm_conf)
			continue;
		r->env[i] = gb_spank_getenv(sp, request_env[i], &failed);
		if (failed)
			return -1;
	}
	return 0;
}

void gb_request_free(struct gb_request *r)
{
	free(r->slurm_conf);
	r->slurm_conf = NULL;
	for (int i = 0; i < GB_REQ_NENV; i++) {
		free(r->env[i]);
		r->env[i] = NULL;
	}
}

struct text {
	char *p;
	size_t len, cap;
	int bad;
	char why[256];
};

static void add(struct text *t, const char *key, const char *val)
{
	size_t need = strlen(key) + strlen(val) + 3;

	if (t->bad)
		return;
	if (strpbrk(val, "\n\r")) {
		(void) snprintf(t->why, sizeof(t->why),
				"the value of %s holds a newline", key);
		t->bad = 1;
		return;
	}
	if (t->len + need > t->cap) {
		size_t c = (t->cap ? t->cap : 4096);
		char *x;

		while (c < t->len + need)
			c *= 2;
		x = realloc(t->p, c);
		if (!x) {
			(void) snprintf(t->why, sizeof(t->why), "out of memory");
			t->bad = 1;
			return;
		}
		t->p = x;
		t->cap = c;
	}
	t->len += sprintf(t->p + t->len, "%s=%s\n", key, val);
}

static void add_u32(struct text *t, const char *key, uint32_t v)
{
	char num[16];

	(void) snprintf(num, sizeof(num), "%u", (unsigned) v);
	add(t, key, num);
}

static void add_ids(struct text *t, const uint32_t *ids, uint32_t n)
{
	char *s = malloc((size_t) n * 12 + 2);
	size_t l = 0;

	if (!s) {
		(void) snprintf(t->why, sizeof(t->why),
				"out of memory for %u task ids", (unsigned) n);
		t->bad = 1;
		return;
	}
	s[0] = '\0';
	for (uint32_t i = 0; i < n; i++)
		l += sprintf(s + l, "%s%u", i ? "," : "", ids[i]);
	add(t, "global_ids", s);
	free(s);
}

char *gb_request_format(const struct gb_request *r, int for_key, size_t *len,
			char *why, size_t whylen)
{
	const struct gb_config *c = r->conf;
	struct text t = { 0 };

	add(&t, "option", r->option);
	add(&t, "mode", r->enforce ? "enforce" : "optional");
	add(&t, "source", c->source);
	add(&t, "root", c->root);
	add(&t, "snapshot", c->snapshot);
	add(&t, "cache_dir", c->cache_dir);
	add(&t, "gres_conf", c->gres_conf);
	add(&t, "force", c->force);
	add(&t, "never", c->never);
	add(&t, "nics", c->nics);
	add_u32(&t, "uid", (uint32_t) r->uid);
	add_u32(&t, "gid", (uint32_t) r->gid);
	add(&t, "node_name", r->node_name);
	add_u32(&t, "local_tasks", r->local_tasks);
	add_ids(&t, r->global_ids, r->local_tasks);
	for (int i = 0; i < GB_REQ_NENV; i++) {
		char key[64];

		if (i == GB_REQ_SLURM_CONF && r->slurm_conf) {
			add(&t, "slurm_conf", r->slurm_conf);
			continue;
		}
		if (!r->env[i] ||
		    (for_key && i == GB_REQ_JOB_GPUS && r->env[GB_REQ_STEP_GPUS]))
			continue;
		(void) snprintf(key, sizeof(key), "env.%s", request_env[i]);
		add(&t, key, r->env[i]);
	}
	if (t.bad) {
		(void) snprintf(why, whylen, "%s", t.why);
		free(t.p);
		return NULL;
	}
	*len = t.len;
	return t.p;
}
