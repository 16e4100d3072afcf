// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

/*
 * specs.h: allocator specs (block layer): the state of spec_enter and
 * spec_return.
 */

#ifndef VRAMPROF_SPECS_H
#define VRAMPROF_SPECS_H

#include "common.h"
#include "records.h"
#include "maps.h"
#include "usdt.h"

/*
 * spec_enter and spec_return: the functions an allocator spec names
 * (probes/allocspec: XLA's BFC allocator, RMM's pools, user specs), read
 * as the spec says. Entry probes only: a pointer the function returns is
 * read by spec_return, a plain uprobe on each of the function's return
 * instructions (found by disassembly in Go), where rax is the result and
 * rsp points at the return address. Never a uretprobe: these are C++
 * functions, and an exception cannot unwind through a uretprobe's
 * trampoline (the process would terminate).
 *
 * Cookie: bits 0-15 API, 16-23 kind (alloc or free), 24-31 SPEC_F_*,
 * 32-63 the spec id in usdt_specs, whose args[0] is the pointer and
 * args[2] the size (the positions usdt_block reads; an argument is a
 * register, or a stack slot at entry for arg7 and up).
 *
 * A call in flight waits in spec_calls, one slot per thread, apart from
 * the threads map: a spec'd allocation must not change the nesting depth,
 * so a cuMemAlloc made inside BFCAllocator::AllocateRaw is an ordinary
 * segment allocation. The slot keeps rsp at entry and the return address
 * found there, and a return pairs only with the call whose rsp it sees.
 * Nesting (a spec'd alloc calling another, as tiny_alloc7 -> tiny_alloc):
 * the outermost call counts. An entry that finds the slot busy with a call
 * above it on the stack (a higher rsp) whose return address is still in
 * place is inside that call and is not recorded, and a return below the
 * slot's rsp is such an inner call's. A call that never reaches a return
 * instruction (an exception) is overwritten by the thread's next entry at
 * or above its rsp, or below it once its return address is gone.
 */
enum spec_flags {
	SPEC_F_AT_RETURN = 1 << 0, /* the pointer is the result: wait for spec_return */
};

/* The ret of a record whose spec'd allocation returned NULL: failed, with
 * the number cudaErrorMemoryAllocation has. */
#define SPEC_RET_FAILED 2

struct spec_call {
	__u64 sp; /* rsp at entry: at a return instruction it is the same */
	__u64 ra; /* the return address at sp, at entry */
	struct record r;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096); /* 2 KiB each: 8 MiB */
	__type(key, __u64);	   /* pid_tgid */
	__type(value, struct spec_call);
} spec_calls SEC(".maps");

/* Seeds new spec_calls slots (idle: its other bytes are never read). Entry-only
 * records are built in the thread's block_thread (blocks.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct spec_call);
} spec_scratch SEC(".maps");
/* spec_slot returns the thread's in-flight slot, creating it once. */
static __always_inline struct spec_call *spec_slot(__u64 id)
{
	struct spec_call *c = bpf_map_lookup_elem(&spec_calls, &id);
	if (c)
		return c;
	__u32 zero = 0;
	struct spec_call *init = bpf_map_lookup_elem(&spec_scratch, &zero);
	if (!init)
		return 0;
	init->r.kind = REC_IDLE;
	if (bpf_map_update_elem(&spec_calls, &id, init, BPF_ANY))
		return 0;
	return bpf_map_lookup_elem(&spec_calls, &id);
}

static __always_inline void spec_send(struct record *r)
{
	__u64 wake = r->flags & REC_F_WAKE ? BPF_RB_FORCE_WAKEUP : wakeup_flag();
	if (bpf_ringbuf_output(&events, r, record_size(r), wake))
		__sync_fetch_and_add(&lost, 1);
}

#endif /* VRAMPROF_SPECS_H */
