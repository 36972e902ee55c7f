/*
 * Builds the cgroup v2 device program (BPF_PROG_TYPE_CGROUP_DEVICE) of a
 * task, the way runc's devicefilter does: each instruction group below
 * carries the pseudo-C it implements, and jumps name a label that
 * resolve() turns into an offset, so no offset is counted by hand.
 *
 * Pure: no system calls, no globals. v2_bpf.c loads the result and
 * v2.c decides where it goes and what its tail call reaches (see the
 * comment at the top of v2.c for why the program is shaped so).
 *
 * The kernel calls the program with R1 = struct bpf_cgroup_dev_ctx *ctx
 * { u32 access_type (device type in the low 16 bits); u32 major; u32 minor }
 * and allows the access when it returns 1, denies it when it returns 0.
 */
#include "v2_prog.h"

#include <stddef.h>
#include <string.h>

#define INSN(c, d, s, o, i)                                              \
	((struct bpf_insn){.code = (c), .dst_reg = (d), .src_reg = (s),   \
			   .off = (o), .imm = (i)})
#define MOV64_REG(d, s) INSN(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV64_IMM(d, i) INSN(BPF_ALU64 | BPF_MOV | BPF_K, d, 0, 0, i)
#define ADD64_IMM(d, i) INSN(BPF_ALU64 | BPF_ADD | BPF_K, d, 0, 0, i)
#define AND32_IMM(d, i) INSN(BPF_ALU | BPF_AND | BPF_K, d, 0, 0, i)
#define LDX_W(d, s, o) INSN(BPF_LDX | BPF_W | BPF_MEM, d, s, o, 0)
#define STX_W(d, s, o) INSN(BPF_STX | BPF_W | BPF_MEM, d, s, o, 0)
/* A 64-bit immediate load is two instructions; this one names a map fd. */
#define LD_MAP_FD1(d, fd) INSN(BPF_LD | BPF_DW | BPF_IMM, d, BPF_PSEUDO_MAP_FD, 0, fd)
#define LD_MAP_FD2 INSN(0, 0, 0, 0, 0)
#define CALL(f) INSN(BPF_JMP | BPF_CALL, 0, 0, 0, f)
#define EXIT INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)

#define CTX_FIELD(f) ((short)offsetof(struct bpf_cgroup_dev_ctx, f))

static void init(struct gb_devprog *p)
{
	memset(p, 0, sizeof(*p));
}

static void emit(struct gb_devprog *p, struct bpf_insn insn)
{
	if (p->n >= GB_DEVPROG_MAX_INSNS) {
		p->bad = 1;
		return;
	}
	p->insn[p->n++] = insn;
}

/* if (reg OP imm) goto label; the offset is filled in by resolve(). */
static void jump_imm(struct gb_devprog *p, uint8_t op, uint8_t reg,
		     int32_t imm, const char *label)
{
	unsigned at = p->n;

	emit(p, INSN(BPF_JMP | op | BPF_K, reg, 0, 0, imm));
	if (at < GB_DEVPROG_MAX_INSNS)
		p->jump_to[at] = label;
}

/* name: the position of the next instruction. */
static void label(struct gb_devprog *p, const char *name)
{
	if (p->nlabel >= GB_DEVPROG_MAX_LABELS) {
		p->bad = 1;
		return;
	}
	p->label[p->nlabel].name = name;
	p->label[p->nlabel].at = p->n;
	p->nlabel++;
}

/* Every jump's offset from its label: target - (jump + 1). */
static int resolve(struct gb_devprog *p)
{
	for (unsigned i = 0; i < p->n && !p->bad; i++) {
		unsigned l;

		if (!p->jump_to[i])
			continue;
		for (l = 0; l < p->nlabel; l++)
			if (strcmp(p->label[l].name, p->jump_to[i]) == 0)
				break;
		if (l == p->nlabel || p->label[l].at <= i)
			p->bad = 1;  /* unknown, or backwards (a loop) */
		else
			p->insn[i].off = (short)(p->label[l].at - i - 1);
	}
	return p->bad ? -1 : 0;
}

int gb_devprog_task(struct gb_devprog *p, const struct gb_devprog_spec *s)
{
	init(p);
	/* r6 = ctx;  (callee-saved: survives the helper calls) */
	emit(p, MOV64_REG(BPF_REG_6, BPF_REG_1));

	/* if ((ctx->access_type & 0xffff) != BPF_DEVCG_DEV_CHAR) goto tail; */
	emit(p, LDX_W(BPF_REG_2, BPF_REG_6, CTX_FIELD(access_type)));
	emit(p, AND32_IMM(BPF_REG_2, 0xffff));
	jump_imm(p, BPF_JNE, BPF_REG_2, BPF_DEVCG_DEV_CHAR, "tail");

	/* if (ctx->major != major) goto tail; */
	emit(p, LDX_W(BPF_REG_3, BPF_REG_6, CTX_FIELD(major)));
	jump_imm(p, BPF_JNE, BPF_REG_3, (int32_t)s->major, "tail");

	/* if (ctx->minor > max_minor) goto tail; */
	emit(p, LDX_W(BPF_REG_4, BPF_REG_6, CTX_FIELD(minor)));
	jump_imm(p, BPF_JGT, BPF_REG_4, (int32_t)s->max_minor, "tail");

	/* u32 key = ctx->minor;  v = map_lookup_elem(minors_map, &key); */
	emit(p, STX_W(BPF_REG_10, BPF_REG_4, -4));
	emit(p, MOV64_REG(BPF_REG_2, BPF_REG_10));
	emit(p, ADD64_IMM(BPF_REG_2, -4));
	emit(p, LD_MAP_FD1(BPF_REG_1, s->minors_map));
	emit(p, LD_MAP_FD2);
	emit(p, CALL(BPF_FUNC_map_lookup_elem));

	/* if (v == NULL || *v == 0) goto deny;  (a GPU not allowed) */
	jump_imm(p, BPF_JEQ, BPF_REG_0, 0, "deny");
	emit(p, LDX_W(BPF_REG_0, BPF_REG_0, 0));
	jump_imm(p, BPF_JEQ, BPF_REG_0, 0, "deny");

	/* tail: tail_call(ctx, tail_map, 0);  (the previous program decides) */
	label(p, "tail");
	emit(p, MOV64_REG(BPF_REG_1, BPF_REG_6));
	emit(p, LD_MAP_FD1(BPF_REG_2, s->tail_map));
	emit(p, LD_MAP_FD2);
	emit(p, MOV64_IMM(BPF_REG_3, 0));
	emit(p, CALL(BPF_FUNC_tail_call));

	/* deny: return 0;  (also where the tail call fails: empty slot) */
	label(p, "deny");
	emit(p, MOV64_IMM(BPF_REG_0, 0));
	emit(p, EXIT);
	return resolve(p);
}

int gb_devprog_allow_all(struct gb_devprog *p)
{
	init(p);
	/* return 1; */
	emit(p, MOV64_IMM(BPF_REG_0, 1));
	emit(p, EXIT);
	return resolve(p);
}

unsigned gb_devprog_minors(const unsigned char *allow, uint32_t max_minor,
			   uint32_t *keys)
{
	unsigned n = 0;

	for (uint32_t m = 0; m <= max_minor; m++)
		if (allow[m])
			keys[n++] = m;
	return n;
}
