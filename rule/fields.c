/*
 * The text forms the table, the front end and Go share (table.h): CPU lists,
 * the option's flag names, and gb_errf, the one "error into a caller's
 * buffer" helper. Plain C, no Slurm symbols; calls nothing of the rule's
 * other files.
 */
#include "table.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
