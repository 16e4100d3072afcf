// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

/*
 * usdt.h: USDT argument specs (from probes/usdt) and their reading from
 * the registers and stack at a probe site; allocator specs use them too.
 */

#ifndef VRAMPROF_USDT_H
#define VRAMPROF_USDT_H

#include "common.h"
#include "bpf_tracing.h"

/* How a USDT argument is read (probes/usdt parses the note's spec). */
enum usdt_arg_kind {
	USDT_ARG_NONE = 0,
	USDT_ARG_CONST, /* value = val_off */
	USDT_ARG_REG,	/* value = the pt_regs field at reg_off */
	USDT_ARG_MEM,	/* value = *(register at reg_off + val_off) */
};

struct usdt_arg {
	__u64 val_off;	  /* the constant, or the memory operand's displacement */
	__u16 reg_off;	  /* byte offset of the register in struct pt_regs */
	__u8 kind;	  /* enum usdt_arg_kind */
	signed char size; /* bytes, negative when signed (the spec's SIZE) */
	__u32 pad;
};

#define USDT_MAX_ARGS 4

/* One USDT probe site's arguments, by spec id (cookie bits 32-63). */
struct usdt_spec {
	struct usdt_arg args[USDT_MAX_ARGS];
};
/* USDT argument specs, by spec id (filled from Go before attaching). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct usdt_spec);
} usdt_specs SEC(".maps");
/*
 * reg_value reads the pt_regs field at a byte offset. The common registers
 * are direct context loads (a helper call each would cost more than the
 * rest of the probe); anything else, such as %ah at an odd offset, goes
 * through bpf_probe_read_kernel.
 */
static __always_inline __u64 reg_value(struct pt_regs *ctx, __u16 off)
{
	switch (off) {
	case 0:
		return ctx->r15;
	case 8:
		return ctx->r14;
	case 16:
		return ctx->r13;
	case 24:
		return ctx->r12;
	case 32:
		return ctx->rbp;
	case 40:
		return ctx->rbx;
	case 48:
		return ctx->r11;
	case 56:
		return ctx->r10;
	case 64:
		return ctx->r9;
	case 72:
		return ctx->r8;
	case 80:
		return ctx->rax;
	case 88:
		return ctx->rcx;
	case 96:
		return ctx->rdx;
	case 104:
		return ctx->rsi;
	case 112:
		return ctx->rdi;
	case 152:
		return ctx->rsp;
	}
	__u64 v = 0;
	if (off <= sizeof(struct pt_regs) - 8)
		bpf_probe_read_kernel(&v, sizeof(v), (void *)ctx + off);
	return v;
}

/* usdt_extend sign- or zero-extends v, an argument's raw bytes, from its
 * size to 64 bits. */
static __always_inline __u64 usdt_extend(struct usdt_arg *a, __u64 v)
{
	int bytes = a->size < 0 ? -a->size : a->size;
	if (bytes <= 0 || bytes >= 8)
		return v;
	int shift = 64 - bytes * 8;
	if (a->size < 0)
		return (__u64)(((__s64)(v << shift)) >> shift);
	return (v << shift) >> shift;
}

/* usdt_value reads one USDT argument as its spec says, sign- or
 * zero-extended from its size to 64 bits. */
static __always_inline __u64 usdt_value(struct pt_regs *ctx, struct usdt_arg *a)
{
	__u64 v = 0;
	switch (a->kind) {
	case USDT_ARG_CONST:
		v = a->val_off;
		break;
	case USDT_ARG_REG:
		v = reg_value(ctx, a->reg_off);
		break;
	case USDT_ARG_MEM:
		bpf_probe_read_user(&v, sizeof(v), (void *)(reg_value(ctx, a->reg_off) + a->val_off));
		break;
	default:
		return 0;
	}
	return usdt_extend(a, v);
}

#endif /* VRAMPROF_USDT_H */
