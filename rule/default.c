/*
 * The admin's default= on a step (table.h, docs/admin.md "default="): what
 * the step's environment alone decides (gb_default_decide), before any
 * table exists, and the option a default binding plans with
 * (gb_default_option). Plain C, no Slurm symbols, no allocation.
 */
#include "table.h"
#include "internal.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

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
