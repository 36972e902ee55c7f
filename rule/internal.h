/*
 * What the rule's C files (the .c files of rule/) share and nothing
 * outside them uses.
 * Not a public header: the front end and the Go side include table.h.
 */
#ifndef GPUBIND_RULE_INTERNAL_H
#define GPUBIND_RULE_INTERNAL_H

#include <errno.h>
#include <stdlib.h>

/*
 * A strict decimal integer (the whole of s, sign allowed) in [lo, hi] into
 * *out: 0, or -1. Static inline, so that each file of the rule has its own
 * and none calls another for it.
 */
static inline int parse_int(const char *s, long lo, long hi, long *out)
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

#endif
