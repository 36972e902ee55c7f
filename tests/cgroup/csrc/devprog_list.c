/*
 * devprog_list: prints the cgroup v2 device programs that
 * spank/frontend/cgroup/v2_prog.c builds, as a listing in the kernel
 * verifier's notation with the builder's labels, for the golden test in
 * tests/cgroup/devprog_test.go. Needs no kernel and no root.
 *
 *   devprog_list task MAJOR MAX_MINOR MINORS_FD TAIL_FD   the task program
 *   devprog_list allow                                    the allow-all one
 *   devprog_list minors MAX_MINOR [M,M,...]   the minors map entries for an
 *                                             allowed set (minors above
 *                                             MAX_MINOR are dropped)
 */
#include "v2_prog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *size_name(unsigned code)
{
	switch (BPF_SIZE(code)) {
	case BPF_B: return "u8";
	case BPF_H: return "u16";
	case BPF_W: return "u32";
	default: return "u64";
	}
}

static const char *alu_op(unsigned code)
{
	switch (BPF_OP(code)) {
	case BPF_ADD: return "+=";
	case BPF_SUB: return "-=";
	case BPF_MUL: return "*=";
	case BPF_DIV: return "/=";
	case BPF_OR: return "|=";
	case BPF_AND: return "&=";
	case BPF_LSH: return "<<=";
	case BPF_RSH: return ">>=";
	case BPF_MOV: return "=";
	default: return "?=";
	}
}

static const char *jmp_op(unsigned code)
{
	switch (BPF_OP(code)) {
	case BPF_JEQ: return "==";
	case BPF_JNE: return "!=";
	case BPF_JGT: return ">";
	case BPF_JGE: return ">=";
	case BPF_JLT: return "<";
	case BPF_JLE: return "<=";
	case BPF_JSET: return "&";
	default: return "?";
	}
}

static const char *helper(int id)
{
	switch (id) {
	case BPF_FUNC_map_lookup_elem: return "map_lookup_elem";
	case BPF_FUNC_tail_call: return "tail_call";
	default: return "unknown";
	}
}

/* One instruction; returns how many slots it takes (2 for a 64-bit load). */
static unsigned print_insn(const struct gb_devprog *p, unsigned i)
{
	const struct bpf_insn *in = &p->insn[i];
	unsigned code = in->code, cls = BPF_CLASS(code);
	char reg = cls == BPF_ALU ? 'w' : 'r';

	printf("%4u: (%02x) ", i, code);
	if (cls == BPF_ALU || cls == BPF_ALU64) {
		if (BPF_SRC(code) == BPF_X)
			printf("%c%u %s %c%u\n", reg, in->dst_reg, alu_op(code),
			       reg, in->src_reg);
		else
			printf("%c%u %s %d\n", reg, in->dst_reg, alu_op(code),
			       in->imm);
	} else if (cls == BPF_LDX && BPF_MODE(code) == BPF_MEM) {
		printf("r%u = *(%s *)(r%u %+d)\n", in->dst_reg, size_name(code),
		       in->src_reg, in->off);
	} else if (cls == BPF_STX && BPF_MODE(code) == BPF_MEM) {
		printf("*(%s *)(r%u %+d) = r%u\n", size_name(code), in->dst_reg,
		       in->off, in->src_reg);
	} else if (code == (BPF_LD | BPF_DW | BPF_IMM) && i + 1 < p->n) {
		if (in->src_reg == BPF_PSEUDO_MAP_FD)
			printf("r%u = map_fd(%d)\n", in->dst_reg, in->imm);
		else
			printf("r%u = %#llx\n", in->dst_reg,
			       (unsigned long long)(uint32_t)in->imm |
				       (unsigned long long)(uint32_t)p->insn[i + 1].imm << 32);
		return 2;
	} else if (code == (BPF_JMP | BPF_CALL)) {
		printf("call %s#%d\n", helper(in->imm), in->imm);
	} else if (code == (BPF_JMP | BPF_EXIT)) {
		printf("exit\n");
	} else if (cls == BPF_JMP && BPF_OP(code) == BPF_JA) {
		printf("goto pc%+d%s%s\n", in->off, p->jump_to[i] ? "  -> " : "",
		       p->jump_to[i] ? p->jump_to[i] : "");
	} else if (cls == BPF_JMP) {
		printf("if r%u %s %d goto pc%+d%s%s\n", in->dst_reg, jmp_op(code),
		       in->imm, in->off, p->jump_to[i] ? "  -> " : "",
		       p->jump_to[i] ? p->jump_to[i] : "");
	} else {
		printf("unknown dst=r%u src=r%u off=%d imm=%d\n", in->dst_reg,
		       in->src_reg, in->off, in->imm);
	}
	return 1;
}

static void print_prog(const struct gb_devprog *p)
{
	printf("; %u instructions\n", p->n);
	for (unsigned i = 0; i < p->n;) {
		for (unsigned l = 0; l < p->nlabel; l++)
			if (p->label[l].at == i)
				printf("%s:\n", p->label[l].name);
		i += print_insn(p, i);
	}
}

static int list_minors(int argc, char **argv)
{
	uint32_t max = (uint32_t)strtoul(argv[2], NULL, 10), keys[1024];
	unsigned char allow[1024];
	char *s = argc > 3 ? argv[3] : "", *end;
	unsigned n;

	if (max >= sizeof(allow))
		return 2;
	memset(allow, 0, sizeof(allow));
	while (*s) {
		unsigned long m = strtoul(s, &end, 10);

		if (end == s || m >= sizeof(allow))
			return 2;
		allow[m] = 1;
		s = *end == ',' ? end + 1 : end;
	}
	n = gb_devprog_minors(allow, max, keys);
	printf("; minors map: %u entr%s set to 1\n", n, n == 1 ? "y" : "ies");
	for (unsigned i = 0; i < n; i++)
		printf("minors[%u] = 1\n", keys[i]);
	return 0;
}

int main(int argc, char **argv)
{
	struct gb_devprog p;
	int rc;

	if (argc == 6 && strcmp(argv[1], "task") == 0) {
		struct gb_devprog_spec s = {
			.major = (uint32_t)strtoul(argv[2], NULL, 10),
			.max_minor = (uint32_t)strtoul(argv[3], NULL, 10),
			.minors_map = atoi(argv[4]),
			.tail_map = atoi(argv[5]),
		};
		rc = gb_devprog_task(&p, &s);
	} else if (argc == 2 && strcmp(argv[1], "allow") == 0) {
		rc = gb_devprog_allow_all(&p);
	} else if ((argc == 3 || argc == 4) && strcmp(argv[1], "minors") == 0) {
		return list_minors(argc, argv);
	} else {
		fprintf(stderr, "usage: devprog_list task MAJOR MAX_MINOR MINORS_FD "
				"TAIL_FD | allow | minors MAX_MINOR [M,M...]\n");
		return 2;
	}
	if (rc) {
		fprintf(stderr, "devprog_list: the builder failed (bad=%d)\n", p.bad);
		return 1;
	}
	print_prog(&p);
	return 0;
}
