// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

/*
 * stacks.h: the native user stack of a call, by frame pointers.
 */

#ifndef VRAMPROF_STACKS_H
#define VRAMPROF_STACKS_H

#include "common.h"
#include "bpf_tracing.h"
#include "records.h"

/*
 * A stack window: STACK_WINDOW bytes of the calling thread's user stack from
 * sp, read with one helper call. One more bpf_probe_read_user in call_enter
 * costs ~70 ns on this project's reference kernel (6.18 in a nested VM,
 * per-program run time from BPF stats), the same for 8 bytes as for 512, to
 * the stack or to a map value. So a hit reads the stack once, where its
 * return address, its caller's frame and the return address of an enclosing
 * call in flight usually lie, and only what lies beyond the window costs a
 * read of its own.
 *
 * The window is per CPU, and a uprobe program can be preempted by another
 * thread's on the same CPU, which then fills the window with its own stack:
 * id names the thread whose stack it holds, set before the bytes are read,
 * and stack_u64 checks it after taking a value, so a value another thread's
 * hit may have overwritten is read again from user memory.
 */
#define STACK_WINDOW 512

struct stack_window {
	__u64 id;   /* pid_tgid of the thread whose stack w holds */
	__u64 base; /* user address of w[0]; 0: nothing usable */
	__u64 w[STACK_WINDOW / 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_window);
} stack_windows SEC(".maps");

/* stack_window_read reads the window at sp for thread id; 0 when there is no
 * window (every read then goes to user memory). */
static __always_inline struct stack_window *stack_window_read(__u64 id, __u64 sp)
{
	__u32 zero = 0;
	struct stack_window *sw = bpf_map_lookup_elem(&stack_windows, &zero);
	if (!sw)
		return 0;
	sw->id = id;
	sw->base = 0;
	if (sp && !bpf_probe_read_user(sw->w, sizeof(sw->w), (void *)sp))
		sw->base = sp;
	return sw;
}

/* stack_read reads n u64 (1 or 2, a constant) at user address addr of thread
 * id's stack into out: from the window when it holds them, else with one read
 * of user memory. Non-zero when unreadable. */
static __always_inline long stack_read(struct stack_window *sw, __u64 id, __u64 addr, __u64 *out, __u32 n)
{
	if (sw) {
		__u64 base = sw->base, off = addr - base;
		if (base && addr >= base && off <= STACK_WINDOW - 8 * n && !(off & 7)) {
			__u32 i = off / 8;
			out[0] = sw->w[i & (STACK_WINDOW / 8 - 1)];
			if (n > 1)
				out[1] = sw->w[(i + 1) & (STACK_WINDOW / 8 - 1)];
			if (*(volatile __u64 *)&sw->id == id)
				return 0;
		}
	}
	return bpf_probe_read_user(out, 8 * n, (void *)addr);
}

/*
 * walk_user_stack records the user stack by frame pointers: stack[0] is the
 * probed function (ip), then the return address of each frame up the rbp
 * chain, those in the window sw (thread id's, read at this hit) taken from
 * it. bpf_get_stack(BPF_F_USER_STACK) gives the same frames, but on this
 * project's reference kernel (6.18) it cost ~900 ns for a 4-frame stack
 * against ~50 ns for this loop (per-program run time from BPF stats), and
 * the whole allocation probe must stay near the bare uprobe cost.
 * The walk stops at a NULL or unreadable frame, a zero return address, or a
 * frame pointer that does not move up the stack (a corrupt chain).
 */
static __always_inline void walk_user_stack(struct pt_regs *ctx, struct record *r, struct stack_window *sw, __u64 id)
{
	r->stack[0] = PT_REGS_IP(ctx);
	__u64 fp = PT_REGS_FP(ctx);
	__u32 n = 1;
	for (int i = 1; i < MAX_FRAMES; i++) {
		__u64 frame[2];
		if (!fp || stack_read(sw, id, fp, frame, 2))
			break;
		if (!frame[1])
			break;
		r->stack[i] = frame[1];
		n = i + 1;
		if (frame[0] <= fp)
			break;
		fp = frame[0];
	}
	r->nframes = n;
}

#endif /* VRAMPROF_STACKS_H */
