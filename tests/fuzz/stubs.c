/*
 * What the fuzzed front-end files need from the rest of the plugin, without
 * Slurm: the log calls (silent; the format is still checked by the
 * compiler through gpubind.h) and the clock.
 */
#include "gpubind.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

void gb_error(const char *fmt, ...) { (void) fmt; }
void gb_info(const char *fmt, ...) { (void) fmt; }
void gb_verbose(const char *fmt, ...) { (void) fmt; }
void gb_debug(const char *fmt, ...) { (void) fmt; }

long gb_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}
