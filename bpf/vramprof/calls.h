// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

/*
 * calls.h: the CUDA allocation API (runtime and driver, device, pinned
 * host and virtual memory management calls): call_enter and call_return's
 * work. Arguments by the cookie's shape at entry, results at return, the
 * nesting depth that counts a driver call inside a runtime call once.
 */

#ifndef VRAMPROF_CALLS_H
#define VRAMPROF_CALLS_H

#include "common.h"
#include "bpf_tracing.h"
#include "records.h"
#include "maps.h"
#include "stacks.h"
#include "python.h"

static __always_inline int allocates(__u8 kind)
{
	return kind == REC_ALLOC || kind == REC_HOST_ALLOC || kind == REC_RESERVE || kind == REC_CREATE;
}

/* stacked reports whether a call gets the caller's native stack: every call
 * that gets or gives back memory. A free's stack names the site that releases
 * (an empty_cache-style cycle, a churn site), not only the one that
 * allocated. */
static __always_inline int stacked(__u8 kind)
{
	return kind >= REC_ALLOC && kind <= REC_RELEASE;
}

/*
 * Entries and returns pair by the stack pointer. call_enter runs at a
 * function's first instruction and call_return at each of its return
 * instructions (and at those of functions it tail-calls): rsp is the same
 * at both, the address of the call's return address. Nothing guarantees a
 * call reaches a return instruction: a C++ exception (or a longjmp)
 * unwinds through it, and its stack frame is simply gone. So the calls in
 * flight are checked against the stack at both ends:
 *
 *   at an entry at rsp sp, a call in flight is live, and the new one
 *   nested in it, when its own rsp is above sp (the stack grows down) and
 *   its return address is still in place there (ra_in_place, task.h:
 *   another tracer's uretprobe may have put its trampoline there); or at
 *   sp itself when it
 *   tail-calls a traced function (CALL_F_TAILS). Any other is over: it
 *   was abandoned (an exception went through it) and is dropped, and so
 *   is every call nested in it;
 *   at a return instruction at rsp sp, the call whose rsp is sp returns.
 *   Calls deeper than sp are over (dropped); a call above sp is live, and
 *   the return is not one of ours (a function a traced one tail-calls,
 *   returning from a call of its own).
 *
 * A call dropped sends nothing: it made nothing the process can use. A
 * thread's depth is the number of calls in flight; its since is cleared
 * when the last one is over.
 */

/* slot_of is the slot of the call at depth i: masked where the verifier sees
 * it (clang drops a mask it can prove redundant, and the verifier cannot). */
static __always_inline struct call *slot_of(struct thread_calls *tc, __u32 i)
{
	asm volatile("" : "+r"(i));
	return &tc->c[i & (MAX_DEPTH - 1)];
}

/*
 * unwind drops the thread's calls in flight that are over when the thread
 * is at rsp sp (at an entry: entry != 0, at sp itself too unless a tail
 * call; at a return: deeper than sp only), and returns the depth left. sw
 * is the thread's stack window at an entry. At a return, *live is the
 * call at the depth left, when it is still in flight: the one that returns
 * there when its sp is sp.
 */
static __always_inline __u32 unwind(struct thread_calls *tc, __u64 id, __u64 sp, int entry, struct stack_window *sw,
				    struct call **live)
{
	__u32 depth = tc->depth;
	if (depth > MAX_DEPTH)
		depth = MAX_DEPTH;
	for (int i = 0; i < MAX_DEPTH && depth > 0; i++) {
		struct call *c = slot_of(tc, depth - 1);
		if (c->r.kind != REC_IDLE) {
			if (!entry && c->sp >= sp) {
				if (live)
					*live = c;
				break; /* live, or this very call */
			}
			if (entry && (c->sp > sp || (c->sp == sp && (c->flags & CALL_F_TAILS))) &&
			    ra_in_place(sw, id, c->sp, c->ra))
				break; /* live: the new call is inside it */
			c->r.kind = REC_IDLE;
		}
		depth--;
	}
	tc->depth = depth;
	return depth;
}

/*
 * ctx_set: cuCtxSetCurrent(ctx), at its entry only (CALL_F_AT_ENTRY): the
 * thread's current context becomes ctx, and its device the one ctx was
 * learned to belong to (contexts: cuDevicePrimaryCtxRetain and
 * cuCtxCreate_v2 of this process), DEVICE_LOST for a context not learned
 * (NULL, which pops the thread's context stack; or one made before
 * tracing began). A record goes out only when that changes the thread's
 * context or device: a runtime that makes its context current around every
 * call makes records of no use to anyone. No return probe: the
 * call's result is not waited for. It fails only for a context the driver
 * does not know (a destroyed one, a bad handle, before cuInit), and none of
 * those is in contexts (ctx_drop forgets a destroyed one), so a failure
 * gives DEVICE_LOST (unknown, which the analysis infers from the address
 * ranges), never a wrong device; one nested in a cudaSetDevice is undone by
 * that call's failed return (send_return). The record is an entry's: its
 * time is the entry's, its return code 0, its duration 0.
 * depth: the thread's calls in flight (nested when not 0); th: its threads
 * entry at depth 0, whose since the caller clears after.
 */
static __always_inline void ctx_set(struct thread_calls *tc, struct thread *th, __u64 id, __u64 cx, __u32 depth,
				    __u64 cookie)
{
	struct ctx_key k = {.ctx = cx, .tgid = id >> 32};
	__s32 *d = bpf_map_lookup_elem(&contexts, &k);
	__s32 dev = d ? *d : DEVICE_LOST;
	if (cx == tc->ctx && dev == tc->device)
		return;
	tc->ctx = cx;
	tc->device = dev;
	struct record *r = bpf_ringbuf_reserve(&events, RECORD_HEADER_SIZE, 0);
	if (!r) {
		__sync_fetch_and_add(&lost, 1);
		return;
	}
	/* The effect-order watermark (threads in the contract header): at
	 * depth 0 the thread is in flight from before the record's time is
	 * read until the record is in the ring. */
	if (th && depth == 0)
		th->since = bpf_ktime_get_ns();
	fill_common(r, id, (__u8)(cookie >> 16));
	r->api = (__u16)cookie;
	r->shape = (__u8)(cookie >> 24);
	r->device = dev;
	if (depth > 0)
		r->flags = REC_F_NESTED;
	bpf_ringbuf_submit(r, wakeup_flag());
}

/*
 * ctx_drop: cuCtxDestroy_v2(ctx), at its entry only (CALL_F_AT_ENTRY):
 * the context is forgotten (contexts), so that a cuCtxSetCurrent of it,
 * which fails from now on, gives DEVICE_LOST (ctx_set). At the entry
 * rather than on success at the return: a handle the driver frees may come
 * back from another thread's cuCtxCreate_v2 before this call returns, and
 * is learned again at that call's return, after the entry; and the call
 * can report an earlier asynchronous launch's error and still destroy. A
 * destroy that fails without destroying (a handle that is no context; a
 * primary context, should the driver refuse it) costs at most an unknown
 * device at a later cuCtxSetCurrent of that handle, never a wrong one.
 * Destroying the calling thread's current context pops it off the
 * thread's context stack: what is current after it (the context under it,
 * pushed or made before tracing, or none) is not traced, so the thread's
 * device becomes DEVICE_LOST until its next set-device call. Other threads
 * keep it current: their calls on it fail. Nothing is sent. Primary
 * contexts are left alone: cuDevicePrimaryCtxRelease_v2 and
 * cuDevicePrimaryCtxReset_v2 deactivate one, but its handle stays the
 * device's primary context (the next cuDevicePrimaryCtxRetain gives it
 * back), so contexts stays true of it.
 */
static __always_inline void ctx_drop(struct thread_calls *tc, __u64 id, __u64 cx)
{
	struct ctx_key k = {.ctx = cx, .tgid = id >> 32};
	bpf_map_delete_elem(&contexts, &k);
	if (cx == tc->ctx) {
		tc->ctx = 0;
		tc->device = DEVICE_LOST;
	}
}

/*
 * call_enter: entry of every traced function. Records the arguments the
 * cookie's shape names into the thread's slot at its depth, and the user
 * stack for the outermost call that gets or releases memory (nested calls
 * share it), and the Python frames for one that gets memory. A call deeper
 * than MAX_DEPTH is not tracked: its return finds no call at its rsp.
 */
static __always_inline int do_call_enter(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	/* A thread with a call in flight is a target's: the filter is asked
	 * at its outermost calls only. */
	struct thread_calls *tc = thread_calls(0);
	struct thread *th = 0;
	if (!tc || tc->depth == 0) {
		th = thread_state(id);
		if (!th)
			return 0;
		if (!tc)
			tc = thread_calls(1);
		if (!tc) {
			__sync_fetch_and_add(&unpaired, 1);
			return 0;
		}
	}
	__u64 sp = PT_REGS_SP(ctx);
	/* The return address at sp, the caller's frame and an enclosing call's
	 * return address, in one read (see stacks.h). */
	struct stack_window *sw = stack_window_read(id, sp);
	__u32 depth = unwind(tc, id, sp, 1, sw, 0);
	if (depth >= MAX_DEPTH)
		return 0;
	if (depth == 0 && !th) {
		/* The calls in flight were over: this one is the outermost. */
		th = thread_state(id);
		if (!th)
			return 0;
	}

	__u64 cookie = bpf_get_attach_cookie(ctx);
	if ((cookie >> 32) & CALL_F_AT_ENTRY) {
		if ((__u8)(cookie >> 24) == SHAPE_CTX_DESTROY)
			ctx_drop(tc, id, PT_REGS_PARM1(ctx));
		else
			ctx_set(tc, th, id, PT_REGS_PARM1(ctx), depth, cookie);
		/* Outermost: nothing is in flight now (calls the unwind
		 * dropped send nothing). */
		if (th && depth == 0 && th->since)
			th->since = 0;
		return 0;
	}
	struct call *c = slot_of(tc, depth);
	tc->depth = depth + 1;
	struct record *r = &c->r;
	c->sp = sp;
	c->ra = 0;
	stack_read(sw, id, sp, &c->ra, 1);
	c->flags = cookie >> 32;
	fill_common(r, id, (__u8)(cookie >> 16));
	r->api = (__u16)cookie;
	r->shape = (__u8)(cookie >> 24);
	r->device = tc->device;
	if (depth > 0)
		r->flags = REC_F_NESTED;
	else if (th)
		th->since = r->time;

	__u64 a1 = PT_REGS_PARM1(ctx), a2 = PT_REGS_PARM2(ctx);
	switch (r->shape) {
	case SHAPE_OUT:
		r->addr = a1; /* the out-pointer, read at return */
		r->size = a2;
		break;
	case SHAPE_OUT_STREAM3:
		r->addr = a1;
		r->size = a2;
		r->stream = PT_REGS_PARM3(ctx);
		break;
	case SHAPE_OUT_STREAM4:
		r->addr = a1;
		r->size = a2;
		r->stream = PT_REGS_PARM4(ctx);
		break;
	case SHAPE_PITCH:
		/* Stash the pitch pointer in stream, the height in size and the
		 * width in duration (unused until the return): a failed call
		 * counts the request, width x height, its pitch being unknown. */
		r->addr = a1;
		r->stream = a2;
		r->size = PT_REGS_PARM4(ctx);
		r->duration = PT_REGS_PARM3(ctx);
		break;
	case SHAPE_3D: {
		/* cudaExtent {width, height, depth} is 24 bytes, passed in memory:
		 * just above the return address. Stash height x depth, and the
		 * width in duration (see SHAPE_PITCH). */
		__u64 ext[3] = {};
		bpf_probe_read_user(ext, sizeof(ext), (void *)(PT_REGS_SP(ctx) + 8));
		r->addr = a1;
		r->size = ext[1] * ext[2];
		r->duration = ext[0];
		break;
	}
	case SHAPE_CREATE: {
		/* CUmemAllocationProp.location.id: the device, at offset 12. */
		__s32 dev = -1;
		if (bpf_probe_read_user(&dev, sizeof(dev), (void *)(PT_REGS_PARM3(ctx) + 12)) == 0)
			r->device = dev;
		r->addr = a1;
		r->size = a2;
		break;
	}
	case SHAPE_PTR:
		r->addr = a1;
		break;
	case SHAPE_PTR_SIZE:
		r->addr = a1;
		r->size = a2;
		break;
	case SHAPE_PTR_STREAM:
		r->addr = a1;
		r->stream = a2;
		break;
	case SHAPE_MAP:
		r->addr = a1;
		r->size = a2;
		r->stream = PT_REGS_PARM4(ctx);
		break;
	case SHAPE_SET_DEVICE:
		/* The thread's context and device before the call, for its
		 * return: a cuCtxSetCurrent nested in it changes them at its
		 * entry. */
		r->device = (__s32)a1;
		r->stream = tc->ctx;
		r->size = (__u32)tc->device;
		break;
	case SHAPE_CTX_RETAIN:
		r->addr = a1;
		r->device = (__s32)a2;
		break;
	case SHAPE_CTX_CREATE:
		r->addr = a1;
		r->device = (__s32)PT_REGS_PARM3(ctx);
		break;
	}

	if (depth == 0 && stacked(r->kind)) {
		r->caller = c->ra;
		walk_user_stack(ctx, r, sw, id);
		/* Python frames where memory is got; a free's native stack
		 * names its release site, and walking Python there too would
		 * double the cost of a malloc/free pair. */
		if (allocates(r->kind) && py_new_stack(r, walk_python(r, id), id))
			r->flags |= REC_F_WAKE;
	}
	return 0;
}

/* read_out reads the u64 an out-pointer points to, 0 when unreadable. */
static __always_inline __u64 read_out(__u64 ptr)
{
	__u64 v = 0;
	if (ptr)
		bpf_probe_read_user(&v, sizeof(v), (void *)ptr);
	return v;
}

/*
 * call_return: at a return instruction, completes the call in flight whose
 * rsp it sees with the result and sends it (see "Entries and returns pair
 * by the stack pointer" above). Out-pointers are read only on success: on
 * failure they may be unset or garbage.
 */
static __always_inline void send_return(struct pt_regs *ctx, struct thread_calls *tc, __u64 id, struct record *r);

static __always_inline int do_call_return(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct thread_calls *tc = thread_calls(0);
	__u64 own = bpf_get_attach_cookie(ctx) & RET_F_OWN;
	if (!tc || tc->depth == 0) {
		/* Attached while this thread was inside the call. */
		if (own && traced(id))
			__sync_fetch_and_add(&unpaired, 1);
		return 0;
	}
	__u64 sp = PT_REGS_SP(ctx);
	struct call *c = 0;
	__u32 depth = unwind(tc, id, sp, 0, 0, &c);
	if (depth == 0) {
		clear_since(id);
		if (own)
			__sync_fetch_and_add(&unpaired, 1);
		return 0;
	}
	if (!c || c->sp != sp)
		return 0; /* a return inside the call in flight: not a traced call's */
	depth--;
	tc->depth = depth;
	send_return(ctx, tc, id, &c->r);
	/* After the record is in the ring (see threads in the contract header). */
	if (depth == 0)
		clear_since(id);
	return 0;
}

static __always_inline void send_return(struct pt_regs *ctx, struct thread_calls *tc, __u64 id, struct record *r)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 width = r->duration; /* pitched shapes stash it here at entry */
	r->duration = now - r->time;
	r->time = now;
	r->ret = (__s32)PT_REGS_RC(ctx);
	int ok = r->ret == 0;

	switch (r->shape) {
	case SHAPE_OUT:
	case SHAPE_OUT_STREAM3:
	case SHAPE_OUT_STREAM4:
	case SHAPE_CREATE:
		r->addr = ok ? read_out(r->addr) : 0;
		break;
	case SHAPE_PITCH:
		r->addr = ok ? read_out(r->addr) : 0;
		r->size = (ok ? read_out(r->stream) : width) * r->size;
		r->stream = 0;
		break;
	case SHAPE_3D: {
		/* cudaPitchedPtr {void *ptr; size_t pitch; ...} */
		__u64 pp[2] = {};
		if (ok)
			bpf_probe_read_user(pp, sizeof(pp), (void *)r->addr);
		r->addr = pp[0];
		r->size = (ok ? pp[1] : width) * r->size;
		break;
	}
	case SHAPE_SET_DEVICE: {
		__u64 was_ctx = r->stream;
		__s32 was = (__s32)r->size;
		r->stream = 0;
		r->size = 0;
		if (!ok) {
			/* The thread keeps what it had, whatever a nested
			 * cuCtxSetCurrent said at its entry; the failure is sent. */
			tc->ctx = was_ctx;
			tc->device = was;
			break;
		}
		tc->device = r->device;
		if (r->device == was) {
			/* Changes nothing: nothing to send (a device guard's
			 * cudaSetDevice around every allocation). */
			r->kind = REC_IDLE;
			return;
		}
		break;
	}
	case SHAPE_CTX_RETAIN:
	case SHAPE_CTX_CREATE: {
		/* Learn which device a context belongs to; nothing to send. A
		 * context cuCtxCreate_v2 makes is current to the thread from
		 * then on (pushed on its context stack). */
		if (ok) {
			struct ctx_key k = {.ctx = read_out(r->addr), .tgid = id >> 32};
			__s32 dev = r->device;
			bpf_map_update_elem(&contexts, &k, &dev, BPF_ANY);
			if (r->shape == SHAPE_CTX_CREATE) {
				tc->ctx = k.ctx;
				tc->device = dev;
			}
		}
		r->kind = REC_IDLE;
		return;
	}
	}

	__u64 wake = r->flags & REC_F_WAKE ? BPF_RB_FORCE_WAKEUP : wakeup_flag();
	if (bpf_ringbuf_output(&events, r, record_size(r), wake))
		__sync_fetch_and_add(&lost, 1);
	r->kind = REC_IDLE;
	return;
}

#endif /* VRAMPROF_CALLS_H */
