/*
 * Logging with the fixed "gpubind: " prefix. Callers format into a local
 * buffer; Slurm only ever sees "%s", so user text is never a format.
 */
#include "gpubind.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#define GB_LOGBUF 4096

#define GB_FORMAT(buf, fmt)                                              \
	do {                                                             \
		va_list ap;                                              \
		va_start(ap, fmt);                                       \
		(void) vsnprintf(buf, sizeof(buf), fmt, ap);             \
		va_end(ap);                                              \
	} while (0)

/* gb_error, gb_info, gb_verbose, gb_debug: the prefix, then Slurm's level. */
#define GB_LOG_FUNCTION(name, slurm_fn)                                  \
	void name(const char *fmt, ...)                                  \
	{                                                                \
		char buf[GB_LOGBUF];                                     \
									 \
		GB_FORMAT(buf, fmt);                                     \
		slurm_fn("%s%s", GB_PREFIX, buf);                        \
	}

GB_LOG_FUNCTION(gb_error, slurm_error)
GB_LOG_FUNCTION(gb_info, slurm_info)
GB_LOG_FUNCTION(gb_verbose, slurm_verbose)
GB_LOG_FUNCTION(gb_debug, slurm_debug)

/* Set by gb_failed_for_default: the step's binding is the admin's default. */
static int for_default;

void gb_failed_for_default(void)
{
	for_default = 1;
}

int gb_failed(const char *what, const char *unbound, char *msg, size_t len)
{
	const struct gb_config *conf = gb_config();
	char buf[GB_LOGBUF];
	int enforce = !conf->mode_optional;
	const char *setting = "mode=optional";

	if (for_default) {
		/* What the admin forces fails the step as the admin asked. */
		enforce = conf->default_enforce || conf->force[0];
		setting = "default_mode=optional";
	}
	if (enforce)
		(void) snprintf(buf, sizeof(buf), "%s", what);
	else
		(void) snprintf(buf, sizeof(buf), "%s; %s (%s)", what, unbound,
				setting);
	gb_error("%s", buf);
	if (msg && len)
		(void) snprintf(msg, len, "%s", buf);
	return enforce ? -1 : 0;
}

void gb_spank_error(const char *call, const char *what, spank_err_t rc)
{
	slurm_error("%s%s(%s) failed: %s", GB_PREFIX, call, what,
		    spank_strerror(rc));
}

long gb_now_us(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts))
		return 0;
	return (long) ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}
