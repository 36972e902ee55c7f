/*
 * Multi-node NVLink (GB200 NVL72) in the decision table: the "fabric" and
 * "imex" lines (PROTOCOL.md section 2) and the per-task fabric decision
 * (section 3): GPUBIND_NVL_CLIQUE for a task whose GPUs share one completed,
 * healthy clique; a warning naming the state otherwise; a warning naming
 * the device when such a task can open no IMEX channel. GPUs whose fabric
 * is not_supported (PCIe, HGX) have no line and get neither.
 *
 * Plain C beside the rule's other files (table.h), compiled with them into
 * the front end and the Go package rule: one copy of the decision. parse.c
 * hands it the lines, output.c asks it for the task's variables and mapping
 * line. Nothing here allocates after
 * gb_table_parse (the task child calls gb_fabric_env/gb_fabric_warning).
 */
#ifndef GPUBIND_FABRIC_H
#define GPUBIND_FABRIC_H

#include <stddef.h>

#include "table.h"

#define GB_IMEX_DIR "/dev/nvidia-caps-imex-channels"

/* "fabric ID STATE STATUS HEALTH CLUSTER_UUID CLIQUE_ID": 0, 1 malformed,
 * 2 out of memory. */
int gb_fabric_line(struct gb_table *t, char **f, int nf);
/* "imex DIR": where a task looks for IMEX channel devices (channelN). */
int gb_imex_line(struct gb_table *t, char **f, int nf);
/* After the last line: fabric lines name gpu lines. 0, or -1 with err set. */
int gb_fabric_validate(const struct gb_table *t, char *err, size_t errlen);
void gb_fabric_free(struct gb_table *t);

/* GPUBIND_NVL_CLIQUE=<cluster_uuid>.<clique_id> when the task's GPUs share
 * one usable clique; set's return otherwise 0. */
int gb_fabric_env(const struct gb_table *t, const struct gb_result *r,
		  gb_env_set set, void *ctx);

/* " fabric STATE[,HEALTH] clique UUID.ID" for GPU id's part of the
 * mapping line ("" for a GPU without a fabric line). */
const char *gb_fabric_desc(const struct gb_table *t, int id);

/*
 * The warning for task lid, if any, into buf (without "gpubind: warning: "):
 * its GPUs' fabric is not completed or not healthy (naming the state), they
 * span several cliques, or they share a clique but the task can open no IMEX
 * channel in the table's imex directory (naming the device). can_open as in
 * gb_result_restrict (NULL: access(2)). Returns 1 with a warning, 0 without.
 */
int gb_fabric_warning(const struct gb_table *t, const struct gb_result *r,
		      int lid, int (*can_open)(const char *dev), char *buf,
		      size_t len);

#endif
