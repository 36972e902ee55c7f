/*
 * The cgroup v2 device program as data (v2_prog.c): built by a pure
 * function, no system calls, so tests can list it without a kernel
 * (tests/cgroup/csrc/devprog_list.c, the golden files in tests/cgroup/testdata).
 * Loading it is v2_bpf.c's; choosing where it goes is v2.c's.
 */
#ifndef GPUBIND_CGROUP_V2_PROG_H
#define GPUBIND_CGROUP_V2_PROG_H

#include <linux/bpf.h>
#include <stdint.h>

#define GB_DEVPROG_MAX_INSNS 32
#define GB_DEVPROG_MAX_LABELS 4

/* A built program: instructions, and the labels its jumps were resolved to. */
struct gb_devprog {
	struct bpf_insn insn[GB_DEVPROG_MAX_INSNS];
	unsigned n;
	/* Per instruction: the label a jump goes to (NULL: not a jump). */
	const char *jump_to[GB_DEVPROG_MAX_INSNS];
	struct {
		const char *name;
		unsigned at;  /* index of the instruction that follows it */
	} label[GB_DEVPROG_MAX_LABELS];
	unsigned nlabel;
	int bad;  /* too many instructions or labels, or an unknown label */
};

/*
 * The devices a task's program guards: character devices major:0..max_minor.
 * Inside that range a minor is allowed only if minors_map[minor] != 0 (an
 * array map, filled from the task's allowed set by gb_devprog_minors);
 * everything else goes to tail_map[0], the program that was in force before.
 */
struct gb_devprog_spec {
	uint32_t major;
	uint32_t max_minor;
	int minors_map;  /* map fd: BPF_MAP_TYPE_ARRAY, u32 minor -> u32 allowed */
	int tail_map;    /* map fd: BPF_MAP_TYPE_PROG_ARRAY, one slot */
};

/* The task's program. 0, or -1 when it does not fit (a bug: p->bad says). */
int gb_devprog_task(struct gb_devprog *p, const struct gb_devprog_spec *s);
/* "Allow everything": the tail-call target where nothing was in force. */
int gb_devprog_allow_all(struct gb_devprog *p);
/*
 * The minors map entries for an allowed set: keys[i] is set to 1 for each
 * minor m <= max_minor with allow[m] != 0, in increasing order. Returns the
 * number of keys (at most max_minor + 1).
 */
unsigned gb_devprog_minors(const unsigned char *allow, uint32_t max_minor,
			   uint32_t *keys);

#endif
