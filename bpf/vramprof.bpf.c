// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * vramprof: uprobes on the CUDA allocation API (runtime and driver).
 *
 * Contract with probes/ (Go). Change both sides together; probes/record.go
 * decodes exactly this layout and its tests pin the offsets.
 *
 *   record (little-endian, 72-byte header, then nframes x u64 user stack):
 *     0  u64 time      ns, bpf_ktime_get_ns (CLOCK_MONOTONIC): the return
 *                      time of a call, when its result exists
 *     8  u64 duration  ns from entry to return
 *    16  u64 addr      pointer returned or released; for create/release the
 *                      allocation handle; for fork the parent's tgid; for
 *                      a loader or exec record with REC_F_STOPPED, the
 *                      stop's sequence number (the stopped map's key); for exit the
 *                      wait(2) status (code << 8 or signal)
 *    24  u64 size      bytes (pitched: pitch x height [x depth]; a failed
 *                      pitched call: the request, width x height [x depth])
 *    32  u64 stream    CUDA stream; for a map, the allocation handle mapped
 *    40  u32 pid       tgid (for fork: the child's)
 *    44  u32 tid
 *    48  s32 ret       the call's return code
 *    52  s32 device    -1: unknown
 *    56  u16 api       event.API, from the attach cookie
 *    58  u8  kind      event.Kind, from the attach cookie; REC_LOADER and
 *                      REC_FORK are BPF-only
 *    59  u8  flags     REC_F_* (vramprof/records.h)
 *    60  u16 nframes   user frames that follow, at most MAX_FRAMES
 *    62  u8  shape     SHAPE_* (how arguments were read; Go ignores it)
 *    63  u8  npy       Python frames that follow the user frames, at most
 *                      MAX_PY_FRAMES
 *    64  u64 caller    *(u64 *)sp at entry: the return address into the
 *                      direct caller, which a frame-pointer walk started at a
 *                      function's first instruction skips (rbp still belongs
 *                      to the caller). Go inserts it when missing.
 *    72  u64 stack[nframes]  leaf first; stack[0] is the probed function,
 *                      the rest return addresses up the frame-pointer chain
 *        then npy x {u64 code, u64 instr}: the calling thread's CPython
 *                      frames, innermost first: the code object pointer as
 *                      the frame holds it, and the frame's instruction field
 *                      (low 56 bits) with the byte at the layout's owner
 *                      offset (top 8 bits). probes/python interprets both.
 *
 * Cookie (set per attach point from Go, probes/apis.go):
 *   call_enter: bits 0-15 event.API, bits 16-23 event.Kind, bits 24-31
 *   SHAPE_*, bits 32-63 CALL_F_*. call_return: RET_F_*.
 *   usdt_block: bits 32-63 the spec id; spec_enter and spec_return: bits
 *   24-31 SPEC_F_*, 32-63 the spec id (see vramprof/specs.h).
 * Every traced function gets call_enter at its entry and call_return at
 * each of its return instructions (and at those of the functions it
 * tail-calls), all plain uprobes: never a uretprobe, whose trampoline a
 * C++ exception cannot unwind through and whose return path on 6.11+ is a
 * system call strict seccomp profiles refuse. Returns give the result and
 * the return code, and keep the per-thread nesting depth, so a driver call
 * made inside a runtime call (cudaMalloc -> cuMemAlloc_v2) is flagged
 * REC_F_NESTED and counted once. Entry and return pair by rsp (calls.h),
 * so a call an exception unwound through is dropped, not left in flight.
 * The exception: a function attached with CALL_F_AT_ENTRY (cuCtxSetCurrent)
 * gets call_enter only, which does its work there, takes no slot and sends
 * a record only when the call changes the thread's context or device
 * (calls.h, ctx_set); a cudaSetDevice that changes neither is not sent
 * either (its failures are).
 *
 * Maps:
 *   events   ring buffer, sized from Go (default 16 MiB). Records go without
 *            a wakeup until wakeup_bytes wait: a wakeup per record would cost
 *            the target more than the record. The reader polls for the rest.
 *   targets  hash tgid -> u8, the processes traced (from Go, and from the
 *            fork tracepoint for children of targets; the exit tracepoint
 *            removes them).
 *   stopped  hash stop sequence number -> struct stop (tgid, start time):
 *            every stop of a process by the loader and exec probes with
 *            SIGSTOP that user space has not resumed yet. Written before the
 *            signal is sent; Go deletes the entry of the record it handled
 *            after its SIGCONT. Keyed by the stop, not the process: a
 *            resumed process that stops again at once has an entry of its
 *            own, which that delete cannot take away. The guardian process
 *            (probes/guardian.go) holds a dup of this map and resumes what
 *            it lists if vramprof dies.
 *   threads  LRU hash pid_tgid -> thread: since, the entry time of the
 *            thread's outermost traced call in flight, 0 when none; an
 *            entry is also what lets the thread's outermost calls pass the
 *            target filter (user space deletes a process's entries when it
 *            stops tracing it). since is cleared only after that call's
 *            record is in the ring buffer, so user space that reads since
 *            for every thread and then empties the ring has every record of
 *            a call that entered before the smallest since, or before it
 *            began reading (probes/reorder.go: the effect-order watermark).
 *   calls    task local storage -> thread_calls: a traced thread's nesting
 *            depth, current device and context, and a slot per depth {rsp and return
 *            address at entry, record} for a call between its entry and its
 *            return, kept between calls (kind REC_IDLE when idle) so the hot
 *            path neither inserts nor deletes. Created at the thread's first
 *            traced call, freed with the thread.
 *   contexts hash {tgid, CUcontext} -> device, from cuDevicePrimaryCtxRetain
 *            and cuCtxCreate_v2, so cuCtxSetCurrent names a device; an entry
 *            goes at cuCtxDestroy_v2's entry (vramprof/calls.h, ctx_drop).
 *   stack_windows per-CPU array: the user stack at a hit, read at once
 *            (vramprof/stacks.h).
 *   block_threads task local storage -> block_thread: what the target
 *            filter and py_procs said of a thread's process (while the
 *            epochs below stay), and the record its block-layer allocation
 *            is built in (a 2 KiB record does not fit on the 512-byte
 *            stack; per thread, where another thread's hit that preempts
 *            it cannot overwrite it). Created at a target's thread's first
 *            hit of usdt_block or spec_enter (vramprof/blocks.h).
 *   py_procs hash tgid -> py_proc: where a process's CPython keeps its state
 *            and the layout offsets of its version (from Go, probes/python;
 *            copied to a forked child in the kernel).
 *   py_threads LRU pid_tgid -> the thread's PyThreadState, verified by its
 *            native thread id at every use.
 *   py_seen  LRU {tgid, hash of the code objects} -> 1: a record whose
 *            Python stack was not seen before wakes the reader at once, and
 *            its code objects go to py_new.
 *   py_new   ring buffer of py_codes: code objects user space reads at once
 *            (probes/pystack.go), while the process lives.
 *   spec_calls   LRU hash pid_tgid -> spec_call {rsp and return address
 *            at entry, record}: a
 *            spec'd allocation between its entry and a return instruction
 *            (allocator specs, vramprof/specs.h; apart from threads and calls).
 *   spec_scratch per-CPU array, one spec_call: seeds new spec_calls slots
 *            (idle). Entry-only spec records are built in the thread's
 *            block_threads entry, as usdt_block's allocations are.
 *   known_files  LRU hash {st_dev, inode} -> enum known (trace_all, quiet):
 *            files user space has examined (code probed, or found to hold
 *            nothing to probe, or a file that is not ELF: data).
 *   mapped   LRU hash {file_key, start time, tgid} -> u8 (trace_all, quiet):
 *            a process announced its mapping of a probed file (REC_MAPPED).
 *   pending  LRU hash tgid -> u8 (trace_all, quiet): a process faulted on a
 *            mapping of an unexamined file since its loader's last
 *            rendezvous; that rendezvous then stops it (loader_state).
 *   resolve_key  hash tid -> file_key: the key of the file a thread of
 *            vramprof's own faulted on (overlayfs, loaded.go).
 *   usdt_specs   array, by spec id: where a USDT site's or a spec'd
 *            function's arguments are (cookie bits 32-63).
 *
 * Globals read from Go: lost (records the ring buffer refused), unpaired
 * (a return without its entry: attached mid-call, or a slot evicted).
 * Written from Go after the maps are loaded: user_epoch, bumped after a
 * process leaves targets or its py_procs entry changes (bpf_epoch is the
 * BPF side's own, bumped at a target's exec and exit): see blocks.h.
 * Set from Go before load: wakeup_bytes, trace_all (every process is a
 * target: attach --all), self_tgid (vramprof's own process). Set from Go
 * once the file fault watch is attached: quiet (stop a target only for a
 * file not examined yet). BPF's own:
 * stop_seq (numbers the stops).
 *
 * Minimum kernel: 5.15 (attach cookies, ring buffer, bounded loops, tp_btf,
 * task local storage in tracing programs).
 * No uretprobe anywhere (a kernel's uretprobe syscall is never used).
 *
 * Sources: this file holds the programs (the SEC entry points); their types,
 * maps and helpers are in vramprof/, one header per concern:
 *   records.h    the record, its kinds, flags and shapes; thread state
 *   maps.h       the shared globals and maps, the target filter, calls in flight
 *   stacks.h     the native user stack (frame pointers)
 *   task.h       the kernel task fields read (CO-RE)
 *   python.h     CPython frames and the py_new fast lane
 *   calls.h      the CUDA API calls: arguments by shape, results, nesting
 *   usdt.h       USDT argument specs and their reading
 *   blocks.h     the block layer's USDT probes: per-thread filter cache,
 *                record, and the stack window that serves spilled arguments
 *   specs.h      allocator specs (block layer) in flight
 *   lifecycle.h  fork, exec, exit and loader records; stopping a target
 */

#include "common.h"
#include "bpf_tracing.h"

#include "vramprof/records.h"
#include "vramprof/maps.h"
#include "vramprof/stacks.h"
#include "vramprof/task.h"
#include "vramprof/python.h"
#include "vramprof/calls.h"
#include "vramprof/usdt.h"
#include "vramprof/blocks.h"
#include "vramprof/specs.h"
#include "vramprof/lifecycle.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* Never used: it puts the contract's enums into BTF, so bpf2go generates them for
 * Go (probes/bpf_x86_bpfel.go) and the two sides cannot drift apart. */
struct contract {
	enum rec_kind kind;
	enum rec_flags flags;
	enum shape shape;
	enum usdt_arg_kind usdt_kind;
	struct py_proc py;
	struct py_codes py_codes;
} contract_types __attribute__((unused));

struct spec_contract {
	enum spec_flags flags;
} spec_contract_types __attribute__((unused));

struct call_contract {
	enum call_flags call;
	enum ret_flags ret;
} call_contract_types __attribute__((unused));


/*
 * The same programs for the two ways of attaching: one uprobe link per
 * function (perf events), or one uprobe_multi link per file and program
 * (kernel 6.6+). Multi links are created and, above all, removed in one
 * step: removing ~70 single uprobes waits for ~70 RCU grace periods,
 * seconds in all.
 */
SEC("uprobe/call_enter")
int call_enter(struct pt_regs *ctx)
{
	return do_call_enter(ctx);
}

SEC("uprobe/call_return")
int call_return(struct pt_regs *ctx)
{
	return do_call_return(ctx);
}

SEC("uprobe.multi/call_enter")
int call_enter_multi(struct pt_regs *ctx)
{
	return do_call_enter(ctx);
}

SEC("uprobe.multi/call_return")
int call_return_multi(struct pt_regs *ctx)
{
	return do_call_return(ctx);
}


/*
 * usdt_block: a framework allocator's USDT probe (PyTorch's
 * pytorch:malloc(ptr, device, size, stream) and pytorch:free(ptr)),
 * attached with its semaphore's reference counter so the probe is live.
 * Entry only: the probe is a nop inside C++ code, where a uretprobe would
 * break exception unwinding. Cookie: bits 0-15 API, 16-23 kind (alloc or
 * free), 32-63 the spec id in usdt_specs. Arguments by position: 0 the
 * pointer, 1 the device, 2 the size, 3 the stream. A hit reads user memory
 * once at most (a helper call costs more than the rest of the program): an
 * allocation its stack window, which also serves the arguments spilled in
 * its frame; a free the stack slot its pointer argument is in, if any.
 */
SEC("uprobe/usdt_block")
int usdt_block(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct block_thread *bt = block_thread(id);
	if (!bt)
		return 0;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 spec_id = cookie >> 32;
	struct usdt_spec *spec = bpf_map_lookup_elem(&usdt_specs, &spec_id);
	if (!spec)
		return 0;
	__u8 kind = cookie >> 16;
	if (kind != REC_ALLOC) {
		/* No stack: the header alone, built in the ring buffer itself. */
		struct record *r = bpf_ringbuf_reserve(&events, RECORD_HEADER_SIZE, 0);
		if (!r) {
			__sync_fetch_and_add(&lost, 1);
			return 0;
		}
		fill_common(r, id, kind);
		r->api = (__u16)cookie;
		r->flags = REC_F_BLOCK;
		r->addr = usdt_value(ctx, &spec->args[0]);
		bpf_ringbuf_submit(r, wakeup_flag());
		return 0;
	}
	/* A probe site is not a function entry: the caller's return address
	 * is not at sp, and the frame-pointer walk is whole, from the frame
	 * pointer; the window also holds the arguments spilled in the frame
	 * (blocks.h). */
	struct stack_window *sw = block_window(ctx, id);
	struct record *r = &bt->r;
	fill_common(r, id, kind);
	r->api = (__u16)cookie;
	r->flags = REC_F_BLOCK;
	r->addr = block_arg(ctx, &spec->args[0], sw, id);
	r->device = (__s32)block_arg(ctx, &spec->args[1], sw, id);
	r->size = block_arg(ctx, &spec->args[2], sw, id);
	r->stream = block_arg(ctx, &spec->args[3], sw, id);
	walk_user_stack(ctx, r, sw, id);
	if (bt->python && py_new_stack(r, walk_python(r, id), id))
		r->flags |= REC_F_WAKE;
	__u64 wake = r->flags & REC_F_WAKE ? BPF_RB_FORCE_WAKEUP : wakeup_flag();
	if (bpf_ringbuf_output(&events, r, record_size(r), wake))
		__sync_fetch_and_add(&lost, 1);
	return 0;
}


/* Allocator specs (block layer): see vramprof/specs.h. */
SEC("uprobe/spec_enter")
int spec_enter(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct block_thread *bt = block_thread(id);
	if (!bt)
		return 0;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 spec_id = cookie >> 32;
	struct usdt_spec *spec = bpf_map_lookup_elem(&usdt_specs, &spec_id);
	if (!spec)
		return 0;
	__u64 sp = PT_REGS_SP(ctx), ra = 0;
	struct stack_window *sw = stack_window_read(id, sp);
	stack_read(sw, id, sp, &ra, 1);
	/* An entry-only record is built in the thread's block_thread, one
	 * sent at a return in its spec_calls slot. */
	struct record *r = &bt->r;
	if ((cookie >> 24) & SPEC_F_AT_RETURN) {
		struct spec_call *c = spec_slot(id);
		if (!c) {
			__sync_fetch_and_add(&unpaired, 1);
			return 0;
		}
		if (c->r.kind != REC_IDLE && c->sp > sp && ra_in_place(sw, id, c->sp, c->ra))
			return 0; /* inside a spec'd call in flight: it counts */
		c->sp = sp;
		c->ra = ra;
		r = &c->r;
	}
	fill_common(r, id, (__u8)(cookie >> 16));
	r->api = (__u16)cookie;
	r->flags = REC_F_BLOCK;
	/* The thread's current device, read but never created here. */
	struct thread_calls *tc = thread_calls(0);
	if (tc)
		r->device = tc->device;
	r->addr = usdt_value(ctx, &spec->args[0]);
	r->size = usdt_value(ctx, &spec->args[2]);
	if (r->kind == REC_ALLOC) {
		r->caller = ra;
		walk_user_stack(ctx, r, sw, id);
		if (py_new_stack(r, walk_python(r, id), id))
			r->flags |= REC_F_WAKE;
	}
	if (!((cookie >> 24) & SPEC_F_AT_RETURN))
		spec_send(r);
	return 0;
}

SEC("uprobe/spec_return")
int spec_return(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct spec_call *c = bpf_map_lookup_elem(&spec_calls, &id);
	__u64 sp = PT_REGS_SP(ctx);
	if (c && c->r.kind != REC_IDLE && c->sp > sp)
		return 0; /* a call nested in the one in flight: not recorded */
	if (!c || c->r.kind == REC_IDLE || c->sp != sp) {
		/* Attached while the thread was inside the call. */
		if (traced(id))
			__sync_fetch_and_add(&unpaired, 1);
		return 0;
	}
	struct record *r = &c->r;
	__u64 now = bpf_ktime_get_ns();
	r->duration = now - r->time;
	r->time = now;
	r->addr = PT_REGS_RC(ctx);
	r->ret = r->addr ? 0 : SPEC_RET_FAILED;
	spec_send(r);
	r->kind = REC_IDLE;
	return 0;
}


/*
 * fork: a target's child is a target too (DataLoader workers, launchers
 * starting ranks). Threads share their process's tgid and are skipped.
 */

SEC("tp_btf/sched_process_fork")
int BPF_PROG(process_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	if (ptgid == ctgid || !bpf_map_lookup_elem(&targets, &ptgid))
		return 0;
	__u8 one = 1;
	bpf_map_update_elem(&targets, &ctgid, &one, BPF_ANY);
	/* The child runs the parent's interpreter at the same addresses. */
	struct py_proc *pp = bpf_map_lookup_elem(&py_procs, &ptgid);
	if (pp)
		bpf_map_update_elem(&py_procs, &ctgid, pp, BPF_ANY);
	announce(ctgid, child->pid, REC_FORK, ptgid, 0);
	return 0;
}

/*
 * exec: a target replaced its image. It is stopped (as at a loader change)
 * so user space can probe the new executable before it runs: a statically
 * linked one never calls the loader.
 */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(process_exec, struct task_struct *p, int old_pid, void *bprm)
{
	__u32 tgid = p->tgid;
	if (!bpf_map_lookup_elem(&targets, &tgid))
		return 0;
	bpf_map_delete_elem(&py_procs, &tgid); /* another image: user space looks again */
	__sync_fetch_and_add(&bpf_epoch, 1);
	announce(tgid, p->pid, REC_EXEC, 0, 1);
	return 0;
}

/*
 * exit: a target's main thread is gone. Sent after every record of the
 * process, so a PID reused later starts clean. The process leaves the
 * filter here, in the kernel, before its PID can be reused.
 */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(process_exit, struct task_struct *p)
{
	__u32 tgid = p->tgid;
	if (p->pid != tgid || !bpf_map_lookup_elem(&targets, &tgid))
		return 0;
	bpf_map_delete_elem(&targets, &tgid);
	bpf_map_delete_elem(&py_procs, &tgid);
	__sync_fetch_and_add(&bpf_epoch, 1); /* threads left behind read targets again */
	/* addr: how it ended, as wait(2) encodes it (exit code << 8, or the
	 * signal number). A fatal signal or exit_group stores it in the signal
	 * struct before any thread exits; the task's own copy covers a plain
	 * exit (and kernels that set it before this tracepoint). */
	__u32 status = p->signal->group_exit_code;
	if (!status)
		status = p->exit_code;
	announce(tgid, p->pid, REC_EXIT, status, 0);
	return 0;
}

/*
 * may_stop_other reports whether a process that is not a target (trace_all)
 * may be stopped at its loader's rendezvous. Not when a debugger traces it
 * (it would see the SIGSTOP), nor when it has a controlling terminal: a
 * shell's job control would see the stop, take the terminal back and leave
 * the job in the background after the SIGCONT. Nor a child of vramprof's
 * own process (self_tgid): its guardian, a re-exec of vramprof that loads
 * its libraries while the session may not read yet (the session's Close
 * waits for a guardian it would have stopped), and the command of a `run`
 * in the same process, which its own session stops.
 */
static __always_inline int may_stop_other(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	if (task->group_leader->real_parent->tgid == (int)self_tgid)
		return 0;
	return !task->ptrace && !task->signal->tty;
}

/*
 * loader_state: entry of the dynamic loader's _dl_debug_state, which it
 * calls around every change to the link map (dlopen, dlclose, and the
 * initial load). The target is stopped so that user space can scan its new
 * mappings and attach before the first call into a new CUDA library; user
 * space sends SIGCONT when it is done. quiet: only when it mapped a file
 * user space has not examined yet (pending, see file_faulted): a stop is
 * seen by the target (a thread's interrupted wait returns EINTR, a SIGCONT
 * handler runs), and a file examined already needs none. With trace_all,
 * other processes are announced but not stopped (stopping every process
 * on the host at every dlopen is not ours to do), unless they are pending
 * and may_stop_other allows it.
 */
SEC("uprobe/loader_state")
int loader_state(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	int target = bpf_map_lookup_elem(&targets, &tgid) != 0;
	if (!target && !trace_all)
		return 0;

	struct record *r = bpf_ringbuf_reserve(&events, RECORD_HEADER_SIZE, 0);
	if (!r) {
		/* Not stopping is safer than stopping with nobody to resume. */
		__sync_fetch_and_add(&lost, 1);
		return 0;
	}
	fill_common(r, id, REC_LOADER);
	int due = bpf_map_lookup_elem(&pending, &tgid) != 0;
	if (due)
		bpf_map_delete_elem(&pending, &tgid);
	if (target && (due || !quiet))
		stop_target(r, tgid);
	else if (!target && due && may_stop_other())
		stop_target(r, tgid);
	bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
	return 0;
}

/* The kernel's file fields read by file_faulted. */
struct super_block {
	__u32 s_dev; /* MKDEV(major, minor): major << 20 | minor */
} __attribute__((preserve_access_index));

struct inode {
	unsigned long i_ino;
	struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct address_space {
	struct inode *host;
} __attribute__((preserve_access_index));

/*
 * announce_mapped sends REC_MAPPED for tgid's mapping of the probed file
 * key, the first time it faults on it: addr st_dev, size the inode, and
 * who the process is, for a process gone before user space can read
 * /proc (a short job under serve): duration its start_boottime, ret its
 * parent's tgid, and stack its command line (NUL-separated, at most
 * MAPPED_ARGS bytes; device the bytes sent, nframes the u64 words).
 */
static __always_inline void announce_mapped(__u64 id, struct file_key *key)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct task_struct *leader = task->group_leader;
	struct mapped_key mk = {.dev = key->dev, .ino = key->ino, .start = leader->start_boottime, .tgid = id >> 32};
	if (bpf_map_lookup_elem(&mapped, &mk))
		return;
	__u8 one = 1;
	bpf_map_update_elem(&mapped, &mk, &one, BPF_ANY);
	struct record *r = bpf_ringbuf_reserve(&events, RECORD_HEADER_SIZE + MAPPED_ARGS, 0);
	if (!r) {
		__sync_fetch_and_add(&lost, 1);
		return;
	}
	fill_common(r, id, REC_MAPPED);
	r->addr = key->dev;
	r->size = key->ino;
	r->duration = mk.start;
	r->ret = leader->real_parent->tgid;
	__u64 len = 0;
	struct mm_struct *mm = task->mm;
	if (mm) {
		/* 0 until exec has copied them (a fault of exec's own). */
		unsigned long start = mm->arg_start, end = mm->arg_end;
		len = end > start ? end - start : 0;
		if (len > MAPPED_ARGS)
			len = MAPPED_ARGS;
		if (bpf_probe_read_user(r->stack, len & (2 * MAPPED_ARGS - 1), (void *)start))
			len = 0;
	}
	r->device = len;
	r->nframes = (len + 7) / 8;
	r->npy = 0;
	bpf_ringbuf_submit(r, wakeup_flag());
}

/*
 * file_faulted makes the calling process pending when mapping's file is
 * not in known_files (trace_all: any process; quiet: a target), and
 * announces its first fault on a probed file (REC_MAPPED). A fault of
 * vramprof's own only answers resolve_key.
 */
static __always_inline void file_faulted(struct address_space *mapping)
{
	if ((!trace_all && !quiet) || !mapping)
		return;
	struct inode *in = mapping->host;
	if (!in)
		return;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	__u32 kdev = in->i_sb->s_dev;
	__u32 major = kdev >> 20, minor = kdev & 0xfffff;
	struct file_key key = {
		.dev = (minor & 0xff) | (major << 8) | ((__u64)(minor & ~0xffu) << 12),
		.ino = in->i_ino,
	};
	if (tgid == self_tgid) {
		struct file_key *slot = bpf_map_lookup_elem(&resolve_key, &tid);
		if (slot)
			*slot = key;
		return;
	}
	if (!quiet && bpf_map_lookup_elem(&targets, &tgid))
		return; /* stopped at every rendezvous anyway */
	if (!trace_all && !bpf_map_lookup_elem(&targets, &tgid))
		return;
	enum known *known = bpf_map_lookup_elem(&known_files, &key);
	if (known) {
		if (*known == KNOWN_PROBED)
			announce_mapped(id, &key);
		return;
	}
	__u8 one = 1;
	bpf_map_update_elem(&pending, &tgid, &one, BPF_ANY);
}

/*
 * map_fault, map_pages (attached by watchMappings, for trace_all and quiet): a process's
 * page fault on a file mapping (filemap_fault; filemap_map_pages, the
 * fault-around of pages already cached). The loader reads a library it
 * maps (its dynamic section, symbols, relocations) before the rendezvous
 * that announces it, so a new library faults first. Page faults, not
 * mmap(2) itself: a syscall tracepoint would put every system call on the
 * host on the slow path (~100 ns each measured), and this kernel may lack
 * the function tracer that fentry needs.
 */
SEC("tp_btf/mm_filemap_fault")
int BPF_PROG(map_fault, struct address_space *mapping, unsigned long index)
{
	file_faulted(mapping);
	return 0;
}

SEC("tp_btf/mm_filemap_map_pages")
int BPF_PROG(map_pages, struct address_space *mapping, unsigned long index, unsigned long last)
{
	file_faulted(mapping);
	return 0;
}


/*
 * pytest_setenv, pytest_unsetenv: libc's setenv(name, value, overwrite) and
 * unsetenv(name), attached in the libc of a target that runs CPython
 * (probes/pytest.go). pytest announces the test it runs: before each phase
 * it sets PYTEST_CURRENT_TEST to "<nodeid> (setup|call|teardown)" through
 * os.environ (posix.putenv calls setenv), and it removes the variable after
 * the teardown (unsetenv). For that name only, a REC_TEST_PHASE record
 * goes out: the common header (time, pid, tid), then the value in stack
 * (NUL-terminated, at most TEST_PHASE_VALUE bytes with the NUL: a longer
 * one is cut; device the bytes before the NUL, nframes the u64 words);
 * unsetenv sends an empty value. Entry only, like usdt_block: the call's
 * result says nothing pytest needs.
 */
#define TEST_PHASE_NAME "PYTEST_CURRENT_TEST"

/* is_test_phase_name reports whether the user string at name is exactly
 * TEST_PHASE_NAME. */
static __always_inline int is_test_phase_name(const char *name)
{
	char want[] = TEST_PHASE_NAME;
	char got[sizeof(want) + 1] = {};
	if (bpf_probe_read_user_str(got, sizeof(got), name) != sizeof(want))
		return 0;
	for (int i = 0; i < sizeof(want); i++)
		if (got[i] != want[i])
			return 0;
	return 1;
}

static __always_inline int send_test_phase(struct pt_regs *ctx, const char *value)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id) || !is_test_phase_name((const char *)PT_REGS_PARM1(ctx)))
		return 0;
	struct record *r = bpf_ringbuf_reserve(&events, RECORD_HEADER_SIZE + TEST_PHASE_VALUE, 0);
	if (!r) {
		__sync_fetch_and_add(&lost, 1);
		return 0;
	}
	fill_common(r, id, REC_TEST_PHASE);
	long n = 0;
	if (value)
		n = bpf_probe_read_user_str(r->stack, TEST_PHASE_VALUE, value);
	if (n <= 0) {
		n = 1; /* unsetenv, or unreadable: the empty value */
		*(char *)r->stack = 0;
	}
	r->device = n - 1;
	r->nframes = (n + 7) / 8;
	r->npy = 0;
	bpf_ringbuf_submit(r, wakeup_flag());
	return 0;
}

SEC("uprobe/pytest_setenv")
int pytest_setenv(struct pt_regs *ctx)
{
	return send_test_phase(ctx, (const char *)PT_REGS_PARM2(ctx));
}

SEC("uprobe/pytest_unsetenv")
int pytest_unsetenv(struct pt_regs *ctx)
{
	return send_test_phase(ctx, 0);
}
