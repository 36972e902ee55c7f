/*
 * Multi-node NVLink fabric lines and the per-task fabric decision (see
 * fabric.h). The engine writes a "fabric" line only for step GPUs in an
 * NVLink domain (state other than not_supported), and an "imex" line with
 * them, so a table of a PCIe or HGX node is unchanged.
 */
#include "fabric.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

enum fab_state { FAB_NOT_STARTED, FAB_IN_PROGRESS, FAB_COMPLETED };
enum fab_health { FAB_HEALTH_UNKNOWN, FAB_HEALTHY, FAB_UNHEALTHY, FAB_LIMITED };

static const char *const state_names[] = { "not_started", "in_progress",
					   "completed" };
static const char *const health_names[] = { "-", "healthy", "unhealthy",
					    "limited_capacity" };

struct gb_fabric_gpu {
	int id;                /* step GPU id (gpu line) */
	enum fab_state state;
	unsigned long status;  /* nvmlReturn_t of the registration */
	enum fab_health health;
	char clique[64];       /* cluster_uuid.clique_id */
	char desc[128];        /* its part of the mapping line */
};

struct gb_fabric {
	struct gb_fabric_gpu *gpu;
	int n, cap;
	char imex_dir[256];    /* "" when no imex line */
};

static int keyword(const char *s, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -1;
}

static int is_uuid(const char *s)
{
	if (strlen(s) != 36)
		return 0;
	for (int i = 0; i < 36; i++) {
		char c = s[i];

		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (c != '-')
				return 0;
		} else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
			return 0;
		}
	}
	return 1;
}

static int parse_ulong(const char *s, unsigned long hi, unsigned long *out)
{
	char *end;
	unsigned long v;

	if (!*s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v > hi)
		return -1;
	*out = v;
	return 0;
}

static struct gb_fabric *fabric_of(struct gb_table *t)
{
	if (!t->fabric)
		t->fabric = calloc(1, sizeof(*t->fabric));
	return t->fabric;
}

/* fabric ID STATE STATUS HEALTH CLUSTER_UUID CLIQUE_ID */
int gb_fabric_line(struct gb_table *t, char **f, int nf)
{
	struct gb_fabric *fb;
	struct gb_fabric_gpu *g;
	unsigned long id, status, clique;
	int st, h;

	if (nf != 7 || parse_ulong(f[1], GB_TABLE_MAX_GPUS - 1, &id) ||
	    (st = keyword(f[2], state_names, 3)) < 0 ||
	    parse_ulong(f[3], UINT32_MAX, &status) ||
	    (h = keyword(f[4], health_names, 4)) < 0 || !is_uuid(f[5]) ||
	    parse_ulong(f[6], UINT32_MAX, &clique))
		return 1;
	if (!(fb = fabric_of(t)))
		return 2;
	for (int i = 0; i < fb->n; i++)
		if (fb->gpu[i].id == (int) id)
			return 1;
	if (fb->n == fb->cap) {
		int cap = fb->cap ? 2 * fb->cap : 8;
		struct gb_fabric_gpu *x = realloc(fb->gpu, cap * sizeof(*x));

		if (!x)
			return 2;
		fb->gpu = x;
		fb->cap = cap;
	}
	g = &fb->gpu[fb->n];
	memset(g, 0, sizeof(*g));
	g->id = (int) id;
	g->state = (enum fab_state) st;
	g->status = status;
	g->health = (enum fab_health) h;
	(void) snprintf(g->clique, sizeof(g->clique), "%s.%lu", f[5], clique);
	(void) snprintf(g->desc, sizeof(g->desc), " fabric %s%s%s%s clique %s",
			f[2], h ? "," : "", h ? f[4] : "",
			status ? ",error" : "", g->clique);
	fb->n++;
	return 0;
}

/* imex DIR */
int gb_imex_line(struct gb_table *t, char **f, int nf)
{
	struct gb_fabric *fb;

	if (nf != 2 || f[1][0] != '/' || strlen(f[1]) >= sizeof(fb->imex_dir))
		return 1;
	if (!(fb = fabric_of(t)))
		return 2;
	strcpy(fb->imex_dir, f[1]);
	return 0;
}

int gb_fabric_validate(const struct gb_table *t, char *err, size_t errlen)
{
	const struct gb_fabric *fb = t->fabric;

	for (int i = 0; fb && i < fb->n; i++)
		if (fb->gpu[i].id >= t->ngpus) {
			if (err && errlen)
				(void) snprintf(err, errlen,
						"plan: fabric line names GPU %d, not in the %d gpu lines",
						fb->gpu[i].id, t->ngpus);
			return -1;
		}
	return 0;
}

void gb_fabric_free(struct gb_table *t)
{
	if (!t->fabric)
		return;
	free(t->fabric->gpu);
	free(t->fabric);
	t->fabric = NULL;
}

static const struct gb_fabric_gpu *fabric_gpu(const struct gb_table *t,
					      int id)
{
	const struct gb_fabric *fb = t->fabric;

	for (int i = 0; fb && i < fb->n; i++)
		if (fb->gpu[i].id == id)
			return &fb->gpu[i];
	return NULL;
}

const char *gb_fabric_desc(const struct gb_table *t, int id)
{
	const struct gb_fabric_gpu *g = fabric_gpu(t, id);

	return g ? g->desc : "";
}

/* What the task's GPUs say, decided once for env and warning. */
enum decision { DEC_NONE, DEC_CLIQUE, DEC_WARN };

static enum decision decide(const struct gb_table *t,
			    const struct gb_result *r, const char **clique,
			    char *why, size_t len)
{
	const struct gb_fabric_gpu *first = NULL;

	*clique = NULL;
	for (int i = 0; i < r->ngpus; i++) {
		const struct gb_fabric_gpu *g = fabric_gpu(t, r->gpus[i]);
		const struct gb_gpu *gg = &t->gpus[r->gpus[i]];

		/* The task's own GPUs only: a peer that visible=first|localid
		 * shows it says nothing about the task's own fabric. */
		if (!g || !gb_result_is_own(r, i))
			continue;
		if (g->state != FAB_COMPLETED) {
			(void) snprintf(why, len,
					"GPU %d (%s): the NVLink fabric is %s, not completed; GPUBIND_NVL_CLIQUE is not set and multi-node NVLink will not work until it completes",
					gg->nvml, gg->busid, state_names[g->state]);
			return DEC_WARN;
		}
		if (g->status) {
			(void) snprintf(why, len,
					"GPU %d (%s): the NVLink fabric is completed but its registration failed (NVML error %lu); GPUBIND_NVL_CLIQUE is not set",
					gg->nvml, gg->busid, g->status);
			return DEC_WARN;
		}
		if (g->health != FAB_HEALTHY && g->health != FAB_HEALTH_UNKNOWN) {
			(void) snprintf(why, len,
					"GPU %d (%s): the NVLink fabric is completed but %s; GPUBIND_NVL_CLIQUE is not set",
					gg->nvml, gg->busid, health_names[g->health]);
			return DEC_WARN;
		}
		if (first && strcmp(first->clique, g->clique)) {
			(void) snprintf(why, len,
					"the task's GPUs span NVLink cliques %s and %s; GPUBIND_NVL_CLIQUE is not set",
					first->clique, g->clique);
			return DEC_WARN;
		}
		if (!first)
			first = g;
	}
	if (!first)
		return DEC_NONE;
	*clique = first->clique;
	return DEC_CLIQUE;
}

int gb_fabric_env(const struct gb_table *t, const struct gb_result *r,
		  gb_env_set set, void *ctx)
{
	const char *clique;
	char why[8];

	if (!t->fabric || decide(t, r, &clique, why, sizeof(why)) != DEC_CLIQUE)
		return 0;
	return set(ctx, "GPUBIND_NVL_CLIQUE", clique, 1);
}

static int access_rw(const char *dev)
{
	return access(dev, R_OK | W_OK) ? errno : 0;
}

/* "channel" followed by digits only. */
static int is_channel(const char *name)
{
	const char *p = name + 7;

	if (strncmp(name, "channel", 7) || !*p)
		return 0;
	for (; *p; p++)
		if (*p < '0' || *p > '9')
			return 0;
	return 1;
}

/*
 * 0 when the task can open some channelN in dir; else an errno, with the
 * first channel it was denied (or dir when there is none) in dev. Reads
 * the directory with getdents64 into a stack buffer: no allocation.
 */
static int imex_channel(const char *dir, int (*can_open)(const char *),
			char *dev, size_t len)
{
	char buf[4096];
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), first = 0;
	long n;

	(void) snprintf(dev, len, "%s/channelN", dir);
	if (fd < 0)
		return errno ? errno : ENOENT;
	while ((n = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < n;) {
			struct dirent64 *d = (struct dirent64 *) (buf + off);
			char path[PATH_MAX];
			int e;

			off += d->d_reclen;
			if (!is_channel(d->d_name))
				continue;
			(void) snprintf(path, sizeof(path), "%s/%s", dir,
					d->d_name);
			if (!(e = can_open(path))) {
				close(fd);
				return 0;
			}
			if (!first) {
				size_t l = strlen(path);

				first = e;
				if (l >= len)
					l = len - 1;
				memcpy(dev, path, l);
				dev[l] = '\0';
			}
		}
	}
	close(fd);
	return first ? first : ENOENT;
}

int gb_fabric_warning(const struct gb_table *t, const struct gb_result *r,
		      int lid, int (*can_open)(const char *dev), char *buf,
		      size_t len)
{
	const char *clique;
	char why[512], dev[300];
	int e;

	if (!len)
		return 0;
	buf[0] = '\0';
	if (!t->fabric)
		return 0;
	switch (decide(t, r, &clique, why, sizeof(why))) {
	case DEC_NONE:
		return 0;
	case DEC_WARN:
		(void) snprintf(buf, len, "task %d: %s", lid, why);
		return 1;
	case DEC_CLIQUE:
		break;
	}
	if (!t->fabric->imex_dir[0])
		return 0;
	e = imex_channel(t->fabric->imex_dir, can_open ? can_open : access_rw,
			 dev, sizeof(dev));
	if (!e)
		return 0;
	if (e == ENOENT)
		(void) snprintf(buf, len,
				"task %d: its GPUs are in NVLink clique %s but there is no IMEX channel device (%s): CUDA will fail with CUDA_ERROR_NOT_PERMITTED on memory shared across nodes (Slurm's switch/nvidia_imex gives each job one)",
				lid, clique, dev);
	else
		(void) snprintf(buf, len,
				"task %d: its GPUs are in NVLink clique %s but it cannot open the IMEX channel %s (%s): CUDA will fail with CUDA_ERROR_NOT_PERMITTED on memory shared across nodes",
				lid, clique, dev, strerror(e));
	return 1;
}
