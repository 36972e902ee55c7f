/*
 * Decision table parser and the per-task rule (PROTOCOL.md sections 2, 3).
 * Plain C, no Slurm symbols: compiled into the plugin and, through cgo,
 * into package rule (rule.go).
 */
#include "table.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	(void) vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
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
};

unsigned gb_flag_lookup(const char *s, size_t len)
{
	for (int i = 0; i < GB_NFLAGS; i++)
		if (strlen(gb_flag_names[i].name) == len &&
		    !strncmp(s, gb_flag_names[i].name, len))
			return gb_flag_names[i].flag;
	return 0;
}

static int parse_flags(const char *s, unsigned *flags)
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

struct pending_numagpus {
	int node;
	int *ids;
	int n;
};

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
	free(t->gpus);
	free(t->fallback);
	free(t->can_open);
	free(t->unit_at);
	free(t->unit_used);
	for (int i = 0; i < t->ndepends; i++)
		free(t->depends[i]);
	if (t->tasks)
		for (int i = 0; i < t->ntasks; i++)
			free(t->tasks[i].gpus);
	free(t->tasks);
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
	if (!t->can_open || !t->unit_at || !t->unit_used)
		return -1;
	for (int i = 0; i < t->ngpus; i++)
		t->unit_at[i] = -1;
	for (int i = 0; i < t->nfallback; i += per)
		if (i == 0 || i + per <= t->nfallback)
			t->unit_at[t->fallback[i]] = i / per;
	return 0;
}

int gb_table_parse(const char *text, size_t len, struct gb_table *t,
		   char *err, size_t errlen)
{
	char *buf = NULL, *p, *next;
	int lineno = 0, have_status = 0, have_rule = 0, have_ntasks = 0;
	int ended = 0, ngpus_cap = 0, nnuma_cap = 0, nmsg_cap = 0;
	struct pending_numagpus *ng = NULL;
	int nng = 0, ng_cap = 0;
	int rc = -1;

	memset(t, 0, sizeof(*t));
	t->share = 1;
	t->per_task = 1;
	if (len > GB_TABLE_MAX_BYTES) {
		seterr(err, errlen, "plan is %zu bytes, more than the limit of %d",
		       len, GB_TABLE_MAX_BYTES);
		return -1;
	}
	if (len == 0) {
		seterr(err, errlen, "plan is empty (the engine wrote nothing)");
		return -1;
	}
	if (memchr(text, '\0', len)) {
		seterr(err, errlen, "plan holds a NUL byte");
		return -1;
	}
	buf = malloc(len + 1);
	if (!buf) {
		seterr(err, errlen, "out of memory");
		return -1;
	}
	memcpy(buf, text, len);
	buf[len] = '\0';

	for (p = buf; *p; p = next) {
		char *f[10];
		char *nl = strchr(p, '\n');
		int nf;
		long v;

		if (!nl) {
			seterr(err, errlen,
			       "plan truncated: line %d has no newline",
			       lineno + 1);
			goto out;
		}
		*nl = '\0';
		next = nl + 1;
		if (ended) {
			seterr(err, errlen, "plan has data after its end line");
			goto out;
		}
		if (nl - p > GB_TABLE_MAX_LINE) {
			seterr(err, errlen, "plan line %d is longer than %d bytes",
			       lineno + 1, GB_TABLE_MAX_LINE);
			goto out;
		}
		lineno++;
		if (lineno == 1) {
			if (strcmp(p, "gpubind-plan 1")) {
				seterr(err, errlen,
				       "plan line 1 is not \"gpubind-plan 1\"");
				goto out;
			}
			continue;
		}
		if (!strncmp(p, "message ", 8) || !strcmp(p, "message")) {
			if (t->nmessages == nmsg_cap) {
				int c = nmsg_cap ? 2 * nmsg_cap : 4;
				char **m = realloc(t->messages, c * sizeof(*m));

				if (!m)
					goto oom;
				t->messages = m;
				nmsg_cap = c;
			}
			t->messages[t->nmessages] = strdup(p[7] ? p + 8 : "");
			if (!t->messages[t->nmessages])
				goto oom;
			t->nmessages++;
			continue;
		}
		nf = split(p, f, 10);
		if (nf < 0)
			goto badline;
		if (!strcmp(f[0], "end") && nf == 2) {
			if (parse_int(f[1], 0, INT_MAX, &v) || v != lineno - 1) {
				seterr(err, errlen,
				       "plan truncated or corrupt: end line says %s lines, %d were read",
				       f[1], lineno - 1);
				goto out;
			}
			ended = 1;
		} else if (!strcmp(f[0], "status") && nf == 2) {
			if (!strcmp(f[1], "ok"))
				t->status = GB_STATUS_OK;
			else if (!strcmp(f[1], "warn"))
				t->status = GB_STATUS_WARN;
			else if (!strcmp(f[1], "error"))
				t->status = GB_STATUS_ERROR;
			else
				goto badline;
			have_status = 1;
		} else if (!strcmp(f[0], "mode") && nf == 2) {
			/* The plugstack's mode decides; the line is checked only. */
			if (strcmp(f[1], "enforce") && strcmp(f[1], "optional"))
				goto badline;
		} else if (!strcmp(f[0], "flags") && nf == 2) {
			if (parse_flags(f[1], &t->flags))
				goto badline;
		} else if (!strcmp(f[0], "rule") && nf == 2) {
			if (!strcmp(f[1], "table"))
				t->rule = GB_RULE_TABLE;
			else if (!strcmp(f[1], "numa"))
				t->rule = GB_RULE_NUMA;
			else
				goto badline;
			have_rule = 1;
		} else if (!strcmp(f[0], "share") && nf == 2) {
			if (parse_int(f[1], 1, GB_TABLE_MAX_SHARE, &v))
				goto badline;
			t->share = (int) v;
		} else if (!strcmp(f[0], "per_task") && nf == 2) {
			if (parse_int(f[1], 1, GB_MAX_PER_TASK, &v))
				goto badline;
			t->per_task = (int) v;
		} else if (!strcmp(f[0], "ntasks") && nf == 2) {
			if (have_ntasks ||
			    parse_int(f[1], 0, GB_TABLE_MAX_TASKS, &v))
				goto badline;
			t->ntasks = (int) v;
			t->tasks = calloc(v ? v : 1, sizeof(*t->tasks));
			if (!t->tasks)
				goto oom;
			have_ntasks = 1;
		} else if (!strcmp(f[0], "numa") && nf == 3) {
			struct gb_numa *n;

			if (parse_int(f[1], 0, GB_TABLE_MAX_NUMA - 1, &v))
				goto badline;
			for (int i = 0; i < t->nnuma; i++)
				if (t->numa[i].node == v)
					goto badline;
			if (t->nnuma == nnuma_cap) {
				int c = nnuma_cap ? 2 * nnuma_cap : 4;

				n = realloc(t->numa, c * sizeof(*n));
				if (!n)
					goto oom;
				t->numa = n;
				nnuma_cap = c;
			}
			n = &t->numa[t->nnuma];
			memset(n, 0, sizeof(*n));
			n->node = (int) v;
			if (gb_parse_cpulist(f[2], &n->cpus))
				goto badline;
			CPU_OR(&t->node_cpus, &t->node_cpus, &n->cpus);
			t->nnuma++;
		} else if (!strcmp(f[0], "gpu") && (nf == 9 || nf == 10)) {
			struct gb_gpu *g;

			if (parse_int(f[1], 0, GB_TABLE_MAX_GPUS - 1, &v) || v != t->ngpus)
				goto badline;
			if (t->ngpus == ngpus_cap) {
				int c = ngpus_cap ? 2 * ngpus_cap : 8;

				g = realloc(t->gpus, c * sizeof(*g));
				if (!g)
					goto oom;
				t->gpus = g;
				ngpus_cap = c;
			}
			g = &t->gpus[t->ngpus];
			memset(g, 0, sizeof(*g));
			if (!strcmp(f[2], "-") ||
			    copy_field(g->visible, sizeof(g->visible), f[2]))
				goto badline;
			if (parse_int(f[3], -1, INT_MAX, &v))
				goto badline;
			g->nvml = (int) v;
			if (parse_int(f[4], -1, INT_MAX, &v))
				goto badline;
			g->minor = (int) v;
			if (copy_field(g->busid, sizeof(g->busid), f[5]) ||
			    copy_field(g->uuid, sizeof(g->uuid), f[6]))
				goto badline;
			if (parse_int(f[7], -1, 1 << 16, &v))
				goto badline;
			g->numa = (int) v;
			if (copy_field(g->nic, sizeof(g->nic), f[8]))
				goto badline;
			/* DEV came later; a 9-field line has none. */
			if (nf == 10 &&
			    copy_field(g->dev, sizeof(g->dev), f[9]))
				goto badline;
			t->ngpus++;
		} else if (!strcmp(f[0], "numagpus") && nf == 3) {
			if (nng == ng_cap) {
				int c = ng_cap ? 2 * ng_cap : 4;
				struct pending_numagpus *x =
					realloc(ng, c * sizeof(*x));

				if (!x)
					goto oom;
				ng = x;
				ng_cap = c;
			}
			if (parse_int(f[1], 0, 1 << 16, &v))
				goto badline;
			ng[nng].node = (int) v;
			if (parse_idlist(f[2], &ng[nng].ids, &ng[nng].n))
				goto badline;
			nng++;
		} else if (!strcmp(f[0], "depends") && nf == 2) {
			if (t->ndepends == GB_TABLE_MAX_DEPENDS)
				goto badline;
			t->depends[t->ndepends] = strdup(f[1]);
			if (!t->depends[t->ndepends])
				goto oom;
			t->ndepends++;
		} else if (!strcmp(f[0], "fallback") && nf == 2) {
			free(t->fallback);
			if (parse_idlist(f[1], &t->fallback, &t->nfallback))
				goto badline;
		} else if (!strcmp(f[0], "task") && nf == 4) {
			struct gb_task *tk;

			if (!have_ntasks || parse_int(f[1], 0, INT_MAX, &v) ||
			    v >= t->ntasks || t->tasks[v].seen)
				goto badline;
			tk = &t->tasks[v];
			tk->seen = 1;
			if (parse_idlist(f[2], &tk->gpus, &tk->ngpus))
				goto badline;
			if (strcmp(f[3], "-")) {
				if (gb_parse_cpulist(f[3], &tk->cpus))
					goto badline;
				tk->has_cpus = 1;
			}
		} else {
			goto badline;
		}
	}
	if (!ended) {
		seterr(err, errlen,
		       "plan truncated: no end line after %d lines", lineno);
		goto out;
	}
	if (!have_status) {
		seterr(err, errlen, "plan has no status line");
		goto out;
	}
	if (t->status == GB_STATUS_ERROR) {
		rc = 0;
		goto out;
	}
	if (!have_rule || !have_ntasks) {
		seterr(err, errlen, "plan lacks its %s line",
		       !have_rule ? "rule" : "ntasks");
		goto out;
	}
	for (int i = 0; i < nng; i++) {
		struct gb_numa *n = NULL;
		int bad;

		for (int j = 0; j < t->nnuma; j++)
			if (t->numa[j].node == ng[i].node)
				n = &t->numa[j];
		if (!n || n->gpus) {
			seterr(err, errlen,
			       "plan: numagpus line for NUMA node %d %s",
			       ng[i].node, n ? "repeats" : "has no numa line");
			goto out;
		}
		if ((bad = check_ids(ng[i].ids, ng[i].n, t->ngpus)) >= 0) {
			seterr(err, errlen,
			       "plan: numagpus %d names GPU %d, not in the %d gpu lines",
			       ng[i].node, bad, t->ngpus);
			goto out;
		}
		n->gpus = ng[i].ids;
		n->ngpus = ng[i].n;
		ng[i].ids = NULL;
	}
	if (check_ids(t->fallback, t->nfallback, t->ngpus) >= 0) {
		seterr(err, errlen, "plan: fallback names a GPU without gpu line");
		goto out;
	}
	for (int i = 0; i < t->ntasks; i++) {
		int bad;

		if (!t->tasks[i].seen) {
			seterr(err, errlen, "plan has no line for task %d of %d",
			       i, t->ntasks);
			goto out;
		}
		if (t->tasks[i].ngpus > GB_MAX_PER_TASK) {
			seterr(err, errlen,
			       "plan: task %d has %d GPUs (expected 0..%d)", i,
			       t->tasks[i].ngpus, GB_MAX_PER_TASK);
			goto out;
		}
		if ((bad = check_ids(t->tasks[i].gpus, t->tasks[i].ngpus,
				     t->ngpus)) >= 0) {
			seterr(err, errlen,
			       "plan: task %d names GPU %d, not in the %d gpu lines",
			       i, bad, t->ngpus);
			goto out;
		}
	}
	if (index_units(t))
		goto oom;
	rc = 0;
	goto out;

badline:
	seterr(err, errlen, "plan line %d is malformed (starts with \"%.32s\")",
	       lineno, p);
	goto out;
oom:
	seterr(err, errlen, "out of memory while reading the plan");
out:
	for (int i = 0; i < nng; i++)
		free(ng[i].ids);
	free(ng);
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

/* Reads SLURM_CPU_BIND_LIST entry by entry (PROTOCOL.md section 3, item 5). */
struct bind_iter {
	const char *list; /* NULL: no list */
	const char *pos;  /* next entry; NULL: start over */
	int is_map;       /* map_cpu: CPU ids, else hex masks */
};

/*
 * The next task's entry. Like Slurm, a list with fewer entries than tasks
 * is reused from its start. Returns 1 with set filled, 0 for an entry that
 * does not parse or is empty (it counts as no entry), -1 without a list.
 */
static int next_entry(struct bind_iter *it, cpu_set_t *set)
{
	const char *p;
	size_t l;

	if (!it->list)
		return -1;
	p = it->pos ? it->pos : it->list;
	l = strcspn(p, ",");
	it->pos = p[l] ? p + l + 1 : NULL;
	if ((it->is_map ? parse_cpuid(p, l, set) : parse_mask(p, l, set)) ||
	    CPU_COUNT(set) == 0)
		return 0;
	return 1;
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
		      struct bind_iter it, const cpu_set_t *step,
		      struct gb_result *r)
{
	int *used = t->unit_used, units = unit_count(t), u, first;

	if (!units)
		return; /* no step GPU: the plan said so with a warning */
	memset(used, 0, sizeof(*used) * (size_t) units);
	for (int j = 0; j < lid; j++) {
		cpu_set_t m;
		int n = node, e = next_entry(&it, &m);

		if (e >= 0)
			n = e > 0 ? bound_node(t, &m, step) : -1;
		if (n >= 0)
			used[pick_unit(t, n, used)]++;
	}
	u = pick_unit(t, node, used);
	first = u * t->per_task;
	for (int i = 0; i < t->per_task && first + i < t->nfallback; i++)
		add_gpu(r, t->fallback[first + i]);
}

int gb_rule_apply(const struct gb_table *t, int lid, const char *bind_type,
		  const char *bind_list, const cpu_set_t *own,
		  const cpu_set_t *step, struct gb_result *r, char *err,
		  size_t errlen)
{
	cpu_set_t mine;
	struct bind_iter it = { NULL, NULL, 0 };
	int node = -1, e = -1;

	memset(r, 0, sizeof(*r));
	if (t->status == GB_STATUS_ERROR) {
		seterr(err, errlen, "plan has status error");
		return -1;
	}
	if (lid < 0 || lid >= t->ntasks) {
		seterr(err, errlen, "task %d is not in the plan of %d tasks",
		       lid, t->ntasks);
		return -1;
	}
	if (!step)
		step = &t->node_cpus;
	if (t->rule == GB_RULE_NUMA) {
		struct bind_iter mine_it;

		/* map_cpu: CPU ids; mask_cpu or no type: hex masks; others: none. */
		it.is_map = bind_type && strstr(bind_type, "map_cpu");
		if (bind_list && *bind_list &&
		    (!bind_type || it.is_map || strstr(bind_type, "mask_cpu")))
			it.list = bind_list;
		mine_it = it;
		for (int j = 0; j <= lid; j++)
			e = next_entry(&mine_it, &mine);
		if (e > 0)
			node = bound_node(t, &mine, step);
		else if (own)
			node = bound_node(t, own, step);
	}
	if (node < 0)
		take_task_line(t, lid, r);
	else
		take_unit(t, lid, node, it, step, r);
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

/* CUDA's number for GPU id among the GPUs the task can open (PCI order). */
static int cuda_number(const struct gb_table *t, int id)
{
	const struct gb_gpu *g = &t->gpus[id];
	int n = 0;

	for (int i = 0; i < t->ngpus; i++) {
		const struct gb_gpu *o = &t->gpus[i];
		int before = (g->busid[0] && o->busid[0])
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
	int denied = 0, want = r->ngpus, kept = 0, numa;

	if (!can_open)
		can_open = access_dev;
	for (int i = 0; i < t->ngpus; i++) {
		int e = t->gpus[i].dev[0] ? can_open(t->gpus[i].dev) : 0;

		t->can_open[i] = !(e == EPERM || e == EACCES);
		denied += !t->can_open[i];
	}
	if (!denied || !want)
		return 0;
	if (denied == t->ngpus) {
		seterr(err, errlen,
		       "the task may open none of the step's %d GPUs (its "
		       "device cgroup denies %s%s)", t->ngpus, t->gpus[0].dev,
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

/* The CUDA_VISIBLE_DEVICES entry of the task's i-th GPU. */
static void visible_of(const struct gb_table *t, const struct gb_result *r,
		       int i, char *buf, size_t len)
{
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

int gb_result_env(const struct gb_table *t, const struct gb_result *r,
		  char *buf, size_t len)
{
	struct sbuf b = { buf, len, 0, 0 };
	const struct gb_gpu *g0;

	if (!len)
		return -1;
	buf[0] = '\0';
	sb_add(&b, "CUDA_VISIBLE_DEVICES=");
	for (int i = 0; i < r->ngpus; i++) {
		char v[sizeof(t->gpus[0].visible)];

		visible_of(t, r, i, v, sizeof(v));
		sb_add(&b, "%s%s", i ? "," : "", v);
	}
	sb_add(&b, "\nCUDA_DEVICE_ORDER=PCI_BUS_ID\nGPUBIND_GPUS=");
	for (int i = 0; i < r->ngpus; i++)
		sb_add(&b, "%s%d", i ? "," : "", t->gpus[r->gpus[i]].nvml);
	sb_add(&b, "\nGPUBIND_PCI_BUS_IDS=");
	for (int i = 0; i < r->ngpus; i++)
		sb_add(&b, "%s%s", i ? "," : "", t->gpus[r->gpus[i]].busid);
	sb_add(&b, "\nGPUBIND_UUIDS=");
	for (int i = 0; i < r->ngpus; i++)
		sb_add(&b, "%s%s", i ? "," : "", t->gpus[r->gpus[i]].uuid);
	sb_add(&b, "\nGPUBIND_NUMA=");
	for (int i = 0; i < r->ngpus; i++)
		sb_add(&b, "%s%d", i ? "," : "", t->gpus[r->gpus[i]].numa);
	sb_add(&b, "\n");
	g0 = r->ngpus ? &t->gpus[r->gpus[0]] : NULL;
	if ((t->flags & GB_FLAG_NIC) && g0 && g0->nic[0])
		sb_add(&b, "NCCL_IB_HCA==%s:1\nUCX_NET_DEVICES=%s:1\n", g0->nic,
		       g0->nic);
	return b.bad ? -1 : 0;
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
	sb_add(&b, "task %d (rank %ld): CUDA_VISIBLE_DEVICES=", lid, rank);
	for (int i = 0; i < r->ngpus; i++) {
		char v[sizeof(t->gpus[0].visible)];

		visible_of(t, r, i, v, sizeof(v));
		sb_add(&b, "%s%s", i ? "," : "", v);
	}
	sb_add(&b, " -> ");
	for (int i = 0; i < r->ngpus; i++) {
		const struct gb_gpu *g = &t->gpus[r->gpus[i]];

		sb_add(&b, "%sGPU %d %s %s NUMA %d", i ? "; " : "", g->nvml,
		       g->busid[0] ? g->busid : "-", g->uuid[0] ? g->uuid : "-",
		       g->numa);
		if ((t->flags & GB_FLAG_NIC) && g->nic[0])
			sb_add(&b, " nic %s", g->nic);
	}
	return b.bad ? -1 : 0;
}
