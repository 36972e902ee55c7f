/*
 * The per-task output (PROTOCOL.md section 3, items 4 and 4b; 4a is
 * fabric.c's): the task's environment (gb_result_env, on AMD through
 * gb_amd_env) and its mapping line (gb_result_logline), from the rule's
 * answer. Runs in the task child: no allocation. Plain C, no Slurm symbols.
 */
#include "table.h"
#include "fabric.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

		sb_add(&b, "%s%sGPU %d %s", i ? "; " : "",
		       gb_result_is_own(r, i) ? "" : "peer ", g->nvml,
		       g->busid[0] ? g->busid : "-");
		/* MI300 partitions share the bus id (and UUID): name the render node. */
		if (g->part >= 0)
			sb_add(&b, " xcp %d renderD%d", g->part, g->minor);
		sb_add(&b, " %s NUMA %d", g->uuid[0] ? g->uuid : "-", g->numa);
		if ((t->flags & GB_FLAG_NIC) && g->nic[0])
			sb_add(&b, " nic %s", g->nic);
		sb_add(&b, "%s", gb_fabric_desc(t, r->gpus[i]));
	}
	return b.bad ? -1 : 0;
}

int gb_step_container_gpus(const struct gb_table *t, char *buf, size_t len)
{
	struct sbuf b = { buf, len, 0, 0 };

	if (!len)
		return -1;
	buf[0] = '\0';
	if (t->amd) {
		(void) snprintf(buf, len, "the GPUs are AMD's (NVIDIA_VISIBLE_DEVICES is NVIDIA's)");
		return -1;
	}
	for (int i = 0; i < t->ngpus; i++) {
		const struct gb_gpu *g = &t->gpus[i];

		if (!g->uuid[0]) {
			(void) snprintf(buf, len, "the UUID of GPU %d (%s) is unknown",
					g->nvml, g->busid[0] ? g->busid : "bus id unknown");
			return -1;
		}
		sb_add(&b, "%s%s", i ? "," : "", g->uuid);
	}
	if (b.bad) {
		(void) snprintf(buf, len, "the step's %d UUIDs are longer than %zu bytes",
				t->ngpus, len - 1);
		return -1;
	}
	return 0;
}
