/*
 * Decision table parser and the per-task rule (PROTOCOL.md sections 2, 3).
 * Plain C, no Slurm symbols: compiled into the plugin and, through cgo,
 * into package rule (rule.go).
 */
#include "table.h"
#include "fabric.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int gb_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		(void) vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

/* Strict non-negative/negative decimal integer in [lo, hi]. */
static int parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

int gb_parse_cpulist(const char *s, cpu_set_t *set)
{
	const char *p = s;

	CPU_ZERO(set);
	if (!s || !*s)
		return -1;
	if (!strcmp(s, "-"))
		return 0;
	while (*p) {
		char *end;
		long a, b;

		if (!isdigit((unsigned char) *p))
			return -1;
		errno = 0;
		a = strtol(p, &end, 10);
		if (errno || a < 0 || a >= CPU_SETSIZE)
			return -1;
		b = a;
		p = end;
		if (*p == '-') {
			p++;
			if (!isdigit((unsigned char) *p))
				return -1;
			b = strtol(p, &end, 10);
			if (errno || b < a || b >= CPU_SETSIZE)
				return -1;
			p = end;
		}
		for (long c = a; c <= b; c++)
			CPU_SET(c, set);
		if (*p == ',') {
			p++;
			if (!*p)
				return -1;
		} else if (*p) {
			return -1;
		}
	}
	return 0;
}

void gb_format_cpulist(const cpu_set_t *set, char *buf, size_t len)
{
	size_t off = 0;
	int first = 1;

	if (!len)
		return;
	buf[0] = '\0';
	for (int c = 0; c < CPU_SETSIZE; c++) {
		int e = c;
		int n;

		if (!CPU_ISSET(c, set))
			continue;
		while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
			e++;
		if (e == c)
			n = snprintf(buf + off, len - off, "%s%d",
				     first ? "" : ",", c);
		else
			n = snprintf(buf + off, len - off, "%s%d-%d",
				     first ? "" : ",", c, e);
		if (n < 0 || (size_t) n >= len - off) {
			buf[off] = '\0';
			return;
		}
		off += n;
		first = 0;
		c = e;
	}
	if (first)
		(void) snprintf(buf, len, "-");
}

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

const struct gb_flag_name gb_flag_names[GB_NFLAGS] = {
	{ "verbose", GB_FLAG_VERBOSE },
	{ "nic", GB_FLAG_NIC },
	{ "cpus", GB_FLAG_CPUS },
	{ "isolate", GB_FLAG_ISOLATE },
	{ "uuid", GB_FLAG_UUID },
};

unsigned gb_flag_lookup(const char *s, size_t len)
{
	for (int i = 0; i < GB_NFLAGS; i++)
		if (strlen(gb_flag_names[i].name) == len &&
		    !strncmp(s, gb_flag_names[i].name, len))
			return gb_flag_names[i].flag;
	return 0;
}

int gb_flags_parse(const char *s, unsigned *flags)
{
	const char *p = s;

	*flags = 0;
	if (!strcmp(s, "-"))
		return 0;
	while (*p) {
		size_t l = strcspn(p, ",");
		unsigned f = gb_flag_lookup(p, l);

		if (!f)
			return -1;
		*flags |= f;
		p += l;
		if (*p == ',')
			p++;
	}
	return 0;
}

void gb_flags_format(unsigned flags, char *buf, size_t len)
{
	size_t off = 0;

	if (!len)
		return;
	buf[0] = '\0';
	for (int i = 0; i < GB_NFLAGS; i++) {
		int n;

		if (!(flags & gb_flag_names[i].flag))
			continue;
		n = snprintf(buf + off, len - off, "%s%s", off ? "," : "",
			     gb_flag_names[i].name);
		if (n < 0 || (size_t) n >= len - off)
			break;
		off += (size_t) n;
	}
	if (!off)
		(void) snprintf(buf, len, "-");
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

/* ---- table parser ------------------------------------------------------ */

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

/* Multi-node NVLink lines: parsed in fabric.c. */
static int line_fabric(struct parser *ps, char **f, int nf)
{
	return gb_fabric_line(ps->t, f, nf);
}

static int line_imex(struct parser *ps, char **f, int nf)
{
	return gb_imex_line(ps->t, f, nf);
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
	for (int i = 0; i < t->ntasks; i++) {
		int bad;

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

/* ---- per-task rule ------------------------------------------------------ */

/* One hex mask ("0x3", "F0") into set. */
static int parse_mask(const char *s, size_t l, cpu_set_t *set)
{
	int bit = 0;

	CPU_ZERO(set);
	if (l >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		s += 2;
		l -= 2;
	}
	if (l == 0)
		return -1;
	for (size_t i = l; i-- > 0; bit += 4) {
		int d;
		char c = s[i];

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return -1;
		for (int b = 0; b < 4; b++) {
			if (!(d & (1 << b)))
				continue;
			if (bit + b >= CPU_SETSIZE)
				return -1;
			CPU_SET(bit + b, set);
		}
	}
	return 0;
}

/* One map_cpu entry: a decimal CPU id (as gpubind.CPUBindMasks). */
static int parse_cpuid(const char *s, size_t l, cpu_set_t *set)
{
	char num[32];
	long v;

	if (l == 0 || l >= sizeof(num))
		return -1;
	memcpy(num, s, l);
	num[l] = '\0';
	if (parse_int(num, 0, CPU_SETSIZE - 1, &v))
		return -1;
	CPU_ZERO(set);
	CPU_SET(v, set);
	return 0;
}

void gb_binds_parse(const struct gb_table *t, const char *type,
		    const char *list, struct gb_binds *b)
{
	/* map_cpu: CPU ids; mask_cpu or no type: hex masks; others: no list. */
	int is_map = type && strstr(type, "map_cpu");

	b->mask = t->bind_mask;
	b->valid = t->bind_valid;
	b->n = 0;
	if (!list || !*list || (type && !is_map && !strstr(type, "mask_cpu")))
		return;
	for (const char *p = list; b->n < t->ntasks; p++) {
		size_t l = strcspn(p, ",");
		cpu_set_t *m = &t->bind_mask[b->n];

		/* An entry that does not parse, or is empty, is no entry. */
		t->bind_valid[b->n++] =
			!(is_map ? parse_cpuid(p, l, m) : parse_mask(p, l, m)) &&
			CPU_COUNT(m) > 0;
		p += l;
		if (!*p)
			break;
	}
}

/* Task j's entry, NULL for none. Like Slurm, a list with fewer entries than
 * tasks is reused from its start. */
static const cpu_set_t *bind_of(const struct gb_binds *b, int j)
{
	if (!b || b->n <= 0)
		return NULL;
	j %= b->n;
	return b->valid[j] ? &b->mask[j] : NULL;
}

/* NUMA node holding most CPUs of set (ties: lowest id); -1 if none. */
static int numa_of(const struct gb_table *t, const cpu_set_t *set)
{
	int best = -1, bestcnt = 0;

	for (int i = 0; i < t->nnuma; i++) {
		cpu_set_t x;
		int cnt;

		CPU_AND(&x, set, &t->numa[i].cpus);
		cnt = CPU_COUNT(&x);
		if (cnt > bestcnt ||
		    (cnt && cnt == bestcnt && t->numa[i].node < best)) {
			best = t->numa[i].node;
			bestcnt = cnt;
		}
	}
	return best;
}

static const struct gb_numa *numa_by_node(const struct gb_table *t, int node)
{
	for (int i = 0; i < t->nnuma; i++)
		if (t->numa[i].node == node)
			return &t->numa[i];
	return NULL;
}

/*
 * The NUMA node whose GPUs a task with this mask should take, or -1 for
 * none (the task takes its plan line). A mask that holds every CPU the
 * step may use is no per-task binding: it counts only when the step itself
 * sits on one NUMA node (a partial-node step), and never for a whole-node
 * step or one spread over several nodes.
 */
static int bound_node(const struct gb_table *t, const cpu_set_t *mask,
		      const cpu_set_t *step)
{
	cpu_set_t m, s, both;
	int n;

	CPU_AND(&m, mask, &t->node_cpus);
	CPU_AND(&s, step, &t->node_cpus);
	CPU_AND(&both, &m, &s);
	if (!CPU_COUNT(&m))
		return -1;
	if (!CPU_COUNT(&s) || !CPU_EQUAL(&both, &s))
		return numa_of(t, &m);
	if (CPU_EQUAL(&s, &t->node_cpus) || (n = numa_of(t, &s)) < 0)
		return -1;
	CPU_AND(&both, &s, &numa_by_node(t, n)->cpus);
	return CPU_EQUAL(&both, &s) ? n : -1;
}

static void add_gpu(struct gb_result *r, int id)
{
	for (int i = 0; i < r->ngpus; i++)
		if (r->gpus[i] == id)
			return;
	if (r->ngpus < GB_MAX_PER_TASK)
		r->gpus[r->ngpus++] = id;
}

/*
 * Units of the numa rule: runs of per_task GPUs of the fallback order (the
 * engine writes it in packed groups), each with share slots. Unit u is on
 * NUMA node n when its first GPU is in "numagpus n".
 */
static int unit_count(const struct gb_table *t)
{
	int n = t->nfallback / t->per_task;

	return n ? n : (t->nfallback ? 1 : 0);
}

/*
 * The unit the next task on node takes, given the slots used so far:
 * a free unit on its node (in the node's order), else a free unit anywhere,
 * taken from the end of the fallback order (its front is what the tasks of
 * other nodes take first), else, all slots taken, the least used unit on
 * its node, else the least used unit. So groups are exclusive while there
 * are enough, and shared evenly after that.
 */
static int pick_unit(const struct gb_table *t, int node, const int *used)
{
	const struct gb_numa *nn = numa_by_node(t, node);
	int units = unit_count(t), best = -1;

	for (int i = 0; nn && i < nn->ngpus; i++) {
		int u = t->unit_at[nn->gpus[i]];

		if (u >= 0 && used[u] < t->share)
			return u;
	}
	for (int u = units - 1; u >= 0; u--)
		if (used[u] < t->share)
			return u;
	for (int i = 0; nn && i < nn->ngpus; i++) {
		int u = t->unit_at[nn->gpus[i]];

		if (u >= 0 && (best < 0 || used[u] < used[best]))
			best = u;
	}
	if (best >= 0)
		return best;
	for (int u = 0; u < units; u++)
		if (best < 0 || used[u] < used[best])
			best = u;
	return best;
}

/* The table's answer for task lid ("task L" line). */
static void take_task_line(const struct gb_table *t, int lid,
			   struct gb_result *r)
{
	const struct gb_task *tk = &t->tasks[lid];

	for (int i = 0; i < tk->ngpus; i++)
		add_gpu(r, tk->gpus[i]);
	r->by_table = 1;
	if ((t->flags & GB_FLAG_CPUS) && tk->has_cpus) {
		r->cpus = tk->cpus;
		r->set_cpus = 1;
	}
}

/*
 * The numa rule for task lid on node: replay the choices of the local tasks
 * before it (from the bind list; with only the task's own mask, the earlier
 * tasks count as on its node), then take the next unit.
 */
static void take_unit(const struct gb_table *t, int lid, int node,
		      const struct gb_binds *binds, const cpu_set_t *step,
		      struct gb_result *r)
{
	int *used = t->unit_used, units = unit_count(t), u, first;
	int listed = binds && binds->n > 0;

	if (!units)
		return; /* no step GPU: the plan said so with a warning */
	memset(used, 0, sizeof(*used) * (size_t) units);
	for (int j = 0; j < lid; j++) {
		const cpu_set_t *m = bind_of(binds, j);
		int n = node;

		if (listed)
			n = m ? bound_node(t, m, step) : -1;
		if (n >= 0)
			used[pick_unit(t, n, used)]++;
	}
	u = pick_unit(t, node, used);
	first = u * t->per_task;
	for (int i = 0; i < t->per_task && first + i < t->nfallback; i++)
		add_gpu(r, t->fallback[first + i]);
}

int gb_rule_apply(const struct gb_table *t, int lid,
		  const struct gb_binds *binds, const cpu_set_t *own,
		  const cpu_set_t *step, struct gb_result *r, char *err,
		  size_t errlen)
{
	int node = -1;

	memset(r, 0, sizeof(*r));
	if (t->status == GB_STATUS_ERROR) {
		(void) gb_errf(err, errlen, 0, "plan has status error");
		return -1;
	}
	if (lid < 0 || lid >= t->ntasks) {
		(void) gb_errf(err, errlen, 0, "task %d is not in the plan of %d tasks",
			       lid, t->ntasks);
		return -1;
	}
	if (!step)
		step = &t->node_cpus;
	if (t->rule == GB_RULE_NUMA) {
		const cpu_set_t *mine = bind_of(binds, lid);

		if (mine)
			node = bound_node(t, mine, step);
		else if (own)
			node = bound_node(t, own, step);
	}
	if (node < 0)
		take_task_line(t, lid, r);
	else
		take_unit(t, lid, node, binds, step, r);
	return 0;
}

static int access_dev(const char *dev)
{
	return access(dev, R_OK | W_OK) ? errno : 0;
}

static int is_number(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

/* Whether GPU o comes before g in ROCr's order (KFD order, the nvml field). */
static int amd_before(const struct gb_gpu *o, const struct gb_gpu *g)
{
	return o->nvml < g->nvml;
}

/* CUDA's number for GPU id among the GPUs the task can open (PCI order; on
 * AMD ROCr's, in KFD order). */
static int cuda_number(const struct gb_table *t, int id)
{
	const struct gb_gpu *g = &t->gpus[id];
	int n = 0;

	for (int i = 0; i < t->ngpus; i++) {
		const struct gb_gpu *o = &t->gpus[i];
		int before = t->amd ? amd_before(o, g) :
			     (g->busid[0] && o->busid[0])
				     ? strcmp(o->busid, g->busid) < 0
				     : i < id;

		if (t->can_open[i] && before)
			n++;
	}
	return n;
}

int gb_result_restrict(const struct gb_table *t, struct gb_result *r,
		       int (*can_open)(const char *dev), char *err,
		       size_t errlen)
{
	int denied = 0, want = r->ngpus, kept = 0, numa, first_e = 0;

	if (!can_open)
		can_open = access_dev;
	for (int i = 0; i < t->ngpus; i++) {
		int e = t->gpus[i].dev[0] ? can_open(t->gpus[i].dev) : 0;

		/* A missing node (ENOENT) cannot be opened either: CUDA
		 * would not see that GPU inside the task. */
		t->can_open[i] = !(e == EPERM || e == EACCES || e == ENOENT);
		denied += !t->can_open[i];
		if (i == 0)
			first_e = e;
	}
	if (!denied || !want)
		return 0;
	if (denied == t->ngpus) {
		(void) gb_errf(err, errlen, 0,
			       "the task may open none of the step's %d GPUs (%s%s%s)",
			       t->ngpus,
			       first_e == ENOENT ? "no device node " :
			       "its device cgroup denies ",
			       t->gpus[0].dev,
			       t->ngpus > 1 ? " and the others" : "");
		return -1;
	}
	numa = t->gpus[r->gpus[0]].numa;
	for (int i = 0; i < r->ngpus; i++)
		if (t->can_open[r->gpus[i]])
			r->gpus[kept++] = r->gpus[i];
	r->ngpus = kept;
	if (want > t->ngpus - denied)
		want = t->ngpus - denied;
	/* Fill up: allowed GPUs on the NUMA node of the first choice, then any. */
	for (int pass = 0; pass < 2 && r->ngpus < want; pass++)
		for (int i = 0; i < t->ngpus && r->ngpus < want; i++)
			if (t->can_open[i] && (pass || t->gpus[i].numa == numa))
				add_gpu(r, i);
	r->restricted = 1;
	for (int i = 0; i < r->ngpus; i++)
		r->vis[i] = is_number(t->gpus[r->gpus[i]].visible)
				    ? cuda_number(t, r->gpus[i])
				    : -1;
	return 0;
}

/* ---- visible=first|localid --------------------------------------------- */

static int has_gpu(const struct gb_result *r, int id)
{
	for (int i = 0; i < r->ngpus; i++)
		if (r->gpus[i] == id)
			return 1;
	return 0;
}

/* The step GPU id may be added: not there yet, and openable when the task's
 * device cgroup narrowed it (gb_result_restrict filled can_open). */
static int may_add(const struct gb_table *t, const struct gb_result *r,
		   int id)
{
	return !has_gpu(r, id) && (!r->restricted || t->can_open[id]);
}

/* Append id (numbered as CUDA will when restricted). */
static void widen_add(const struct gb_table *t, struct gb_result *r, int id)
{
	if (r->ngpus >= GB_MAX_PER_TASK || !may_add(t, r, id))
		return;
	r->vis[r->ngpus] = (r->restricted && is_number(t->gpus[id].visible))
				   ? cuda_number(t, id)
				   : -1;
	r->gpus[r->ngpus++] = id;
}

/* Rotate gpus[from..ngpus) (with vis) so that entry from + k comes first. */
static void rotate(struct gb_result *r, int from, int k)
{
	for (int n = 0; n < k; n++) {
		int g = r->gpus[from], v = r->vis[from];

		memmove(&r->gpus[from], &r->gpus[from + 1],
			sizeof(int) * (size_t) (r->ngpus - from - 1));
		memmove(&r->vis[from], &r->vis[from + 1],
			sizeof(int) * (size_t) (r->ngpus - from - 1));
		r->gpus[r->ngpus - 1] = g;
		r->vis[r->ngpus - 1] = v;
	}
}

static int is_mig(const struct gb_gpu *g)
{
	return !strncmp(g->uuid, "MIG-", 4);
}

void gb_result_widen(const struct gb_table *t, struct gb_result *r, int lid)
{
	const struct gb_gpu *g0;
	int nown = r->ngpus, pos;

	/* CUDA sees one MIG device per process: the first listed. */
	if (nown > 1 && is_mig(&t->gpus[r->gpus[0]]))
		r->ngpus = nown = 1;
	r->own_at = 0;
	r->nown = nown;
	if (t->visible == GB_VISIBLE_OWN || !nown ||
	    is_mig(&t->gpus[r->gpus[0]]))
		return;
	r->widened = 1;
	g0 = &t->gpus[r->gpus[0]];
	/* The engine's order from the first own GPU (same switch, same NUMA
	 * node, others); then, for a table without it, same NUMA node, then
	 * by id. */
	for (int i = 0; i < g0->nnear; i++)
		widen_add(t, r, g0->near[i]);
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < t->ngpus; i++)
			if (pass || t->gpus[i].numa == g0->numa)
				widen_add(t, r, i);
	if (t->visible != GB_VISIBLE_LOCALID)
		return;
	/* localid: the own GPUs move to entry lid: the first lid others go
	 * in front of them. */
	pos = lid < r->ngpus - nown ? lid : r->ngpus - nown;
	if (pos <= 0)
		return;
	rotate(r, 0, nown);        /* others first, own at the end */
	rotate(r, pos, r->ngpus - nown - pos); /* own back to entry pos */
	r->own_at = pos;
}

int gb_gpu_dev_minors(const struct gb_table *t, const int *gpus, int n,
		      int *out, int max, char *err, size_t errlen)
{
	int k = 0;

	for (int i = 0; i < n; i++) {
		const struct gb_gpu *g;

		if (gpus[i] < 0 || gpus[i] >= t->ngpus)
			return gb_errf(err, errlen, -1, "step GPU %d is not "
				       "in the table's %d gpu lines", gpus[i],
				       t->ngpus);
		g = &t->gpus[gpus[i]];
		if (g->minor < 0 || (t->amd && g->card < 0))
			return gb_errf(err, errlen, -1, "step GPU %d (%s) "
				       "has no known %s", gpus[i], g->busid,
				       g->minor < 0 ? (t->amd ?
				       "render node minor" : "/dev/nvidiaN minor")
				       : "/dev/dri/cardN minor (no \"card\" line)");
		if (k + 1 + t->amd > max)
			return gb_errf(err, errlen, -1, "more than %d device "
				       "minors", max);
		out[k++] = g->minor;
		if (t->amd)
			out[k++] = g->card;
	}
	return k;
}

int gb_result_affinity(const struct gb_result *r, const cpu_set_t *own,
		       cpu_set_t *out)
{
	if (!r->set_cpus) {
		if (own)
			*out = *own;
		else
			CPU_ZERO(out);
		return 0;
	}
	if (!own) {
		*out = r->cpus;
		return 0;
	}
	CPU_AND(out, &r->cpus, own);
	if (CPU_COUNT(out))
		return 1;
	*out = *own;
	return 0;
}

/*
 * The uuid flag: the task's i-th GPU goes into CUDA_VISIBLE_DEVICES by its
 * UUID (a MIG device's is its MIG- UUID). CUDA looks a UUID up among the
 * devices the task can open and numbers the list in its order, so no
 * renumbering (gb_result_restrict's vis[]) applies. A GPU whose UUID the
 * table does not know keeps its number (the engine warns and drops the flag
 * in that case, so a list never mixes the two).
 */
static int visible_uuid(const struct gb_table *t, const struct gb_result *r,
			int i, char *buf, size_t len)
{
	const struct gb_gpu *g = &t->gpus[r->gpus[i]];

	if (!(t->flags & GB_FLAG_UUID) || !g->uuid[0])
		return 0;
	(void) snprintf(buf, len, "%s", g->uuid);
	return 1;
}

/* The CUDA_VISIBLE_DEVICES entry of the task's i-th GPU. */
static void visible_of(const struct gb_table *t, const struct gb_result *r,
		       int i, char *buf, size_t len)
{
	if (visible_uuid(t, r, i, buf, len))
		return;
	if (r->restricted && r->vis[i] >= 0)
		(void) snprintf(buf, len, "%d", r->vis[i]);
	else
		(void) snprintf(buf, len, "%s", t->gpus[r->gpus[i]].visible);
}

/* ---- output ------------------------------------------------------------- */

struct sbuf {
	char *p;
	size_t len, off;
	int bad;
};

static void sb_add(struct sbuf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void sb_add(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->bad)
		return;
	va_start(ap, fmt);
	n = vsnprintf(b->p + b->off, b->len - b->off, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t) n >= b->len - b->off) {
		b->bad = 1;
		return;
	}
	b->off += n;
}

/* The variables of gb_result_env, in order. */
enum env_var {
	ENV_CUDA_VISIBLE, ENV_DEVICE_ORDER, ENV_GPUS, ENV_BUS_IDS, ENV_UUIDS,
	ENV_NUMA, ENV_CUDA_DEVICES, ENV_NCCL_IB_HCA, ENV_UCX_NET, ENV_NIC,
	ENV_COUNT
};
static const struct {
	const char *name;
	int overwrite; /* 0: a value the task has already stays (the user's NIC) */
} env_vars[ENV_COUNT] = {
	{ "CUDA_VISIBLE_DEVICES", 1 }, { "CUDA_DEVICE_ORDER", 1 },
	{ "GPUBIND_GPUS", 1 },         { "GPUBIND_PCI_BUS_IDS", 1 },
	{ "GPUBIND_UUIDS", 1 },        { "GPUBIND_NUMA", 1 },
	{ "GPUBIND_CUDA_DEVICES", 1 }, { "NCCL_IB_HCA", 0 },
	{ "UCX_NET_DEVICES", 0 },      { "GPUBIND_NIC", 1 },
};

/* The task's first own GPU. */
static const struct gb_gpu *own_first(const struct gb_table *t,
				      const struct gb_result *r)
{
	return &t->gpus[r->gpus[r->widened ? r->own_at : 0]];
}

/* The value of variable v for the task; 0 when the task gets none. */
static int env_value(const struct gb_table *t, const struct gb_result *r,
		     enum env_var v, struct sbuf *b)
{
	const struct gb_gpu *g0 = own_first(t, r);
	/* NIC is NAME:PORT; a table without the port means port 1. */
	const char *port = strchr(g0->nic, ':') ? "" : ":1";
	int nown = 0;

	for (int i = 0; i < r->ngpus; i++) {
		const struct gb_gpu *g = &t->gpus[r->gpus[i]];
		/* GPUBIND_* list the task's own GPUs; CUDA_VISIBLE_DEVICES all. */
		const char *sep = nown ? "," : "";
		char vis[sizeof(g->visible)];

		if (v == ENV_CUDA_VISIBLE) {
			visible_of(t, r, i, vis, sizeof(vis));
			sb_add(b, "%s%s", i ? "," : "", vis);
			continue;
		}
		if (!gb_result_is_own(r, i))
			continue;
		nown++;
		switch (v) {
		case ENV_CUDA_DEVICES:
			sb_add(b, "%s%d", sep, i);
			break;
		case ENV_GPUS:
			sb_add(b, "%s%d", sep, g->nvml);
			break;
		case ENV_BUS_IDS:
			sb_add(b, "%s%s", sep, g->busid);
			break;
		case ENV_UUIDS:
			sb_add(b, "%s%s", sep, g->uuid);
			break;
		case ENV_NUMA:
			sb_add(b, "%s%d", sep, g->numa);
			break;
		default:
			break;
		}
	}
	switch (v) {
	case ENV_DEVICE_ORDER:
		sb_add(b, "PCI_BUS_ID");
		break;
	case ENV_NCCL_IB_HCA:
		/* NCCL picks each GPU's NIC itself (rails, PXN) and wants the
		 * same list on every rank: the node's rails, exact match. */
		if (!(t->flags & GB_FLAG_NIC) || !t->rails[0])
			return 0;
		sb_add(b, "=%s", t->rails);
		break;
	case ENV_UCX_NET:
	case ENV_NIC:
		if (!(t->flags & GB_FLAG_NIC) || !g0->nic[0])
			return 0;
		sb_add(b, "%s%s", g0->nic, port);
		break;
	default:
		break;
	}
	return 1;
}

/* ---- AMD: ROCR_VISIBLE_DEVICES and what HIP reads relative to it ---------- */

/* The variables gb_amd_env sets in place of CUDA_VISIBLE_DEVICES and
 * CUDA_DEVICE_ORDER. */
static int amd_replaces(enum env_var v)
{
	return v == ENV_CUDA_VISIBLE || v == ENV_DEVICE_ORDER;
}

/*
 * ROCR_VISIBLE_DEVICES gets the task's list (ROCr indices, KFD order; ROCr
 * applies it first). HIP then numbers what ROCr shows from 0, and reads
 * HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES, relative to that, as the
 * OpenCL runtime reads GPU_DEVICE_ORDINAL: all three become 0..n-1, so
 * that a value Slurm left (CUDA_VISIBLE_DEVICES=4,5) cannot hide the task's
 * GPUs from HIP, and tools that count GPUs from any of them agree.
 */
static int gb_amd_env(const struct gb_table *t, const struct gb_result *r,
		      gb_env_set set, void *ctx, char *val, size_t len)
{
	static const char *const relative[] = {
		"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
	};
	struct sbuf b = { val, len, 0, 0 };
	int rc;

	/* The list CUDA_VISIBLE_DEVICES would get on NVIDIA. */
	val[0] = '\0';
	(void) env_value(t, r, ENV_CUDA_VISIBLE, &b);
	if (b.bad)
		return -1;
	if ((rc = set(ctx, "ROCR_VISIBLE_DEVICES", val, 1)))
		return rc;
	b.off = 0;
	for (int i = 0; i < r->ngpus; i++)
		sb_add(&b, "%s%d", i ? "," : "", i);
	if (b.bad)
		return -1;
	for (size_t k = 0; k < sizeof(relative) / sizeof(relative[0]); k++)
		if ((rc = set(ctx, relative[k], val, 1)))
			return rc;
	return 0;
}

int gb_result_env(const struct gb_table *t, const struct gb_result *r,
		  gb_env_set set, void *ctx)
{
	char val[GB_ENV_VALUE_MAX];

	if (!r->ngpus)
		return 0;
	if (t->amd) {
		int rc = gb_amd_env(t, r, set, ctx, val, sizeof(val));

		if (rc)
			return rc;
	}
	for (int v = 0; v < ENV_COUNT; v++) {
		struct sbuf b = { val, sizeof(val), 0, 0 };
		int rc;

		if (t->amd && amd_replaces((enum env_var) v))
			continue;
		val[0] = '\0';
		if (!env_value(t, r, (enum env_var) v, &b))
			continue;
		if (b.bad)
			return -1;
		if ((rc = set(ctx, env_vars[v].name, val, env_vars[v].overwrite)))
			return rc;
	}
	return gb_fabric_env(t, r, set, ctx);
}

int gb_result_logline(const struct gb_table *t, const struct gb_result *r,
		      int lid, long rank, char *buf, size_t len)
{
	struct sbuf b = { buf, len, 0, 0 };

	if (!len)
		return -1;
	buf[0] = '\0';
	if (!r->ngpus) {
		sb_add(&b, "task %d (rank %ld): no GPU", lid, rank);
		return b.bad ? -1 : 0;
	}
	sb_add(&b, "task %d (rank %ld): %s=", lid, rank,
	       t->amd ? "ROCR_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES");
	for (int i = 0; i < r->ngpus; i++) {
		char v[sizeof(t->gpus[0].visible)];

		visible_of(t, r, i, v, sizeof(v));
		sb_add(&b, "%s%s", i ? "," : "", v);
	}
	if (r->widened) {
		sb_add(&b, " (visible=%s, own entr%s %d",
		       t->visible == GB_VISIBLE_FIRST ? "first" : "localid",
		       r->nown > 1 ? "ies" : "y", r->own_at);
		if (r->nown > 1)
			sb_add(&b, "-%d", r->own_at + r->nown - 1);
		sb_add(&b, ")");
	}
	sb_add(&b, " -> ");
	for (int i = 0; i < r->ngpus; i++) {
		const struct gb_gpu *g = &t->gpus[r->gpus[i]];

		sb_add(&b, "%s%sGPU %d %s %s NUMA %d", i ? "; " : "",
		       gb_result_is_own(r, i) ? "" : "peer ", g->nvml,
		       g->busid[0] ? g->busid : "-", g->uuid[0] ? g->uuid : "-",
		       g->numa);
		if ((t->flags & GB_FLAG_NIC) && g->nic[0])
			sb_add(&b, " nic %s", g->nic);
		sb_add(&b, "%s", gb_fabric_desc(t, r->gpus[i]));
	}
	return b.bad ? -1 : 0;
}

/* ---- the admin's default= on a step (table.h) ----------------------------- */

int gb_gpu_list_count(const char *list)
{
	const char *p = list;
	long n = 0;

	if (!list)
		return -1;
	while (*p) {
		size_t l = strcspn(p, ",");
		char item[128];
		char *dash;
		long a, b;

		if (l == 0 || l >= sizeof(item))
			return -1;
		memcpy(item, p, l);
		item[l] = '\0';
		if (!strncmp(item, "GPU-", 4) || !strncmp(item, "MIG-", 4)) {
			n++;
		} else if ((dash = strchr(item, '-'))) {     /* 0-3 */
			*dash = '\0';
			if (parse_int(item, 0, 65535, &a) ||
			    parse_int(dash + 1, 0, 65535, &b) || b < a)
				return -1;
			n += b - a + 1;
		} else if (parse_int(item, 0, 65535, &a)) {
			return -1;
		} else {
			n++;
		}
		if (n > GB_TABLE_MAX_GPUS)
			return -1;
		p += l;
		if (*p == ',' && !*++p)
			return -1;
	}
	return (int) n;
}

/* The N of "NAME:N" at the start of option (up to its first comma), or -1. */
static long policy_n(const char *option, const char *name, long hi)
{
	size_t l = strlen(name), len = strcspn(option, ",");
	char num[16];
	long n;

	if (len <= l || len - l >= sizeof(num))
		return -1;
	memcpy(num, option + l, len - l);
	num[len - l] = '\0';
	return parse_int(num, 1, hi, &n) ? -1 : n;
}

int gb_option_gpus_used(const char *option, int ntasks)
{
	long n;

	if (ntasks < 0)
		return -1;
	if (!strncmp(option, "per-task:", 9)) {
		if ((n = policy_n(option, "per-task:", GB_MAX_PER_TASK)) < 0)
			return -1;
		return (long) ntasks * n > INT_MAX ? -1 : (int) (ntasks * n);
	}
	if (!strncmp(option, "single:", 7)) {
		if ((n = policy_n(option, "single:", GB_TABLE_MAX_SHARE)) < 0)
			return -1;
		return (int) ((ntasks + n - 1) / n);
	}
	return ntasks;
}

enum gb_default_verdict gb_default_decide(const char *option,
					  struct gb_default_step *s)
{
	s->ngpus = s->used = -1;
	if (!s->step_gpus || !s->step_gpus[0]) {
		s->ngpus = 0;
		return GB_DEFAULT_NO_GPUS;
	}
	s->ngpus = gb_gpu_list_count(s->step_gpus);
	s->used = gb_option_gpus_used(option, s->ntasks);
	if (s->ngpus < 0 || s->used < 0)
		return GB_DEFAULT_ASK_ENGINE;
	if (s->ngpus == 0)
		return GB_DEFAULT_NO_GPUS;
	if (s->used < s->ngpus)
		return GB_DEFAULT_FEWER_TASKS;
	return s->used == s->ngpus ? GB_DEFAULT_BIND : GB_DEFAULT_SHARE;
}

int gb_default_option(const char *option, enum gb_default_verdict v,
		      unsigned force, char *buf, size_t len)
{
	const char *p = option;
	size_t off = 0;
	int visible = 0, isolate = (force & GB_FLAG_ISOLATE) != 0;

	if (!len)
		return -1;
	buf[0] = '\0';
	while (*p) {
		size_t l = strcspn(p, ",");
		unsigned f = gb_flag_lookup(p, l);
		int n;

		if (v == GB_DEFAULT_SHARE &&
		    (f == GB_FLAG_CPUS || f == GB_FLAG_ISOLATE)) {
			/* per-task cpus/isolate: only when each task has its own */
		} else {
			visible |= !strncmp(p, "visible=", 8);
			isolate |= f == GB_FLAG_ISOLATE;
			n = snprintf(buf + off, len - off, "%s%.*s",
				     off ? "," : "", (int) l, p);
			if (n < 0 || (size_t) n >= len - off)
				return -1;
			off += (size_t) n;
		}
		p += l;
		if (*p == ',')
			p++;
	}
	if (!visible && !isolate) {
		int n = snprintf(buf + off, len - off, "%svisible=localid",
				 off ? "," : "");

		if (n < 0 || (size_t) n >= len - off)
			return -1;
	}
	return 0;
}
