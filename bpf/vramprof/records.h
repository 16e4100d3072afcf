// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

/*
 * records.h: the record user space decodes (layout in the contract header
 * of vramprof.bpf.c), its kinds, flags and shapes, the per-thread state
 * user space reads, and the record helpers shared by every program.
 */

#ifndef VRAMPROF_RECORDS_H
#define VRAMPROF_RECORDS_H

#include "common.h"

#define MAX_FRAMES	 127 /* kernel.perf_event_max_stack default */
#define MAX_PY_FRAMES	 64  /* Python frames a record can hold */
#define PY_SLOTS	 256 /* stack[]: native frames, then 2 u64 per Python frame */
#define MAPPED_ARGS	 256 /* REC_MAPPED: bytes of the command line sent */
#define TEST_PHASE_VALUE 256 /* REC_TEST_PHASE: bytes of the value sent, its NUL included */
#define MAX_DEPTH	 4   /* nesting levels tracked: runtime -> driver is 2 */
/* thread_calls.device and a record's device: -1 the thread has chosen no
 * device yet (user space may take CUDA's default, device 0); DEVICE_LOST
 * it has, but which one cannot be known (calls.h: ctx_set, ctx_drop), and
 * user space takes no default. */
#define DEVICE_LOST	 -2
/* Record kinds: event.Kind's numbering, plus those from REC_LOADER on, which
 * stay between BPF and Go. */
enum rec_kind {
	REC_IDLE = 0, /* a slot with no call in progress */
	REC_ALLOC = 1,
	REC_FREE = 2,
	REC_HOST_ALLOC = 3,
	REC_HOST_FREE = 4,
	REC_RESERVE = 5,
	REC_UNRESERVE = 6,
	REC_CREATE = 7,
	REC_RELEASE = 8,
	REC_SET_DEVICE = 11,
	REC_LOADER = 100,     /* the dynamic loader changed the maps: rescan, then SIGCONT */
	REC_FORK = 101,	      /* a target forked: addr is the parent, pid the child */
	REC_EXEC = 102,	      /* a target exec'd: new maps; stopped like REC_LOADER */
	REC_EXIT = 103,	      /* a target's main thread exited */
	REC_MAPPED = 104,     /* a process mapped a probed file: see announce_mapped */
	REC_TEST_PHASE = 105, /* PYTEST_CURRENT_TEST set or unset: see pytest_setenv */
};

enum rec_flags {
	REC_F_STOPPED = 1 << 0,	  /* loader: the target was sent SIGSTOP */
	REC_F_NESTED = 1 << 1,	  /* made inside another traced call: event.FlagNested */
	REC_F_BLOCK = 1 << 2,	  /* block layer (a framework allocator's USDT probe) */
	REC_F_PY_TRUNC = 1 << 3,  /* the Python frame chain went on past the depth limit */
	REC_F_PY_BROKEN = 1 << 4, /* a Python frame could not be read: the chain is cut */
	REC_F_WAKE = 1 << 5,	  /* new Python code objects: wake the reader now */
};
/* How a function's arguments are read (cookie bits 24-31). */
enum shape {
	SHAPE_OUT = 0,	   /* f(T *out, size_t size, ...): out read at return */
	SHAPE_OUT_STREAM3, /* f(T *out, size_t size, stream) */
	SHAPE_OUT_STREAM4, /* f(T *out, size_t size, pool, stream) */
	SHAPE_PITCH,	   /* f(T *out, size_t *pitch, size_t width, size_t height) */
	SHAPE_3D,	   /* cudaMalloc3D(cudaPitchedPtr *p, cudaExtent e): e on the stack */
	SHAPE_CREATE,	   /* cuMemCreate(handle *out, size_t size, prop *p): device at p+12 */
	SHAPE_PTR,	   /* f(T ptr, ...) */
	SHAPE_PTR_SIZE,	   /* f(T ptr, size_t size) */
	SHAPE_PTR_STREAM,  /* f(T ptr, stream) */
	SHAPE_MAP,	   /* cuMemMap(ptr, size, offset, handle, flags) */
	SHAPE_SET_DEVICE,  /* cudaSetDevice(int device) */
	SHAPE_CTX_RETAIN,  /* cuDevicePrimaryCtxRetain(CUcontext *out, CUdevice dev) */
	SHAPE_CTX_CREATE,  /* cuCtxCreate_v2(CUcontext *out, unsigned flags, CUdevice dev) */
	SHAPE_CTX_SET,	   /* cuCtxSetCurrent(CUcontext ctx) */
	SHAPE_CTX_DESTROY, /* cuCtxDestroy_v2(CUcontext ctx) */
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
	__u8 shape;
	__u8 npy;
	__u64 caller;
	__u64 stack[PY_SLOTS];
};

#define RECORD_HEADER_SIZE 72
/*
 * call: a traced call in flight, in its thread's slot at its depth. sp is
 * rsp at its entry, where its return address is; call_return, an ordinary
 * uprobe on each return instruction, pairs with the call whose sp it sees
 * (see calls.h). ra is the return address found there at entry: while it
 * is still in place the call can be live.
 */
struct call {
	__u64 sp;
	__u64 ra;
	__u32 flags; /* CALL_F_*, from the cookie's bits 32-63 */
	__u32 pad;
	struct record r;
};

/* Attach cookie bits 32-63 of call_enter. */
enum call_flags {
	/* The function tail-calls another traced function: that one's entry,
	 * at the same rsp, is nested in it. */
	CALL_F_TAILS = 1 << 0,
	/* Entry only: no call_return at the function's return instructions.
	 * call_enter does its work there and then, and the call takes no slot
	 * (cuCtxSetCurrent: calls.h, ctx_set; cuCtxDestroy_v2: ctx_drop). */
	CALL_F_AT_ENTRY = 1 << 1,
};

/* Attach cookie of call_return. */
enum ret_flags {
	/* The return instruction is a traced function's own (not only one of
	 * a function it tail-calls): a return there with no call in flight
	 * is counted as unpaired. */
	RET_F_OWN = 1 << 0,
};

/* thread: a traced thread's value in the threads map, what user space reads. */
struct thread {
	__u64 since; /* entry time of the outermost call in flight; 0: none */
};

/*
 * thread_calls: a traced thread's calls in flight, one slot per depth (a
 * slot stays between calls, kind REC_IDLE when idle, so the hot path
 * neither inserts nor deletes), and its current device. In task local
 * storage (maps.h): found from the task (one more lookup costs ~10 ns in
 * call_enter here, one more in the threads LRU hash ~25 ns), and gone with
 * the thread.
 */
struct thread_calls {
	__u32 depth;  /* traced calls in progress on this thread */
	__s32 device; /* current device, -1 until seen, or DEVICE_LOST */
	__u32 ready;  /* 1 once device is set up (storage is created zeroed) */
	__u32 pad;
	__u64 ctx; /* the CUcontext its last cuCtxSetCurrent made current; 0: none seen */
	struct call c[MAX_DEPTH];
};
static __always_inline void fill_common(struct record *r, __u64 id, __u8 kind)
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
	r->api = 0;
	r->kind = kind;
	r->flags = 0;
	r->nframes = 0;
	r->shape = 0;
	r->npy = 0;
	r->caller = 0;
}
/* record_size is a record's size in the ring: header, native frames, Python frames. */
static __always_inline __u32 record_size(struct record *r)
{
	__u32 nframes = r->nframes;
	if (nframes > MAX_FRAMES)
		nframes = MAX_FRAMES;
	__u32 npy = r->npy;
	if (npy > MAX_PY_FRAMES)
		npy = MAX_PY_FRAMES;
	return RECORD_HEADER_SIZE + (nframes + 2 * npy) * sizeof(__u64);
}

#endif /* VRAMPROF_RECORDS_H */
