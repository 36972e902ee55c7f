/*
 * What the fuzzed front-end files need from the rest of the plugin, without
 * Slurm: the log calls (silent; the format is still checked by the
 * compiler through gpubind.h), the clock, and spank_getenv, which
 * request.c links against (no fuzz target reads the step environment).
 */
#include "gpubind.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

void gb_error(const char *fmt, ...) { (void) fmt; }
void gb_info(const char *fmt, ...) { (void) fmt; }
void gb_verbose(const char *fmt, ...) { (void) fmt; }
void gb_debug(const char *fmt, ...) { (void) fmt; }
void gb_spank_error(const char *call, const char *what, spank_err_t rc)
{
	(void) call; (void) what; (void) rc;
}

spank_err_t spank_getenv(spank_t sp, const char *var, char *buf, int len)
{
	(void) sp; (void) var; (void) buf; (void) len;
	return ESPANK_ENV_NOEXIST;
}

long gb_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}
