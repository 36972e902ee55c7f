/*
 * libFuzzer target: the plugstack.conf arguments (args.c gb_config_load,
 * also `gpubind check`'s gpubind_check_args) and the option text after
 * precedence (gb_effective_option, gb_option_is_off), which holds the
 * user's --gpu-bind-topo or SLURM_GPU_BIND_TOPO. Input: arguments split at
 * newlines; the first line is also the user's option, the second the
 * environment's value.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpubind.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1), *av[64], err[1024], buf[1024];
	int ac = 0;

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	for (char *p = s, *nl; ac < 64; p = nl + 1) {
		av[ac++] = p;
		nl = strchr(p, '\n');
		if (!nl)
			break;
		*nl = '\0';
	}
	(void) gb_config_load(ac, av, err, sizeof(err));
	(void) gpubind_check_args(ac, av, err, sizeof(err));
	(void) gb_user_option_set(av[0]);
	(void) gb_effective_option(ac > 1 ? av[1] : NULL, buf, sizeof(buf));
	(void) gb_option_is_off(av[0]);
	free(s);
	return 0;
}
