// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

/*
 * blocks.h: the block layer's USDT probes (usdt_block): what a thread
 * keeps between its hits, so that a hit asks the target filter and the
 * Python table only when they may have changed, and builds its record
 * where no other thread's hit can overwrite it.
 */

#ifndef VRAMPROF_BLOCKS_H
#define VRAMPROF_BLOCKS_H

#include "common.h"
#include "records.h"
#include "maps.h"
#include "stacks.h"
#include "python.h"
#include "usdt.h"

/*
 * The filter's epochs. A process leaves targets, or its py_procs entry is
 * added or removed, only with one of them bumped afterwards: user_epoch by
 * Go (probes/procs.go, filterEpoch: one writer), bpf_epoch here (a
 * target's exit). A thread's block_thread caches what targets and py_procs
 * said of its process with their sum read before it asked them, so a cache
 * older than any such change no longer matches.
 */
__u64 user_epoch = 0;
__u64 bpf_epoch = 0;

/*
 * block_thread: a traced thread's state at the block layer, in task local
 * storage (gone with the thread). r is its allocation record being built:
 * per thread, since a uprobe program can be preempted by another thread's
 * on the same CPU, which would overwrite a per-CPU one.
 */
struct block_thread {
	__u64 epoch;  /* user_epoch + bpf_epoch + 1 when traced and python were read; 0: never */
	__u32 python; /* py_procs describes its process's CPython */
	__u32 pad;
	struct record r;
};

struct {
	__uint(type, MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, MAP_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct block_thread);
} block_threads SEC(".maps");

/* filter_epoch is the sum of the epochs, as a cache holds it (never 0). */
static __always_inline __u64 filter_epoch(void)
{
	return *(volatile __u64 *)&user_epoch + *(volatile __u64 *)&bpf_epoch + 1;
}

/*
 * block_thread returns the calling thread's state when its process is
 * traced, 0 otherwise: from the cache while the epochs have not moved,
 * else asking targets (creating the state for a thread of a target) and
 * py_procs again. A thread that is not a target's gets no state.
 */
static __always_inline struct block_thread *block_thread(__u64 id)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct block_thread *bt = bpf_task_storage_get(&block_threads, task, 0, 0);
	__u64 epoch = filter_epoch();
	if (bt && bt->epoch == epoch)
		return bt;
	/* The epochs first, then the maps (x86: loads stay in order). */
	asm volatile("" ::: "memory");
	if (!traced(id)) {
		if (bt)
			bt->epoch = 0;
		return 0;
	}
	if (!bt)
		bt = bpf_task_storage_get(&block_threads, task, 0, LOCAL_STORAGE_GET_F_CREATE);
	if (!bt)
		return 0;
	__u32 tgid = id >> 32;
	bt->python = bpf_map_lookup_elem(&py_procs, &tgid) != 0;
	bt->epoch = epoch;
	return bt;
}

/*
 * An allocation site's stack window starts this far below the frame
 * pointer (never below sp): compilers keep a USDT argument they spilled in
 * the frame there (PyTorch 2.6's pytorch:malloc reads its stream at
 * -104(%rbp)), and the window then serves it with the frames above, in the
 * one read of user memory a hit makes.
 */
#define BLOCK_BELOW_FP 128

/* block_window reads the stack window of an allocation site. */
static __always_inline struct stack_window *block_window(struct pt_regs *ctx, __u64 id)
{
	__u64 fp = PT_REGS_FP(ctx), sp = PT_REGS_SP(ctx);
	__u64 base = fp - BLOCK_BELOW_FP;
	if (fp < sp + BLOCK_BELOW_FP)
		base = sp; /* a small frame, or rbp is not a frame pointer */
	return stack_window_read(id, base);
}

/* block_arg reads a USDT argument as usdt_value does, a stack slot from the
 * window sw when it holds it. */
static __always_inline __u64 block_arg(struct pt_regs *ctx, struct usdt_arg *a, struct stack_window *sw, __u64 id)
{
	if (a->kind != USDT_ARG_MEM)
		return usdt_value(ctx, a);
	__u64 v = 0;
	if (stack_read(sw, id, reg_value(ctx, a->reg_off) + a->val_off, &v, 1))
		v = 0;
	return usdt_extend(a, v);
}

#endif /* VRAMPROF_BLOCKS_H */
