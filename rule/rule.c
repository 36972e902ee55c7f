/*
 * The per-task rule (PROTOCOL.md section 3, items 1-3 and 5): which GPUs
 * and CPUs a task gets from a parsed table (gb_binds_parse, gb_rule_apply),
 * kept to the GPUs it may open (gb_result_restrict), widened for
 * visible=first|localid (gb_result_widen), and the CPUs it runs on
 * (gb_result_affinity), and the device minors isolate guards for its GPUs
 * (gb_gpu_dev_minors). Runs in the task child: no allocation. Plain C, no
 * Slurm symbols.
 */
#include "table.h"
#include "internal.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

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
