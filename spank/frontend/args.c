/*
 * plugstack.conf arguments (key=value; unknown keys and bad values are
 * errors naming them) and the precedence of the option sources.
 */
#include "gpubind.h"
#include "plancache.h"
#include "table.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The one owner of the plugstack settings and of the user's option: written
 * by slurm_spank_init (gb_config_load) and the option callback
 * (gb_user_option_set), read everywhere else through gb_config() and
 * gb_user_option().
 */
static struct gb_config conf;
static struct {
	int set;            /* --gpu-bind-topo was given */
	char value[GB_OPTION_MAX]; /* its value, "" for the bare option */
} user_option;

static int set_str(char *dst, size_t len, const char *key, const char *val,
		   int path, char *err, size_t errlen)
{
	if (strlen(val) >= len)
		return gb_errf(err, errlen, -1,
			       "plugstack argument %s= is longer than %zu bytes",
			       key, len - 1);
	if (strpbrk(val, "\n\r"))
		return gb_errf(err, errlen, -1,
			       "plugstack argument %s= holds a newline", key);
	if (path && val[0] != '/')
		return gb_errf(err, errlen, -1,
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

/* Whether the comma list holds item. */
static int list_has(const char *list, const char *item)
{
	size_t n = strlen(item);

	for (const char *p = list; *p; p += strcspn(p, ","), p += *p == ',')
		if (!strncmp(p, item, n) && (p[n] == ',' || !p[n]))
			return 1;
	return 0;
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
	return gb_errf(err, errlen, -1,
		       "plugstack argument %s=%s: expected allow, force or never",
		       key, val);
}

/* A decimal in lo..hi; expected says what, with the range, for the error. */
static int set_number(int *dst, const char *key, const char *val, long lo,
		      long hi, const char *expected, char *err, size_t errlen)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(val, &end, 10);
	if (errno || !*val || *end || v < lo || v > hi)
		return gb_errf(err, errlen, -1,
			       "plugstack argument %s=%s: expected %s", key, val,
			       expected);
	*dst = (int) v;
	return 0;
}

#define GB_STR_(x) #x
#define GB_STR(x) GB_STR_(x)
#define STR_FIELD(f) offsetof(struct gb_config, f), sizeof(((struct gb_config *) 0)->f)

/* The plugstack keys, in the order the "unknown argument" error lists them. */
static const struct key {
	const char *name;
	enum { K_STRING, K_PATH, K_MODE, K_DEFAULT_MODE, K_SOURCE, K_TIMEOUT,
	       K_FLAG, K_PLAN_CACHE, K_NICS, K_CONTAINERS } kind;
	size_t off, len;    /* K_STRING, K_PATH: the field of struct gb_config */
} keys[] = {
	{ "default", K_STRING, STR_FIELD(default_opt) },
	{ "mode", K_MODE, 0, 0 },
	{ "default_mode", K_DEFAULT_MODE, 0, 0 },
	{ "source", K_SOURCE, 0, 0 },
	{ "snapshot", K_PATH, STR_FIELD(snapshot) },
	{ "root", K_PATH, STR_FIELD(root) },
	{ "engine", K_PATH, STR_FIELD(engine) },
	{ "launcher", K_PATH, STR_FIELD(launcher) },
	{ "cache_dir", K_PATH, STR_FIELD(cache_dir) },
	{ "gres_conf", K_PATH, STR_FIELD(gres_conf) },
	{ "timeout", K_TIMEOUT, 0, 0 },
	{ "isolate", K_FLAG, 0, 0 },    /* flags the admin may force or forbid */
	{ "cpus", K_FLAG, 0, 0 },
	{ "uuid", K_FLAG, 0, 0 },
	{ "plan_cache", K_PLAN_CACHE, 0, 0 },
	{ "nics", K_NICS, STR_FIELD(nics) },
	{ "containers", K_CONTAINERS, 0, 0 },
};

#define NKEYS (sizeof(keys) / sizeof(keys[0]))

static int set_key(struct gb_config *c, const struct key *k, const char *val,
		   char *err, size_t errlen)
{
	switch (k->kind) {
	case K_STRING:
	case K_PATH:
		return set_str((char *) c + k->off, k->len, k->name, val,
			       k->kind == K_PATH, err, errlen);
	case K_MODE:
		if (strcmp(val, "enforce") && strcmp(val, "optional"))
			return gb_errf(err, errlen, -1,
				       "plugstack argument mode=%s: expected enforce or optional",
				       val);
		c->mode_optional = !strcmp(val, "optional");
		return 0;
	case K_DEFAULT_MODE:
		if (strcmp(val, "enforce") && strcmp(val, "optional"))
			return gb_errf(err, errlen, -1,
				       "plugstack argument default_mode=%s: expected optional (the default: a step that only default= binds runs as Slurm set it up when the plugin fails) or enforce",
				       val);
		c->default_enforce = !strcmp(val, "enforce");
		return 0;
	case K_SOURCE:
		if (strcmp(val, "auto") && strcmp(val, "nvml") &&
		    strcmp(val, "sysfs") && strcmp(val, "snapshot"))
			return gb_errf(err, errlen, -1,
				       "plugstack argument source=%s: expected auto, nvml, sysfs or snapshot",
				       val);
		strcpy(c->source, val);
		return 0;
	case K_TIMEOUT:
		return set_number(&c->timeout_ms, k->name, val, 1, 600000,
				  "milliseconds, 1..600000", err, errlen);
	case K_PLAN_CACHE:
		return set_number(&c->plan_cache, k->name, val, 0,
				  GB_PLANCACHE_MAX_ENTRIES,
				  "a number of entries, 0 (off).." GB_STR(GB_PLANCACHE_MAX_ENTRIES),
				  err, errlen);
	case K_FLAG:
		return set_tristate(c, k->name, val, err, errlen);
	case K_CONTAINERS:
		if (strcmp(val, "yes") && strcmp(val, "no"))
			return gb_errf(err, errlen, -1,
				       "plugstack argument containers=%s: expected yes (a container plugin such as pyxis is configured) or no",
				       val);
		c->containers = !strcmp(val, "yes");
		return 0;
	case K_NICS:
		/* RDMA device names, comma separated: mlx5_0,mlx5_3 */
		if (!*val || val[0] == ',' || val[strlen(val) - 1] == ',' ||
		    strstr(val, ",,") ||
		    strspn(val, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				"0123456789_.-,") != strlen(val))
			return gb_errf(err, errlen, -1,
				       "plugstack argument nics=%s: expected RDMA device names separated by commas, as in nics=mlx5_0,mlx5_3",
				       val);
		return set_str((char *) c + k->off, k->len, k->name, val, 0,
			       err, errlen);
	}
	return -1;
}

/* The key of arg ("key=value"), or NULL with err set. */
static const struct key *find_key(const char *arg, char *err, size_t errlen)
{
	const char *eq = strchr(arg, '=');
	char known[256] = "";

	if (!eq || eq == arg) {
		gb_errf(err, errlen, -1, "plugstack argument \"%s\": expected key=value",
			arg);
		return NULL;
	}
	for (size_t k = 0; k < NKEYS; k++)
		if ((size_t) (eq - arg) == strlen(keys[k].name) &&
		    !strncmp(arg, keys[k].name, eq - arg))
			return &keys[k];
	for (size_t k = 0; k < NKEYS; k++)
		(void) snprintf(known + strlen(known), sizeof(known) - strlen(known),
				"%s%s", k ? ", " : "", keys[k].name);
	gb_errf(err, errlen, -1, "unknown plugstack argument \"%s\" (known: %s)", arg,
		known);
	return NULL;
}

static int config_parse(int ac, char **av, struct gb_config *c, char *err,
			size_t errlen)
{
	int seen[NKEYS] = { 0 };

	memset(c, 0, sizeof(*c));
	strcpy(c->source, "auto");
	c->timeout_ms = GB_DEFAULT_TIMEOUT_MS;
	c->plan_cache = GB_PLANCACHE_DEFAULT_ENTRIES;

	for (int i = 0; i < ac; i++) {
		const struct key *k = find_key(av[i], err, errlen);

		if (!k)
			return -1;
		if (seen[k - keys]++)
			return gb_errf(err, errlen, -1,
				       "plugstack argument %s= given twice", k->name);
		if (set_key(c, k, strchr(av[i], '=') + 1, err, errlen))
			return -1;
	}
	/* containers=yes forces uuid (a container may number the GPUs anew),
	 * unless the admin forbids it or forces it already. */
	if (c->containers && !list_has(c->never, "uuid") &&
	    !list_has(c->force, "uuid") &&
	    add_list(c->force, sizeof(c->force), "uuid"))
		return gb_errf(err, errlen, -1, "plugstack: the force list is too long");
	if (!strcmp(c->source, "snapshot") && !c->snapshot[0])
		return gb_errf(err, errlen, -1,
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

	return config_parse(ac, av, &c, err, errlen);
}

int gb_config_load(int ac, char **av, char *err, size_t errlen)
{
	return config_parse(ac, av, &conf, err, errlen);
}

const struct gb_config *gb_config(void)
{
	return &conf;
}

const char *gb_cache_dir(void)
{
	return conf.cache_dir[0] ? conf.cache_dir : GB_DEFAULT_CACHE_DIR;
}

int gb_user_option_set(const char *optarg)
{
	if (optarg && strlen(optarg) >= sizeof(user_option.value))
		return -1;
	user_option.set = 1;
	(void) snprintf(user_option.value, sizeof(user_option.value), "%s",
			optarg ? optarg : "");
	return 0;
}

const char *gb_user_option(void)
{
	return user_option.set ? user_option.value : NULL;
}

int gb_option_is_off(const char *text)
{
	size_t l = strcspn(text, ",");

	return l == 3 && !strncmp(text, "off", 3);
}

int gb_effective_option(const char *env_value, char *buf, size_t len)
{
	const char *v;

	if (user_option.set)
		v = user_option.value[0] ? user_option.value : "closest";
	else if (env_value && *env_value)
		v = env_value;
	else if (conf.default_opt[0])
		v = conf.default_opt;
	else
		v = "off";
	if ((size_t) snprintf(buf, len, "%s", v) >= len)
		buf[len - 1] = '\0';
	return !gb_option_is_off(buf);
}
