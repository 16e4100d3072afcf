// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * vramprof: uprobes on the CUDA allocation API.
 *
 * Contract with probes/ (Go). Change both sides together; probes/record.go
 * decodes exactly this layout and its tests pin the offsets.
 *
 *   record (little-endian, 72-byte header, then nframes x u64 user stack):
 *     0  u64 time      ns, bpf_ktime_get_ns (CLOCK_MONOTONIC); the return
 *                      time for allocations, the entry time otherwise
 *     8  u64 duration  ns from entry to return; 0 for entry-only probes
 *    16  u64 addr      pointer returned (alloc, ret == 0) or released (free)
 *    24  u64 size      bytes requested
 *    32  u64 stream    CUDA stream (0: legacy default)
 *    40  u32 pid       tgid
 *    44  u32 tid
 *    48  s32 ret       the call's return code; 0 for entry-only probes
 *    52  s32 device    -1: unknown
 *    56  u16 api       the attach cookie: event.API
 *    58  u8  kind      REC_* below (alloc and free match event.Kind)
 *    59  u8  flags     REC_F_* below
 *    60  u16 nframes   user frames that follow, at most MAX_FRAMES
 *    62  u16 pad
 *    64  u64 caller    *(u64 *)sp at entry: the return address into the
 *                      direct caller, which a frame-pointer walk started at a
 *                      function's first instruction skips (rbp still belongs
 *                      to the caller). Go inserts it when the kernel did not.
 *    72  u64 stack[nframes]  leaf first; stack[0] is the probed function,
 *                      the rest return addresses up the frame-pointer chain
 *
 * Maps:
 *   events   ring buffer, sized from Go (default 16 MiB). Records are
 *            submitted without a wakeup until WAKEUP_BYTES are waiting: a
 *            wakeup per record would cost the target more than the record.
 *            The reader polls on a short deadline for the rest.
 *   targets  hash tgid -> u8, the processes being traced (filled from Go).
 *   pending  LRU hash pid_tgid -> record: each thread's slot, holding an
 *            allocation between its entry and its return (kind REC_ALLOC),
 *            else idle. Slots stay between calls, so the hot path neither
 *            inserts nor deletes; LRU so exited threads age out.
 *   scratch  per-CPU array, one zeroed record to create a thread's slot
 *            from (a 1 KiB record does not fit on the 512-byte stack).
 *
 * Globals read from Go: lost (records the ring buffer refused), unpaired
 * (entries evicted from pending or returns without an entry).
 *
 * Cookie: the event.API of the probed function, so one program serves every
 * function with the same signature.
 *
 * Minimum kernel: 5.15 (attach cookies, ring buffer, bounded loops).
 * Uretprobes on 6.11+ return through the uretprobe syscall.
 */

#include "common.h"
#include "bpf_tracing.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define MAX_FRAMES 127 /* kernel.perf_event_max_stack default */
#define SIGSTOP 19

#define BPF_RB_NO_WAKEUP (1ULL << 0)
#define BPF_RB_FORCE_WAKEUP (1ULL << 1)
#define BPF_RB_AVAIL_DATA 0

enum rec_kind {
	REC_IDLE = 0,	/* a pending slot with no call in progress */
	REC_ALLOC = 1,	/* event.KindAlloc */
	REC_FREE = 2,	/* event.KindFree */
	REC_LOADER = 100, /* the dynamic loader changed the maps: rescan, then SIGCONT */
};

enum rec_flags {
	REC_F_STOPPED = 1 << 0, /* the target was sent SIGSTOP and waits for SIGCONT */
};

struct record {
	__u64 time;
	__u64 duration;
	__u64 addr;
	__u64 size;
	__u64 stream;
	__u32 pid;
	__u32 tid;
	__s32 ret;
	__s32 device;
	__u16 api;
	__u8 kind;
	__u8 flags;
	__u16 nframes;
	__u16 pad;
	__u64 caller;
	__u64 stack[MAX_FRAMES];
};

#define RECORD_HEADER_SIZE 72

/* Set from Go before load. */
volatile const __u64 wakeup_bytes = 256 * 1024;

/* Read from Go. */
__u64 lost = 0;
__u64 unpaired = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 * 1024 * 1024);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct record);
} pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct record);
} scratch SEC(".maps");


static __always_inline int traced(__u64 id)
{
	__u32 tgid = id >> 32;
	return bpf_map_lookup_elem(&targets, &tgid) != 0;
}

static __always_inline __u64 wakeup_flag(void)
{
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

static __always_inline void fill_common(struct record *r, __u64 id, struct pt_regs *ctx, __u8 kind)
{
	r->time = bpf_ktime_get_ns();
	r->duration = 0;
	r->addr = 0;
	r->size = 0;
	r->stream = 0;
	r->pid = id >> 32;
	r->tid = (__u32)id;
	r->ret = 0;
	r->device = -1;
	r->api = (__u16)bpf_get_attach_cookie(ctx);
	r->kind = kind;
	r->flags = 0;
	r->nframes = 0;
	r->pad = 0;
	r->caller = 0;
}

/*
 * walk_user_stack records the user stack by frame pointers: stack[0] is the
 * probed function (ip), then the return address of each frame up the rbp
 * chain. bpf_get_stack(BPF_F_USER_STACK) gives the same frames, but on this
 * project's reference kernel (6.18) it cost ~900 ns for a 4-frame stack
 * against ~50 ns for this loop (per-program run time from BPF stats), and
 * the whole allocation probe must stay near the bare uprobe cost.
 * The walk stops at a NULL or unreadable frame, a zero return address, or a
 * frame pointer that does not move up the stack (a corrupt chain).
 */
static __always_inline void walk_user_stack(struct pt_regs *ctx, struct record *r)
{
	r->stack[0] = PT_REGS_IP(ctx);
	__u64 fp = PT_REGS_FP(ctx);
	__u32 n = 1;
	for (int i = 1; i < MAX_FRAMES; i++) {
		__u64 frame[2];
		if (!fp || bpf_probe_read_user(frame, sizeof(frame), (void *)fp))
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

/*
 * alloc_enter: entry of  err f(void **out, size_t size, ...)  (cudaMalloc,
 * and every function of the same shape). Stashes the out-pointer in addr
 * until the return reads it, and takes the stack here: at the return the
 * return address is already the uretprobe trampoline.
 */
SEC("uprobe/alloc_enter")
int alloc_enter(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id))
		return 0;

	/*
	 * Each thread keeps its slot in pending between calls (kind
	 * REC_IDLE when not inside a call): building the record in place
	 * spares a 1 KiB copy and a hash insert and delete per allocation.
	 */
	struct record *r = bpf_map_lookup_elem(&pending, &id);
	if (!r) {
		__u32 zero = 0;
		struct record *init = bpf_map_lookup_elem(&scratch, &zero);
		if (!init)
			return 0;
		init->kind = REC_IDLE;
		if (bpf_map_update_elem(&pending, &id, init, BPF_ANY)) {
			__sync_fetch_and_add(&unpaired, 1);
			return 0;
		}
		r = bpf_map_lookup_elem(&pending, &id);
		if (!r)
			return 0;
	}

	fill_common(r, id, ctx, REC_ALLOC);
	r->addr = PT_REGS_PARM1(ctx);
	r->size = PT_REGS_PARM2(ctx);
	bpf_probe_read_user(&r->caller, sizeof(r->caller), (void *)PT_REGS_SP(ctx));

	walk_user_stack(ctx, r);
	return 0;
}

/* alloc_return: completes the record alloc_enter stashed and sends it. */
SEC("uretprobe/alloc_return")
int alloc_return(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct record *r = bpf_map_lookup_elem(&pending, &id);
	if (!r || r->kind != REC_ALLOC) {
		/* Attached while this thread was inside the call, or evicted. */
		if (traced(id))
			__sync_fetch_and_add(&unpaired, 1);
		return 0;
	}

	__u64 now = bpf_ktime_get_ns();
	r->duration = now - r->time;
	r->time = now;
	r->ret = (__s32)PT_REGS_RC(ctx);

	void *out = (void *)r->addr;
	r->addr = 0;
	/* Read *out only on success: on failure it may be garbage or unset. */
	if (r->ret == 0 && out)
		bpf_probe_read_user(&r->addr, sizeof(r->addr), out);

	__u32 nframes = r->nframes;
	if (nframes > MAX_FRAMES)
		nframes = MAX_FRAMES;
	__u32 size = RECORD_HEADER_SIZE + nframes * sizeof(__u64);

	if (bpf_ringbuf_output(&events, r, size, wakeup_flag()))
		__sync_fetch_and_add(&lost, 1);
	r->kind = REC_IDLE;
	return 0;
}

/* free_enter: entry of  err f(void *ptr, ...)  (cudaFree). No stack: the
 * analysis attributes memory to where it was allocated. */
SEC("uprobe/free_enter")
int free_enter(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id))
		return 0;

	struct record *r = bpf_ringbuf_reserve(&events, RECORD_HEADER_SIZE, 0);
	if (!r) {
		__sync_fetch_and_add(&lost, 1);
		return 0;
	}
	fill_common(r, id, ctx, REC_FREE);
	r->addr = PT_REGS_PARM1(ctx);
	bpf_ringbuf_submit(r, wakeup_flag());
	return 0;
}

/*
 * loader_state: entry of the dynamic loader's _dl_debug_state, which it
 * calls around every change to the link map (dlopen, dlclose, and the
 * initial load). The target is stopped so that user space can scan its new
 * mappings and attach before the first call into a new CUDA library; user
 * space sends SIGCONT when it is done.
 */
SEC("uprobe/loader_state")
int loader_state(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id))
		return 0;

	struct record *r = bpf_ringbuf_reserve(&events, RECORD_HEADER_SIZE, 0);
	if (!r) {
		/* Not stopping is safer than stopping with nobody to resume. */
		__sync_fetch_and_add(&lost, 1);
		return 0;
	}
	fill_common(r, id, ctx, REC_LOADER);
	if (bpf_send_signal(SIGSTOP) == 0)
		r->flags = REC_F_STOPPED;
	bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
	return 0;
}
