/*
 * The decision table parser (PROTOCOL.md section 2): gb_table_parse and
 * gb_table_free. It allocates everything the task child needs later
 * (index_units), so that the rule (rule.c) and the output (output.c) never
 * allocate. Plain C, no Slurm symbols: compiled into the plugin and, through
 * cgo, into package rule (rule.go).
 */
#include "table.h"
#include "fabric.h"
#include "internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Comma list of GPU ids or "-" into a malloc'd array (NULL, 0 for "-"). */
static int parse_idlist(const char *s, int **ids, int *n)
{
	int cap = 1, cnt = 0;
	const char *p;
	int *v;

	*ids = NULL;
	*n = 0;
	if (!strcmp(s, "-"))
		return 0;
	for (p = s; *p; p++)
		if (*p == ',')
			cap++;
	v = calloc(cap, sizeof(*v));
	if (!v)
		return -1;
	p = s;
	while (*p) {
		char num[16];
		size_t l = strcspn(p, ",");
		long x;

		if (l == 0 || l >= sizeof(num))
			goto bad;
		memcpy(num, p, l);
		num[l] = '\0';
		if (parse_int(num, 0, INT_MAX, &x))
			goto bad;
		v[cnt++] = (int) x;
		p += l;
		if (*p == ',') {
			p++;
			if (!*p)
				goto bad;
		}
	}
	*ids = v;
	*n = cnt;
	return 0;
bad:
	free(v);
	return -1;
}

/* Split line in place into at most max fields at single spaces. */
static int split(char *line, char **f, int max)
{
	int n = 0;
	char *p = line;

	while (n < max) {
		f[n++] = p;
		p = strchr(p, ' ');
		if (!p)
			break;
		*p++ = '\0';
	}
	return p ? -1 : n;
}

static int copy_field(char *dst, size_t len, const char *src)
{
	if (!strcmp(src, "-"))
		src = "";
	if (strlen(src) >= len)
		return -1;
	strcpy(dst, src);
	return 0;
}

void gb_table_free(struct gb_table *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->nmessages; i++)
		free(t->messages[i]);
	free(t->messages);
	for (int i = 0; i < t->nnuma; i++)
		free(t->numa[i].gpus);
	free(t->numa);
	for (int i = 0; i < t->ngpus; i++)
		free(t->gpus[i].near);
	free(t->gpus);
	free(t->fallback);
	free(t->can_open);
	free(t->unit_at);
	free(t->unit_used);
	free(t->bind_mask);
	free(t->bind_valid);
	for (int i = 0; i < t->ndepends; i++)
		free(t->depends[i]);
	if (t->tasks)
		for (int i = 0; i < t->ntasks; i++)
			free(t->tasks[i].gpus);
	free(t->tasks);
	gb_fabric_free(t);
	memset(t, 0, sizeof(*t));
}

static int check_ids(const int *ids, int n, int ngpus)
{
	for (int i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= ngpus)
			return ids[i];
	return -1;
}

/*
 * The first GPU id that ids (all in 0..ngpus-1, check_ids) names twice, -1
 * for none, or -2 out of memory. The fallback order names each step GPU
 * once: the numa rule counts its units from it into arrays sized by the
 * GPUs (index_units).
 */
static int repeated_id(const int *ids, int n, int ngpus)
{
	unsigned char *seen = calloc((size_t) ngpus + 1, 1);
	int bad = -1;

	if (!seen)
		return -2;
	for (int i = 0; i < n && bad == -1; i++)
		if (seen[ids[i]]++)
			bad = ids[i];
	free(seen);
	return bad;
}

/*
 * Scratch for the task child, which must not allocate: can_open for
 * gb_result_restrict, unit_used for the numa rule, and unit_at, the unit
 * whose first GPU is each GPU (-1 for none).
 */
static int index_units(struct gb_table *t)
{
	size_t n = (size_t) t->ngpus + 1;
	int per = t->per_task;

	t->can_open = calloc(n, 1);
	t->unit_at = malloc(n * sizeof(int));
	t->unit_used = calloc(n, sizeof(int));
	t->bind_mask = calloc((size_t) t->ntasks + 1, sizeof(cpu_set_t));
	t->bind_valid = calloc((size_t) t->ntasks + 1, 1);
	if (!t->can_open || !t->unit_at || !t->unit_used || !t->bind_mask ||
	    !t->bind_valid)
		return -1;
	for (int i = 0; i < t->ngpus; i++)
		t->unit_at[i] = -1;
	for (int i = 0; i < t->nfallback; i += per)
		if (i == 0 || i + per <= t->nfallback)
			t->unit_at[t->fallback[i]] = i / per;
	return 0;
}

/* A "numagpus" line, kept until every "numa" and "gpu" line is read. */
struct pending_numagpus {
	int node;
	int *ids;
	int n;
};

/* What gb_table_parse knows between lines. */
struct parser {
	struct gb_table *t;
	int lineno;
	int have_status, have_rule, have_ntasks, ended;
	int ngpus_cap, nnuma_cap, nmsg_cap;
	struct pending_numagpus *ng;
	int nng, ng_cap;
	char *err;
	size_t errlen;
};

/* What a line parser returns besides 0; LINE_FAILED: err is set. */
enum { LINE_MALFORMED = 1, LINE_OOM = 2, LINE_FAILED = 3 };

/*
 * arr (room for *cap elements of sz bytes) with room for n + 1: arr itself,
 * or reallocated to twice the room (first the first time); NULL when out of
 * memory (arr is then unchanged).
 */
static void *grow(void *arr, int *cap, int n, size_t sz, int first)
{
	void *x;
	int c;

	if (n < *cap)
		return arr;
	c = *cap ? 2 * *cap : first;
	x = realloc(arr, (size_t) c * sz);
	if (x)
		*cap = c;
	return x;
}

static int line_message(struct parser *ps, const char *p)
{
	struct gb_table *t = ps->t;
	char **m = grow(t->messages, &ps->nmsg_cap, t->nmessages, sizeof(*m), 4);

	if (!m)
		return LINE_OOM;
	t->messages = m;
	t->messages[t->nmessages] = strdup(p[7] ? p + 8 : "");
	if (!t->messages[t->nmessages])
		return LINE_OOM;
	t->nmessages++;
	return 0;
}

static int line_end(struct parser *ps, char **f, int nf)
{
	long v;

	(void) nf;
	if (parse_int(f[1], 0, INT_MAX, &v) || v != ps->lineno - 1) {
		(void) gb_errf(ps->err, ps->errlen, 0,
			       "plan truncated or corrupt: end line says %s lines, %d were read",
			       f[1], ps->lineno - 1);
		return LINE_FAILED;
	}
	ps->ended = 1;
	return 0;
}

/* The index of s in names (n of them), or -1. */
static int keyword(const char *s, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -1;
}

/* Field 1 as a number in lo..hi into *dst. */
static int int_field(char **f, long lo, long hi, int *dst)
{
	long v;

	if (parse_int(f[1], lo, hi, &v))
		return LINE_MALFORMED;
	*dst = (int) v;
	return 0;
}

static int line_status(struct parser *ps, char **f, int nf)
{
	/* In the order of enum gb_status. */
	static const char *const names[] = { "ok", "warn", "error" };
	int k = keyword(f[1], names, 3);

	(void) nf;
	if (k < 0)
		return LINE_MALFORMED;
	ps->t->status = (enum gb_status) k;
	ps->have_status = 1;
	return 0;
}

/*
 * Launchers of gpubind 0.2.0 and before wrote "mode enforce|optional",
 * which the plugstack's mode always overrode. Newer ones do not write it;
 * the line is still accepted (and checked) for one release, so that a plugin
 * whose old launcher is still installed keeps working. Drop it after that.
 */
static int line_mode(struct parser *ps, char **f, int nf)
{
	static const char *const names[] = { "enforce", "optional" };

	(void) ps;
	(void) nf;
	return keyword(f[1], names, 2) < 0 ? LINE_MALFORMED : 0;
}

static int line_flags(struct parser *ps, char **f, int nf)
{
	(void) nf;
	return gb_flags_parse(f[1], &ps->t->flags) ? LINE_MALFORMED : 0;
}

static int line_rule(struct parser *ps, char **f, int nf)
{
	/* In the order of enum gb_rule. */
	static const char *const names[] = { "table", "numa" };
	int k = keyword(f[1], names, 2);

	(void) nf;
	if (k < 0)
		return LINE_MALFORMED;
	ps->t->rule = (enum gb_rule) k;
	ps->have_rule = 1;
	return 0;
}

static int line_share(struct parser *ps, char **f, int nf)
{
	(void) nf;
	return int_field(f, 1, GB_TABLE_MAX_SHARE, &ps->t->share);
}

static int line_per_task(struct parser *ps, char **f, int nf)
{
	(void) nf;
	return int_field(f, 1, GB_MAX_PER_TASK, &ps->t->per_task);
}

static int line_ntasks(struct parser *ps, char **f, int nf)
{
	struct gb_table *t = ps->t;
	long v;

	(void) nf;
	if (ps->have_ntasks || parse_int(f[1], 0, GB_TABLE_MAX_TASKS, &v))
		return LINE_MALFORMED;
	t->ntasks = (int) v;
	t->tasks = calloc(v ? v : 1, sizeof(*t->tasks));
	if (!t->tasks)
		return LINE_OOM;
	ps->have_ntasks = 1;
	return 0;
}

static int line_numa(struct parser *ps, char **f, int nf)
{
	struct gb_table *t = ps->t;
	struct gb_numa *n;
	long v;

	(void) nf;
	if (parse_int(f[1], 0, GB_TABLE_MAX_NUMA - 1, &v))
		return LINE_MALFORMED;
	for (int i = 0; i < t->nnuma; i++)
		if (t->numa[i].node == v)
			return LINE_MALFORMED;
	n = grow(t->numa, &ps->nnuma_cap, t->nnuma, sizeof(*n), 4);
	if (!n)
		return LINE_OOM;
	t->numa = n;
	n = &t->numa[t->nnuma];
	memset(n, 0, sizeof(*n));
	n->node = (int) v;
	if (gb_parse_cpulist(f[2], &n->cpus))
		return LINE_MALFORMED;
	CPU_OR(&t->node_cpus, &t->node_cpus, &n->cpus);
	t->nnuma++;
	return 0;
}

/* gpu ID VISIBLE NVMLINDEX MINOR BUSID UUID NUMA NIC [DEV] */
static int line_gpu(struct parser *ps, char **f, int nf)
{
	struct gb_table *t = ps->t;
	struct gb_gpu *g;
	long v;

	if (parse_int(f[1], 0, GB_TABLE_MAX_GPUS - 1, &v) || v != t->ngpus)
		return LINE_MALFORMED;
	g = grow(t->gpus, &ps->ngpus_cap, t->ngpus, sizeof(*g), 8);
	if (!g)
		return LINE_OOM;
	t->gpus = g;
	g = &t->gpus[t->ngpus];
	memset(g, 0, sizeof(*g));
	g->card = -1;
	g->part = -1;
	if (!strcmp(f[2], "-") ||
	    copy_field(g->visible, sizeof(g->visible), f[2]))
		return LINE_MALFORMED;
	if (parse_int(f[3], -1, INT_MAX, &v))
		return LINE_MALFORMED;
	g->nvml = (int) v;
	if (parse_int(f[4], -1, INT_MAX, &v))
		return LINE_MALFORMED;
	g->minor = (int) v;
	if (copy_field(g->busid, sizeof(g->busid), f[5]) ||
	    copy_field(g->uuid, sizeof(g->uuid), f[6]))
		return LINE_MALFORMED;
	if (parse_int(f[7], -1, 1 << 16, &v))
		return LINE_MALFORMED;
	g->numa = (int) v;
	if (copy_field(g->nic, sizeof(g->nic), f[8]))
		return LINE_MALFORMED;
	/* DEV came later; a 9-field line has none. */
	if (nf == 10 && copy_field(g->dev, sizeof(g->dev), f[9]))
		return LINE_MALFORMED;
	t->ngpus++;
	return 0;
}

/* Kept until the end: its node's numa line and its GPUs may come later. */
static int line_numagpus(struct parser *ps, char **f, int nf)
{
	struct pending_numagpus *ng;
	long v;

	(void) nf;
	ng = grow(ps->ng, &ps->ng_cap, ps->nng, sizeof(*ng), 4);
	if (!ng)
		return LINE_OOM;
	ps->ng = ng;
	ng = &ps->ng[ps->nng];
	if (parse_int(f[1], 0, 1 << 16, &v))
		return LINE_MALFORMED;
	ng->node = (int) v;
	if (parse_idlist(f[2], &ng->ids, &ng->n))
		return LINE_MALFORMED;
	ps->nng++;
	return 0;
}

static int line_depends(struct parser *ps, char **f, int nf)
{
	struct gb_table *t = ps->t;

	(void) nf;
	if (t->ndepends == GB_TABLE_MAX_DEPENDS)
		return LINE_MALFORMED;
	t->depends[t->ndepends] = strdup(f[1]);
	if (!t->depends[t->ndepends])
		return LINE_OOM;
	t->ndepends++;
	return 0;
}

static int line_fallback(struct parser *ps, char **f, int nf)
{
	struct gb_table *t = ps->t;

	(void) nf;
	free(t->fallback);
	if (parse_idlist(f[1], &t->fallback, &t->nfallback))
		return LINE_MALFORMED;
	return 0;
}

/* task LOCALID GPUIDS CPULIST */
static int line_task(struct parser *ps, char **f, int nf)
{
	struct gb_table *t = ps->t;
	struct gb_task *tk;
	long v;

	(void) nf;
	if (!ps->have_ntasks || parse_int(f[1], 0, INT_MAX, &v) ||
	    v >= t->ntasks || t->tasks[v].seen)
		return LINE_MALFORMED;
	tk = &t->tasks[v];
	tk->seen = 1;
	if (parse_idlist(f[2], &tk->gpus, &tk->ngpus))
		return LINE_MALFORMED;
	if (strcmp(f[3], "-")) {
		if (gb_parse_cpulist(f[3], &tk->cpus))
			return LINE_MALFORMED;
		tk->has_cpus = 1;
	}
	return 0;
}

/* visible own|first|localid */
static int line_visible(struct parser *ps, char **f, int nf)
{
	/* In the order of enum gb_visible. */
	static const char *const names[] = { "own", "first", "localid" };
	int k = keyword(f[1], names, 3);

	(void) nf;
	if (k < 0)
		return LINE_MALFORMED;
	ps->t->visible = (enum gb_visible) k;
	return 0;
}

/* nics NAME:PORT,... : the node's rails, NCCL_IB_HCA of every task. */
static int line_nics(struct parser *ps, char **f, int nf)
{
	(void) nf;
	if (strspn(f[1], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
			 "0123456789_.:,-") != strlen(f[1]))
		return LINE_MALFORMED;
	return copy_field(ps->t->rails, sizeof(ps->t->rails), f[1])
		       ? LINE_MALFORMED
		       : 0;
}

/* near ID ID,ID,... : after its gpu line; the ids are checked at the end. */
static int line_near(struct parser *ps, char **f, int nf)
{
	struct gb_table *t = ps->t;
	long v;

	(void) nf;
	if (parse_int(f[1], 0, GB_TABLE_MAX_GPUS - 1, &v) || v >= t->ngpus ||
	    t->gpus[v].near)
		return LINE_MALFORMED;
	if (parse_idlist(f[2], &t->gpus[v].near, &t->gpus[v].nnear))
		return LINE_MALFORMED;
	return 0;
}

/* Multi-node NVLink lines: parsed in fabric.c. */
static int line_fabric(struct parser *ps, char **f, int nf)
{
	return gb_fabric_line(ps->t, f, nf);
}

static int line_imex(struct parser *ps, char **f, int nf)
{
	return gb_imex_line(ps->t, f, nf);
}

/* card ID MINOR: an AMD step GPU's /dev/dri/cardN minor (once, after its gpu line). */
static int line_card(struct parser *ps, char **f, int nf)
{
	struct gb_table *t = ps->t;
	long id, v;

	(void) nf;
	if (parse_int(f[1], 0, GB_TABLE_MAX_GPUS - 1, &id) || id >= t->ngpus ||
	    t->gpus[id].card >= 0 || parse_int(f[2], 0, (1 << 20) - 1, &v))
		return LINE_MALFORMED;
	t->gpus[id].card = (int) v;
	return 0;
}

/* part ID XCP: an AMD step GPU is compute partition XCP (0-7) of its device (once,
 * after its gpu line): partitions share the bus id, so the log names the render node. */
static int line_part(struct parser *ps, char **f, int nf)
{
	struct gb_table *t = ps->t;
	long id, v;

	(void) nf;
	if (parse_int(f[1], 0, GB_TABLE_MAX_GPUS - 1, &id) || id >= t->ngpus ||
	    t->gpus[id].part >= 0 || parse_int(f[2], 0, 7, &v))
		return LINE_MALFORMED;
	t->gpus[id].part = (int) v;
	return 0;
}

/* vendor amd|nvidia: whose GPUs the gpu lines are (no line: NVIDIA). */
static int line_vendor(struct parser *ps, char **f, int nf)
{
	(void) nf;
	if (!strcmp(f[1], "amd"))
		ps->t->amd = 1;
	else if (strcmp(f[1], "nvidia"))
		return LINE_MALFORMED;
	return 0;
}

/* The line types of PROTOCOL.md section 2 but "message", by first field. */
static const struct line_type {
	const char *name;
	int min_fields, max_fields;
	int (*parse)(struct parser *ps, char **f, int nf);
} line_types[] = {
	{ "end", 2, 2, line_end },
	{ "status", 2, 2, line_status },
	{ "mode", 2, 2, line_mode },
	{ "flags", 2, 2, line_flags },
	{ "rule", 2, 2, line_rule },
	{ "share", 2, 2, line_share },
	{ "per_task", 2, 2, line_per_task },
	{ "ntasks", 2, 2, line_ntasks },
	{ "numa", 3, 3, line_numa },
	{ "gpu", 9, 10, line_gpu },
	{ "numagpus", 3, 3, line_numagpus },
	{ "depends", 2, 2, line_depends },
	{ "fallback", 2, 2, line_fallback },
	{ "task", 4, 4, line_task },
	{ "visible", 2, 2, line_visible },
	{ "nics", 2, 2, line_nics },
	{ "near", 3, 3, line_near },
	{ "fabric", 7, 7, line_fabric },
	{ "imex", 2, 2, line_imex },
	{ "vendor", 2, 2, line_vendor },
	{ "card", 3, 3, line_card },
	{ "part", 3, 3, line_part },
};

/* One line (NUL-terminated, without its newline), by its type. */
static int parse_line(struct parser *ps, char *p)
{
	char *f[10];
	int nf;

	if (ps->lineno == 1) {
		if (strcmp(p, "gpubind-plan 1")) {
			(void) gb_errf(ps->err, ps->errlen, 0,
				       "plan line 1 is not \"gpubind-plan 1\"");
			return LINE_FAILED;
		}
		return 0;
	}
	if (!strncmp(p, "message ", 8) || !strcmp(p, "message"))
		return line_message(ps, p);
	nf = split(p, f, 10);
	if (nf < 0)
		return LINE_MALFORMED;
	for (size_t i = 0; i < sizeof(line_types) / sizeof(line_types[0]); i++)
		if (!strcmp(f[0], line_types[i].name) &&
		    nf >= line_types[i].min_fields &&
		    nf <= line_types[i].max_fields)
			return line_types[i].parse(ps, f, nf);
	return LINE_MALFORMED;
}

/* The numagpus lines onto their numa lines, checked against the gpu lines. */
static int resolve_numagpus(struct parser *ps)
{
	struct gb_table *t = ps->t;

	for (int i = 0; i < ps->nng; i++) {
		struct pending_numagpus *ng = &ps->ng[i];
		struct gb_numa *n = NULL;
		int bad;

		for (int j = 0; j < t->nnuma; j++)
			if (t->numa[j].node == ng->node)
				n = &t->numa[j];
		if (!n || n->gpus) {
			(void) gb_errf(ps->err, ps->errlen, 0,
				       "plan: numagpus line for NUMA node %d %s",
				       ng->node, n ? "repeats" : "has no numa line");
			return -1;
		}
		if ((bad = check_ids(ng->ids, ng->n, t->ngpus)) >= 0) {
			(void) gb_errf(ps->err, ps->errlen, 0,
				       "plan: numagpus %d names GPU %d, not in the %d gpu lines",
				       ng->node, bad, t->ngpus);
			return -1;
		}
		n->gpus = ng->ids;
		n->ngpus = ng->n;
		ng->ids = NULL;
	}
	return 0;
}

/*
 * A table without a "nics" line (an older engine, a hand-written table):
 * the gpu lines' NICs in GPU order, each once, NAME:PORT (port 1 when the
 * line has none).
 */
static void derive_rails(struct gb_table *t)
{
	size_t off = 0;

	for (int i = 0; i < t->ngpus; i++) {
		const char *nic = t->gpus[i].nic;
		char item[sizeof(t->gpus[0].nic) + 4];
		int dup = 0, n;

		if (!nic[0])
			continue;
		(void) snprintf(item, sizeof(item), "%s%s", nic,
				strchr(nic, ':') ? "" : ":1");
		for (int j = 0; j < i && !dup; j++) {
			const char *o = t->gpus[j].nic;
			size_t l = strcspn(o, ":");

			dup = o[0] && l == strcspn(nic, ":") && !strncmp(o, nic, l);
		}
		if (dup)
			continue;
		n = snprintf(t->rails + off, sizeof(t->rails) - off, "%s%s",
			     off ? "," : "", item);
		if (n < 0 || (size_t) n >= sizeof(t->rails) - off) {
			t->rails[off] = '\0';
			return;
		}
		off += (size_t) n;
	}
}

/* After the last line: what the lines say together. 0, or -1 with err set. */
static int validate(struct parser *ps)
{
	struct gb_table *t = ps->t;
	int bad;

	if (!ps->ended) {
		(void) gb_errf(ps->err, ps->errlen, 0,
			       "plan truncated: no end line after %d lines", ps->lineno);
		return -1;
	}
	if (!ps->have_status) {
		(void) gb_errf(ps->err, ps->errlen, 0, "plan has no status line");
		return -1;
	}
	if (t->status == GB_STATUS_ERROR)
		return 0;
	if (!ps->have_rule || !ps->have_ntasks) {
		(void) gb_errf(ps->err, ps->errlen, 0, "plan lacks its %s line",
			       !ps->have_rule ? "rule" : "ntasks");
		return -1;
	}
	if (resolve_numagpus(ps))
		return -1;
	if (check_ids(t->fallback, t->nfallback, t->ngpus) >= 0) {
		(void) gb_errf(ps->err, ps->errlen, 0,
			       "plan: fallback names a GPU without gpu line");
		return -1;
	}
	bad = repeated_id(t->fallback, t->nfallback, t->ngpus);
	if (bad == -2) {
		(void) gb_errf(ps->err, ps->errlen, 0,
			       "out of memory while reading the plan");
		return -1;
	}
	if (bad >= 0) {
		(void) gb_errf(ps->err, ps->errlen, 0,
			       "plan: fallback names GPU %d twice (expected each step GPU once)",
			       bad);
		return -1;
	}
	for (int i = 0; i < t->ntasks; i++) {
		if (!t->tasks[i].seen) {
			(void) gb_errf(ps->err, ps->errlen, 0,
				       "plan has no line for task %d of %d", i, t->ntasks);
			return -1;
		}
		if (t->tasks[i].ngpus > GB_MAX_PER_TASK) {
			(void) gb_errf(ps->err, ps->errlen, 0,
				       "plan: task %d has %d GPUs (expected 0..%d)", i,
				       t->tasks[i].ngpus, GB_MAX_PER_TASK);
			return -1;
		}
		if ((bad = check_ids(t->tasks[i].gpus, t->tasks[i].ngpus,
				     t->ngpus)) >= 0) {
			(void) gb_errf(ps->err, ps->errlen, 0,
				       "plan: task %d names GPU %d, not in the %d gpu lines",
				       i, bad, t->ngpus);
			return -1;
		}
	}
	for (int i = 0; i < t->ngpus; i++)
		if (check_ids(t->gpus[i].near, t->gpus[i].nnear, t->ngpus) >= 0) {
			(void) gb_errf(ps->err, ps->errlen, 0,
				       "plan: near %d names a GPU without gpu line", i);
			return -1;
		}
	if (!t->rails[0])
		derive_rails(t);
	if (gb_fabric_validate(t, ps->err, ps->errlen))
		return -1;
	if (index_units(t)) {
		(void) gb_errf(ps->err, ps->errlen, 0,
			       "out of memory while reading the plan");
		return -1;
	}
	return 0;
}

/* The lines of buf (NUL-terminated), each framed and handed to parse_line. */
static int parse_lines(struct parser *ps, char *buf)
{
	char *p, *next;

	for (p = buf; *p; p = next) {
		char *nl = strchr(p, '\n');
		int rc;

		if (!nl) {
			(void) gb_errf(ps->err, ps->errlen, 0,
				       "plan truncated: line %d has no newline",
				       ps->lineno + 1);
			return -1;
		}
		*nl = '\0';
		next = nl + 1;
		if (ps->ended) {
			(void) gb_errf(ps->err, ps->errlen, 0,
				       "plan has data after its end line");
			return -1;
		}
		if (nl - p > GB_TABLE_MAX_LINE) {
			(void) gb_errf(ps->err, ps->errlen, 0,
				       "plan line %d is longer than %d bytes",
				       ps->lineno + 1, GB_TABLE_MAX_LINE);
			return -1;
		}
		ps->lineno++;
		rc = parse_line(ps, p);
		if (rc == LINE_MALFORMED)
			(void) gb_errf(ps->err, ps->errlen, 0,
				       "plan line %d is malformed (starts with \"%.32s\")",
				       ps->lineno, p);
		else if (rc == LINE_OOM)
			(void) gb_errf(ps->err, ps->errlen, 0,
				       "out of memory while reading the plan");
		if (rc)
			return -1;
	}
	return 0;
}

int gb_table_parse(const char *text, size_t len, struct gb_table *t,
		   char *err, size_t errlen)
{
	struct parser ps = { .t = t, .err = err, .errlen = errlen };
	char *buf;
	int rc;

	memset(t, 0, sizeof(*t));
	t->share = 1;
	t->per_task = 1;
	if (len > GB_TABLE_MAX_BYTES) {
		(void) gb_errf(err, errlen, 0, "plan is %zu bytes, more than the limit of %d",
			       len, GB_TABLE_MAX_BYTES);
		return -1;
	}
	if (len == 0) {
		(void) gb_errf(err, errlen, 0, "plan is empty (the engine wrote nothing)");
		return -1;
	}
	if (memchr(text, '\0', len)) {
		(void) gb_errf(err, errlen, 0, "plan holds a NUL byte");
		return -1;
	}
	buf = malloc(len + 1);
	if (!buf) {
		(void) gb_errf(err, errlen, 0, "out of memory");
		return -1;
	}
	memcpy(buf, text, len);
	buf[len] = '\0';

	rc = parse_lines(&ps, buf);
	if (!rc)
		rc = validate(&ps);
	for (int i = 0; i < ps.nng; i++)
		free(ps.ng[i].ids);
	free(ps.ng);
	free(buf);
	if (rc)
		gb_table_free(t);
	return rc;
}
