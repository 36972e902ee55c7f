/*
 * plugstack.conf arguments (key=value; unknown keys and bad values are
 * errors naming them) and the precedence of the option sources.
 */
#include "gpubind.h"
#include "plancache.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gb_config gb_conf;

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	(void) vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

static int set_str(char *dst, size_t len, const char *key, const char *val,
		   int path, char *err, size_t errlen)
{
	if (strlen(val) >= len)
		return fail(err, errlen,
			    "plugstack argument %s= is longer than %zu bytes",
			    key, len - 1);
	if (strpbrk(val, "\n\r"))
		return fail(err, errlen,
			    "plugstack argument %s= holds a newline", key);
	if (path && val[0] != '/')
		return fail(err, errlen,
			    "plugstack argument %s=%s: expected an absolute path",
			    key, val);
	strcpy(dst, val);
	return 0;
}

static int add_list(char *list, size_t len, const char *item)
{
	size_t l = strlen(list);
	int n = snprintf(list + l, len - l, "%s%s", l ? "," : "", item);

	return (n < 0 || (size_t) n >= len - l) ? -1 : 0;
}

static int set_tristate(struct gb_config *c, const char *key, const char *val,
			char *err, size_t errlen)
{
	if (!strcmp(val, "allow"))
		return 0;
	if (!strcmp(val, "force"))
		return add_list(c->force, sizeof(c->force), key);
	if (!strcmp(val, "never"))
		return add_list(c->never, sizeof(c->never), key);
	return fail(err, errlen,
		    "plugstack argument %s=%s: expected allow, force or never",
		    key, val);
}

int gb_config_parse(int ac, char **av, struct gb_config *c, char *err,
		    size_t errlen)
{
	static const char *keys[] = { "default", "mode", "source", "snapshot",
				      "root", "engine", "cache_dir",
				      "gres_conf", "timeout", "isolate",
				      "cpus", "plan_cache" };
	int seen[sizeof(keys) / sizeof(keys[0])] = { 0 };

	memset(c, 0, sizeof(*c));
	strcpy(c->source, "auto");
	c->timeout_ms = GB_DEFAULT_TIMEOUT_MS;
	c->plan_cache = GB_PLANCACHE_DEFAULT_ENTRIES;

	for (int i = 0; i < ac; i++) {
		const char *arg = av[i], *eq = strchr(arg, '=');
		const char *val;
		size_t kl, k;
		char key[32];

		if (!eq || eq == arg)
			return fail(err, errlen,
				    "plugstack argument \"%s\": expected key=value",
				    arg);
		kl = eq - arg;
		val = eq + 1;
		if (kl >= sizeof(key))
			kl = sizeof(key) - 1;
		memcpy(key, arg, kl);
		key[kl] = '\0';
		for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
			if ((size_t) (eq - arg) == strlen(keys[k]) &&
			    !strncmp(arg, keys[k], eq - arg))
				break;
		if (k == sizeof(keys) / sizeof(keys[0]))
			return fail(err, errlen,
				    "unknown plugstack argument \"%s\" (known: default, mode, source, snapshot, root, engine, cache_dir, gres_conf, timeout, isolate, cpus, plan_cache)",
				    arg);
		if (seen[k]++)
			return fail(err, errlen,
				    "plugstack argument %s= given twice", key);

		if (!strcmp(key, "default")) {
			if (set_str(c->default_opt, sizeof(c->default_opt),
				    key, val, 0, err, errlen))
				return -1;
		} else if (!strcmp(key, "mode")) {
			if (!strcmp(val, "enforce"))
				c->mode_optional = 0;
			else if (!strcmp(val, "optional"))
				c->mode_optional = 1;
			else
				return fail(err, errlen,
					    "plugstack argument mode=%s: expected enforce or optional",
					    val);
		} else if (!strcmp(key, "source")) {
			if (strcmp(val, "auto") && strcmp(val, "nvml") &&
			    strcmp(val, "sysfs") && strcmp(val, "snapshot"))
				return fail(err, errlen,
					    "plugstack argument source=%s: expected auto, nvml, sysfs or snapshot",
					    val);
			strcpy(c->source, val);
		} else if (!strcmp(key, "snapshot")) {
			if (set_str(c->snapshot, sizeof(c->snapshot), key, val,
				    1, err, errlen))
				return -1;
		} else if (!strcmp(key, "root")) {
			if (set_str(c->root, sizeof(c->root), key, val, 1, err,
				    errlen))
				return -1;
		} else if (!strcmp(key, "engine")) {
			if (set_str(c->engine, sizeof(c->engine), key, val, 1,
				    err, errlen))
				return -1;
		} else if (!strcmp(key, "cache_dir")) {
			if (set_str(c->cache_dir, sizeof(c->cache_dir), key,
				    val, 1, err, errlen))
				return -1;
		} else if (!strcmp(key, "gres_conf")) {
			if (set_str(c->gres_conf, sizeof(c->gres_conf), key,
				    val, 1, err, errlen))
				return -1;
		} else if (!strcmp(key, "timeout")) {
			char *end;
			long v;

			errno = 0;
			v = strtol(val, &end, 10);
			if (errno || !*val || *end || v < 1 || v > 600000)
				return fail(err, errlen,
					    "plugstack argument timeout=%s: expected milliseconds, 1..600000",
					    val);
			c->timeout_ms = (int) v;
		} else if (!strcmp(key, "plan_cache")) {
			char *end;
			long v;

			errno = 0;
			v = strtol(val, &end, 10);
			if (errno || !*val || *end || v < 0 ||
			    v > GB_PLANCACHE_MAX_ENTRIES)
				return fail(err, errlen,
					    "plugstack argument plan_cache=%s: expected a number of entries, 0 (off)..%d",
					    val, GB_PLANCACHE_MAX_ENTRIES);
			c->plan_cache = (int) v;
		} else if (set_tristate(c, key, val, err, errlen)) {
			return -1;
		}
	}
	if (!strcmp(c->source, "snapshot") && !c->snapshot[0])
		return fail(err, errlen,
			    "plugstack argument source=snapshot needs snapshot=FILE");
	return 0;
}

/*
 * For `gpubind check`: the parser above on an admin's plugstack arguments,
 * so the CLI judges them exactly as this build of the plugin will. Pure C, no
 * Slurm call: the CLI dlopens the installed plugin outside Slurm.
 */
int gpubind_check_args(int ac, char **av, char *err, size_t errlen)
{
	struct gb_config c;

	return gb_config_parse(ac, av, &c, err, errlen);
}

int gb_option_is_off(const char *text)
{
	size_t l = strcspn(text, ",");

	return l == 3 && !strncmp(text, "off", 3);
}

int gb_effective_option(const char *env_value, char *buf, size_t len)
{
	const char *v;

	if (gb_opt_set)
		v = gb_opt_value[0] ? gb_opt_value : "closest";
	else if (env_value && *env_value)
		v = env_value;
	else if (gb_conf.default_opt[0])
		v = gb_conf.default_opt;
	else
		v = "off";
	if ((size_t) snprintf(buf, len, "%s", v) >= len)
		buf[len - 1] = '\0';
	return !gb_option_is_off(buf);
}
