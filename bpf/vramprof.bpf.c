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
 *    59  u8  flags     REC_F_* below
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
 *   bits 0-15 event.API, bits 16-23 event.Kind, bits 24-31 SHAPE_*.
 *   usdt_block: bits 32-63 the spec id; spec_enter and spec_return: bits
 *   24-31 SPEC_F_*, 32-63 the spec id (see "allocator specs" below).
 * Every traced function gets call_enter and call_return: returns give the
 * result and the return code, and keep the per-thread nesting depth, so a
 * driver call made inside a runtime call (cudaMalloc -> cuMemAlloc_v2) is
 * flagged REC_F_NESTED and counted once.
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
 *   threads  LRU hash pid_tgid -> thread: nesting depth, current device, and
 *            since: the entry time of the thread's outermost traced call in
 *            flight, 0 when none. It is cleared only after that call's
 *            record is in the ring buffer, so user space that reads since
 *            for every thread and then empties the ring has every record of
 *            a call that entered before the smallest since, or before it
 *            began reading (probes/reorder.go: the effect-order watermark).
 *   slots    LRU hash {pid_tgid, depth} -> record: a call between its entry
 *            and its return, kept between calls (kind REC_IDLE when idle) so
 *            the hot path neither inserts nor deletes. LRU: exited threads
 *            age out.
 *   contexts hash {tgid, CUcontext} -> device, from cuDevicePrimaryCtxRetain
 *            and cuCtxCreate_v2, so cuCtxSetCurrent names a device.
 *   scratch  per-CPU array, one zeroed record to create a slot from (a 2 KiB
 *            record does not fit on the 512-byte stack).
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
 *            (allocator specs, below; apart from threads and slots).
 *   spec_scratch per-CPU array, one spec_call: entry-only spec records are
 *            built there, and it seeds new spec_calls slots.
 *   known_files  LRU hash {st_dev, inode} -> u8 (trace_all): files user
 *            space has examined (code probed or found to hold nothing to
 *            probe, or a file that is not ELF: data).
 *   pending  LRU hash tgid -> u8 (trace_all): a process that is no target
 *            faulted on a mapping of an unexamined file since its loader's
 *            last rendezvous; that rendezvous then stops it (loader_state).
 *   usdt_specs   array, by spec id: where a USDT site's or a spec'd
 *            function's arguments are (cookie bits 32-63).
 *
 * Globals read from Go: lost (records the ring buffer refused), unpaired
 * (a return without its entry: attached mid-call, or a slot evicted).
 * Set from Go before load: wakeup_bytes, trace_all (every process is a
 * target: attach --all). BPF's own: stop_seq (numbers the stops).
 *
 * Minimum kernel: 5.15 (attach cookies, ring buffer, bounded loops, tp_btf).
 * Uretprobes on 6.11+ return through the uretprobe syscall.
 */

#include "common.h"
#include "bpf_tracing.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define MAX_FRAMES 127 /* kernel.perf_event_max_stack default */
#define MAX_PY_FRAMES 64 /* Python frames a record can hold */
#define PY_SLOTS 256     /* stack[]: native frames, then 2 u64 per Python frame */
#define MAX_PY_THREADS 64 /* thread states searched per interpreter */
#define MAX_PY_INTERPS 4  /* interpreters searched */
#define MAX_DEPTH 4     /* nesting levels tracked: runtime -> driver is 2 */
#define SIGSTOP 19

#define BPF_RB_NO_WAKEUP (1ULL << 0)
#define BPF_RB_FORCE_WAKEUP (1ULL << 1)
#define BPF_RB_AVAIL_DATA 0

/* Record kinds: event.Kind's numbering, plus two that stay between BPF and
 * Go. */
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
	REC_LOADER = 100, /* the dynamic loader changed the maps: rescan, then SIGCONT */
	REC_FORK = 101,   /* a target forked: addr is the parent, pid the child */
	REC_EXEC = 102,   /* a target exec'd: new maps; stopped like REC_LOADER */
	REC_EXIT = 103,   /* a target's main thread exited */
};

enum rec_flags {
	REC_F_STOPPED = 1 << 0, /* loader: the target was sent SIGSTOP */
	REC_F_NESTED = 1 << 1,  /* made inside another traced call: event.FlagNested */
	REC_F_BLOCK = 1 << 2,   /* block layer (a framework allocator's USDT probe) */
	REC_F_PY_TRUNC = 1 << 3, /* the Python frame chain went on past the depth limit */
	REC_F_PY_BROKEN = 1 << 4, /* a Python frame could not be read: the chain is cut */
	REC_F_WAKE = 1 << 5,     /* new Python code objects: wake the reader now */
};

/* How a USDT argument is read (probes/usdt parses the note's spec). */
enum usdt_arg_kind {
	USDT_ARG_NONE = 0,
	USDT_ARG_CONST, /* value = val_off */
	USDT_ARG_REG,   /* value = the pt_regs field at reg_off */
	USDT_ARG_MEM,   /* value = *(register at reg_off + val_off) */
};

struct usdt_arg {
	__u64 val_off; /* the constant, or the memory operand's displacement */
	__u16 reg_off; /* byte offset of the register in struct pt_regs */
	__u8 kind;     /* enum usdt_arg_kind */
	signed char size; /* bytes, negative when signed (the spec's SIZE) */
	__u32 pad;
};

#define USDT_MAX_ARGS 4

/* One USDT probe site's arguments, by spec id (cookie bits 32-63). */
struct usdt_spec {
	struct usdt_arg args[USDT_MAX_ARGS];
};



/* How a function's arguments are read (cookie bits 24-31). */
enum shape {
	SHAPE_OUT = 0,        /* f(T *out, size_t size, ...): out read at return */
	SHAPE_OUT_STREAM3,    /* f(T *out, size_t size, stream) */
	SHAPE_OUT_STREAM4,    /* f(T *out, size_t size, pool, stream) */
	SHAPE_PITCH,          /* f(T *out, size_t *pitch, size_t width, size_t height) */
	SHAPE_3D,             /* cudaMalloc3D(cudaPitchedPtr *p, cudaExtent e): e on the stack */
	SHAPE_CREATE,         /* cuMemCreate(handle *out, size_t size, prop *p): device at p+12 */
	SHAPE_PTR,            /* f(T ptr, ...) */
	SHAPE_PTR_SIZE,       /* f(T ptr, size_t size) */
	SHAPE_PTR_STREAM,     /* f(T ptr, stream) */
	SHAPE_MAP,            /* cuMemMap(ptr, size, offset, handle, flags) */
	SHAPE_SET_DEVICE,     /* cudaSetDevice(int device) */
	SHAPE_CTX_RETAIN,     /* cuDevicePrimaryCtxRetain(CUcontext *out, CUdevice dev) */
	SHAPE_CTX_CREATE,     /* cuCtxCreate_v2(CUcontext *out, unsigned flags, CUdevice dev) */
	SHAPE_CTX_SET,        /* cuCtxSetCurrent(CUcontext ctx) */
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


struct thread {
	__u32 depth;   /* traced calls in progress on this thread */
	__s32 device;  /* current device, -1 until seen */
	__u64 since;   /* entry time of the outermost call in flight; 0: none */
};

struct slot_key {
	__u64 id; /* pid_tgid */
	__u32 depth;
	__u32 pad;
};

struct ctx_key {
	__u64 ctx; /* CUcontext */
	__u32 tgid;
	__u32 pad;
};

/*
 * py_proc: a traced process's CPython (probes/python.Layout). Offsets are
 * bytes; a negative one is a field the version lacks.
 */
struct py_proc {
	__u64 runtime;            /* run-time address of _PyRuntime */
	__s32 interp_head;        /* _PyRuntimeState.interpreters.head */
	__s32 interp_next;        /* PyInterpreterState.next */
	__s32 interp_threads;     /* PyInterpreterState.threads.head */
	__s32 thread_next;        /* PyThreadState.next */
	__s32 thread_native_id;   /* PyThreadState.native_thread_id (3.11+), or -1 */
	__s32 thread_id;          /* PyThreadState.thread_id: pthread_self(), the fs base */
	__s32 thread_frame;       /* PyThreadState.frame / .cframe / .current_frame */
	__s32 cframe_current;     /* _PyCFrame.current_frame, or -1 */
	__s32 frame_previous;     /* frame: f_back / previous */
	__s32 frame_code;         /* frame: f_code / f_executable */
	__s32 frame_instr;        /* frame: f_lasti / prev_instr / instr_ptr */
	__s32 frame_instr_size;   /* 4 or 8 */
	__s32 frame_owner;        /* frame: is_entry / owner, or -1 */
	__s32 frame_size;         /* bytes to read per frame, <= PY_FRAME_READ */
	__u32 depth;              /* frames to record, <= MAX_PY_FRAMES */
};

#define PY_FRAME_READ 128
/* Bytes read at once below a frame, within its page: 3.11+ push the frames
 * of Python calls one after the other on the thread's data stack, so a
 * caller's frame is usually just below its callee's, and one read serves
 * several frames. */
#define PY_WINDOW 1024

/*
 * py_codes: a Python stack's code objects, sent on py_new when a process
 * shows a set of them for the first time, so that user space reads them
 * at once, apart from the records (which wait behind the symbolization of
 * earlier stacks, and a short-lived process may be gone by then).
 */
struct py_codes {
	__u32 tgid;
	__u32 n;                          /* frames */
	__u64 pairs[2 * MAX_PY_FRAMES];   /* code, instr: the record's pairs */
};


struct py_seen_key {
	__u64 hash;
	__u32 tgid;
	__u32 pad;
};

/* Never used: it puts the enums above into BTF, so bpf2go generates them for
 * Go (probes/bpf_x86_bpfel.go) and the two sides cannot drift apart. */
struct contract {
	enum rec_kind kind;
	enum rec_flags flags;
	enum shape shape;
	enum usdt_arg_kind usdt_kind;
	struct py_proc py;
	struct py_codes py_codes;
} contract_types __attribute__((unused));

/* Set from Go before load. */
volatile const __u64 wakeup_bytes = 256 * 1024;
volatile const __u8 trace_all = 0;

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

/* A process stopped for user space (the stopped map, keyed by the stop's
 * sequence number). */
struct stop {
	__u64 start; /* task->group_leader->start_boottime, ns: /proc/PID/stat
	              * field 22 is this in clock ticks */
	__u32 tgid;
	__u32 pad;
};

/*
 * Late runtimes (trace_all only): a page fault on a mapping of a file user
 * space has not examined yet makes its process "pending"; the loader's next
 * rendezvous in that process stops it (see loader_state), so a CUDA library
 * dlopen()ed after the session began is probed before its first call. Each
 * file stops at most the processes that map it before user space has
 * examined it once (it then goes into known_files).
 */
struct file_key {
	__u64 dev; /* as stat(2) gives st_dev (new_encode_dev) */
	__u64 ino;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct file_key);
	__type(value, __u8);
} known_files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} pending SEC(".maps");

/* Stops so far: numbers each one (the stopped map's key). */
__u64 stop_seq = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct stop);
} stopped SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct thread);
} threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192); /* 2 KiB each: 17 MiB */
	__type(key, struct slot_key);
	__type(value, struct record);
} slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct ctx_key);
	__type(value, __s32);
} contexts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct record);
} scratch SEC(".maps");

/* A block-layer record is built here, then sent with its used size. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct record);
} block_scratch SEC(".maps");

/* USDT argument specs, by spec id (filled from Go before attaching). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct usdt_spec);
} usdt_specs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct py_proc);
} py_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
} py_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct py_seen_key);
	__type(value, __u8);
} py_seen SEC(".maps");

/* One frame's bytes, read at once (one helper call per frame). */
struct py_buf {
	/* The bytes in b: [wbase, wend). Kept here, not in registers, so that
	 * the verifier does not follow each window's values apart. */
	__u64 wbase, wend;
	__u8 b[PY_WINDOW + PY_FRAME_READ + 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_buf);
} py_scratch SEC(".maps");

static __always_inline int traced(__u64 id)
{
	if (trace_all)
		return 1;
	__u32 tgid = id >> 32;
	return bpf_map_lookup_elem(&targets, &tgid) != 0;
}

static __always_inline __u64 wakeup_flag(void)
{
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

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

/* The kernel's task fields read here, relocated by CO-RE against the
 * running kernel's BTF. */
struct thread_struct {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct tty_struct;

struct signal_struct {
	int group_exit_code;
	struct tty_struct *tty; /* the controlling terminal; NULL: none */
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	int exit_code;
	unsigned int ptrace; /* PT_* flags; 0: not traced by a debugger */
	struct signal_struct *signal;
	struct thread_struct thread;
	struct task_struct *group_leader;
	__u64 start_boottime;
} __attribute__((preserve_access_index));

/* py_read reads the u64 at a user address, 0 when unreadable. */
static __always_inline __u64 py_read(__u64 addr)
{
	__u64 v = 0;
	if (addr)
		bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

/* py_find_thread returns the thread state in the list from ts whose field
 * at off is want, 0 when none. A global function (see py_window). */
__attribute__((noinline)) __u64 py_find_thread(struct py_proc *pp, __u64 ts, __s32 off, __u64 want)
{
	if (!pp)
		return 0;
	for (int j = 0; j < MAX_PY_THREADS && ts; j++) {
		if (py_read(ts + off) == want)
			return ts;
		ts = py_read(ts + pp->thread_next);
	}
	return 0;
}

/*
 * py_thread_state finds the calling thread's PyThreadState: the cached one
 * when its thread id is still this thread's, else a search of every
 * interpreter's thread list. Matching by native thread id (not the GIL
 * holder) finds threads that released the GIL around a C call, as ctypes
 * and PyTorch do.
 */
static __always_inline __u64 py_thread_state(struct py_proc *pp, __u64 id)
{
	/* 3.11+: the native thread id; 3.10: pthread_self(), which glibc on
	 * x86-64 makes the thread's fs base. */
	__s32 off = pp->thread_native_id;
	__u64 want = (__u32)id;
	if (off < 0) {
		off = pp->thread_id;
		struct task_struct *task = bpf_get_current_task_btf();
		want = task->thread.fsbase;
	}
	if (off < 0 || !want)
		return 0;
	__u64 *cached = bpf_map_lookup_elem(&py_threads, &id);
	if (cached && *cached && py_read(*cached + off) == want)
		return *cached;

	__u64 interp = py_read(pp->runtime + pp->interp_head);
	for (int i = 0; i < MAX_PY_INTERPS && interp; i++) {
		__u64 ts = py_find_thread(pp, py_read(interp + pp->interp_threads), off, want);
		if (ts) {
			bpf_map_update_elem(&py_threads, &id, &ts, BPF_ANY);
			return ts;
		}
		interp = py_read(interp + pp->interp_next);
	}
	return 0;
}

/*
 * py_window reads into buf the window that ends with the frame at fp (size
 * bytes), its callers below it, from no lower than the start of its page
 * (the page below may be unmapped). Non-zero when unreadable. A global
 * function: the verifier checks it once, not in each iteration of the
 * frame loop.
 */
__attribute__((noinline)) int py_window(struct py_buf *buf, __u64 fp, __u32 size)
{
	if (!buf)
		return -1;
	__u64 start = fp + size - PY_WINDOW;
	__u64 page = fp & ~4095ULL;
	if (fp + size < PY_WINDOW || start < page)
		start = page;
	if (start > fp)
		start = fp;
	__u32 len = fp + size - start;
	len &= 2 * PY_WINDOW - 1;
	if (len > PY_WINDOW)
		len = PY_WINDOW;
	if (bpf_probe_read_user(buf->b, len, (void *)start))
		return -1;
	buf->wbase = start;
	buf->wend = start + len;
	return 0;
}

/* py_u64 reads the 8 bytes at byte at + off of buf. */
static __always_inline __u64 py_u64(struct py_buf *buf, __u32 at, __u32 off)
{
	return *(__u64 *)&buf->b[(at & (PY_WINDOW - 1)) + (off & (PY_FRAME_READ - 1))];
}

/*
 * py_frame records the frame at fp into r->stack[idx] and [idx + 1] (code,
 * then instruction with the owner byte on top) and returns the previous
 * frame; on a failed read it sets REC_F_PY_BROKEN and records nothing. A
 * global function (see py_window).
 */
__attribute__((noinline)) __u64 py_frame(struct py_proc *pp, struct py_buf *buf, struct record *r, __u64 fp, __u32 idx)
{
	if (!pp || !buf || !r)
		return 0;
	__u32 size = pp->frame_size;
	if (size > PY_FRAME_READ)
		size = PY_FRAME_READ;
	if ((fp < buf->wbase || fp + size > buf->wend) && py_window(buf, fp, size)) {
		r->flags |= REC_F_PY_BROKEN;
		return 0;
	}
	__u32 at = fp - buf->wbase;
	__u64 code = py_u64(buf, at, pp->frame_code);
	__u64 instr = py_u64(buf, at, pp->frame_instr);
	if (pp->frame_instr_size == 4)
		instr &= 0xffffffff;
	instr &= 0x00ffffffffffffffULL;
	if (pp->frame_owner >= 0)
		instr |= (py_u64(buf, at, pp->frame_owner) & 0xff) << 56;
	r->stack[idx & (PY_SLOTS - 1)] = code;
	r->stack[(idx + 1) & (PY_SLOTS - 1)] = instr;
	return py_u64(buf, at, pp->frame_previous);
}

/*
 * walk_python appends the calling thread's Python frames after the native
 * ones (see the contract header) when the process runs a CPython user
 * space has described. One read serves the frames that lie in the
 * PY_WINDOW bytes below the one it was made for, in its page; the chain
 * ends at a NULL previous, a failed read (REC_F_PY_BROKEN) or the
 * depth limit (REC_F_PY_TRUNC). Returns a hash of the code objects, 0 when
 * no Python frame was recorded.
 */
__attribute__((noinline)) __u64 walk_python(struct record *r, __u64 id)
{
	if (!r)
		return 0;
	__u32 tgid = id >> 32;
	struct py_proc *pp = bpf_map_lookup_elem(&py_procs, &tgid);
	if (!pp)
		return 0;
	__u32 zero = 0;
	struct py_buf *buf = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!buf)
		return 0;
	__u64 ts = py_thread_state(pp, id);
	if (!ts)
		return 0;
	__u64 fp = py_read(ts + pp->thread_frame);
	if (pp->cframe_current >= 0)
		fp = py_read(fp + pp->cframe_current);

	__u32 base = r->nframes;
	if (base > MAX_FRAMES)
		base = MAX_FRAMES;
	__u32 depth = pp->depth;
	__u64 hash = 0xcbf29ce484222325ULL;
	__u32 n = 0;
	buf->wbase = 0;
	buf->wend = 0;
	for (int i = 0; i < MAX_PY_FRAMES; i++) {
		if (!fp)
			break;
		if (i >= depth) {
			r->flags |= REC_F_PY_TRUNC;
			break;
		}
		__u32 idx = base + 2 * i;
		fp = py_frame(pp, buf, r, fp, idx);
		if (r->flags & REC_F_PY_BROKEN)
			break;
		hash = (hash ^ r->stack[idx & (PY_SLOTS - 1)]) * 0x100000001b3ULL;
		n = i + 1;
	}
	r->npy = n;
	return n ? hash : 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} py_new SEC(".maps");

/*
 * py_new_stack reports whether this process has not sent this set of code
 * objects before, and then announces them on py_new: user space must read
 * them while the process lives.
 */
static __always_inline int py_new_stack(struct record *r, __u64 hash, __u64 id)
{
	if (!hash)
		return 0;
	struct py_seen_key k = {.hash = hash, .tgid = id >> 32};
	if (bpf_map_lookup_elem(&py_seen, &k))
		return 0;
	__u8 one = 1;
	bpf_map_update_elem(&py_seen, &k, &one, BPF_ANY);

	struct py_codes *c = bpf_ringbuf_reserve(&py_new, sizeof(*c), 0);
	if (!c) {
		__sync_fetch_and_add(&lost, 1);
		return 1;
	}
	__u32 base = r->nframes, n = r->npy;
	if (base > MAX_FRAMES)
		base = MAX_FRAMES;
	c->tgid = id >> 32;
	c->n = n > MAX_PY_FRAMES ? MAX_PY_FRAMES : n;
	/* The (code, instr) pairs as they are: user space takes every other
	 * one. One copy, no loop for the verifier to walk. */
	__u32 bytes = 2 * c->n * sizeof(__u64);
	if (bytes > sizeof(c->pairs))
		bytes = sizeof(c->pairs);
	if (bpf_probe_read_kernel(c->pairs, bytes, &r->stack[base & (PY_SLOTS / 2 - 1)]))
		c->n = 0;
	bpf_ringbuf_submit(c, BPF_RB_FORCE_WAKEUP);
	return 1;
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

/*
 * thread_state returns the calling thread's state, creating it for a thread
 * of a target. A thread has state only once it is known to be a target's,
 * so an existing state spares the targets lookup on the hot path.
 */
static __always_inline struct thread *thread_state(__u64 id)
{
	struct thread *th = bpf_map_lookup_elem(&threads, &id);
	if (th)
		return th;
	if (!traced(id))
		return 0;
	struct thread init = {.depth = 0, .device = -1, .since = 0};
	bpf_map_update_elem(&threads, &id, &init, BPF_ANY);
	return bpf_map_lookup_elem(&threads, &id);
}

/* slot returns the record slot of a thread at a depth, creating it once. */
static __always_inline struct record *slot(struct slot_key *key)
{
	struct record *r = bpf_map_lookup_elem(&slots, key);
	if (r)
		return r;
	__u32 zero = 0;
	struct record *init = bpf_map_lookup_elem(&scratch, &zero);
	if (!init)
		return 0;
	init->kind = REC_IDLE;
	if (bpf_map_update_elem(&slots, key, init, BPF_ANY))
		return 0;
	return bpf_map_lookup_elem(&slots, key);
}

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
 * call_enter: entry of every traced function. Records the arguments the
 * cookie's shape names into the thread's slot at its current depth, and the
 * user stack for the outermost call that gets or releases memory (nested
 * calls share it), and the Python frames for one that gets memory.
 */
static __always_inline int do_call_enter(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct thread *th = thread_state(id);
	if (!th)
		return 0;
	__u32 depth = th->depth;
	th->depth = depth + 1;
	if (depth >= MAX_DEPTH)
		return 0;

	struct slot_key key = {.id = id, .depth = depth};
	struct record *r = slot(&key);
	if (!r) {
		__sync_fetch_and_add(&unpaired, 1);
		return 0;
	}
	__u64 cookie = bpf_get_attach_cookie(ctx);
	fill_common(r, id, (__u8)(cookie >> 16));
	r->api = (__u16)cookie;
	r->shape = (__u8)(cookie >> 24);
	r->device = th->device;
	if (depth > 0)
		r->flags = REC_F_NESTED;
	else
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
		r->device = (__s32)a1;
		break;
	case SHAPE_CTX_RETAIN:
		r->addr = a1;
		r->device = (__s32)a2;
		break;
	case SHAPE_CTX_CREATE:
		r->addr = a1;
		r->device = (__s32)PT_REGS_PARM3(ctx);
		break;
	case SHAPE_CTX_SET:
		r->addr = a1;
		break;
	}

	if (depth == 0 && stacked(r->kind)) {
		bpf_probe_read_user(&r->caller, sizeof(r->caller), (void *)PT_REGS_SP(ctx));
		walk_user_stack(ctx, r);
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
 * call_return: completes the thread's slot at its depth with the result
 * and sends it. Out-pointers are read only on success: on failure they may
 * be unset or garbage.
 */
static __always_inline void send_return(struct pt_regs *ctx, struct thread *th, __u64 id, __u32 depth);

static __always_inline int do_call_return(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct thread *th = bpf_map_lookup_elem(&threads, &id);
	if (!th || th->depth == 0) {
		/* Attached while this thread was inside the call. */
		if (traced(id))
			__sync_fetch_and_add(&unpaired, 1);
		return 0;
	}
	__u32 depth = th->depth - 1;
	th->depth = depth;
	if (depth < MAX_DEPTH)
		send_return(ctx, th, id, depth);
	/* After the record is in the ring (see threads in the header). */
	if (depth == 0)
		th->since = 0;
	return 0;
}

static __always_inline void send_return(struct pt_regs *ctx, struct thread *th, __u64 id, __u32 depth)
{
	struct slot_key key = {.id = id, .depth = depth};
	struct record *r = bpf_map_lookup_elem(&slots, &key);
	if (!r || r->kind == REC_IDLE) {
		__sync_fetch_and_add(&unpaired, 1);
		return;
	}

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
	case SHAPE_SET_DEVICE:
		if (ok)
			th->device = r->device;
		break;
	case SHAPE_CTX_RETAIN:
	case SHAPE_CTX_CREATE: {
		/* Learn which device a context belongs to; nothing to send. */
		if (ok) {
			struct ctx_key k = {.ctx = read_out(r->addr), .tgid = id >> 32};
			__s32 dev = r->device;
			bpf_map_update_elem(&contexts, &k, &dev, BPF_ANY);
		}
		r->kind = REC_IDLE;
		return;
	}
	case SHAPE_CTX_SET: {
		struct ctx_key k = {.ctx = r->addr, .tgid = id >> 32};
		__s32 *dev = bpf_map_lookup_elem(&contexts, &k);
		r->device = dev ? *dev : -1;
		r->addr = 0;
		if (ok)
			th->device = r->device;
		break;
	}
	}

	__u64 wake = r->flags & REC_F_WAKE ? BPF_RB_FORCE_WAKEUP : wakeup_flag();
	if (bpf_ringbuf_output(&events, r, record_size(r), wake))
		__sync_fetch_and_add(&lost, 1);
	r->kind = REC_IDLE;
	return;
}

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

SEC("uretprobe/call_return")
int call_return(struct pt_regs *ctx)
{
	return do_call_return(ctx);
}

SEC("uprobe.multi/call_enter")
int call_enter_multi(struct pt_regs *ctx)
{
	return do_call_enter(ctx);
}

SEC("uretprobe.multi/call_return")
int call_return_multi(struct pt_regs *ctx)
{
	return do_call_return(ctx);
}

/*
 * reg_value reads the pt_regs field at a byte offset. The common registers
 * are direct context loads (a helper call each would cost more than the
 * rest of the probe); anything else, such as %ah at an odd offset, goes
 * through bpf_probe_read_kernel.
 */
static __always_inline __u64 reg_value(struct pt_regs *ctx, __u16 off)
{
	switch (off) {
	case 0: return ctx->r15;
	case 8: return ctx->r14;
	case 16: return ctx->r13;
	case 24: return ctx->r12;
	case 32: return ctx->rbp;
	case 40: return ctx->rbx;
	case 48: return ctx->r11;
	case 56: return ctx->r10;
	case 64: return ctx->r9;
	case 72: return ctx->r8;
	case 80: return ctx->rax;
	case 88: return ctx->rcx;
	case 96: return ctx->rdx;
	case 104: return ctx->rsi;
	case 112: return ctx->rdi;
	case 152: return ctx->rsp;
	}
	__u64 v = 0;
	if (off <= sizeof(struct pt_regs) - 8)
		bpf_probe_read_kernel(&v, sizeof(v), (void *)ctx + off);
	return v;
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
	int bytes = a->size < 0 ? -a->size : a->size;
	if (bytes <= 0 || bytes >= 8)
		return v;
	int shift = 64 - bytes * 8;
	if (a->size < 0)
		return (__u64)(((__s64)(v << shift)) >> shift);
	return (v << shift) >> shift;
}

/*
 * usdt_block: a framework allocator's USDT probe (PyTorch's
 * pytorch:malloc(ptr, device, size, stream) and pytorch:free(ptr)),
 * attached with its semaphore's reference counter so the probe is live.
 * Entry only: the probe is a nop inside C++ code, where a uretprobe would
 * break exception unwinding. Cookie: bits 0-15 API, 16-23 kind (alloc or
 * free), 32-63 the spec id in usdt_specs. Arguments by position: 0 the
 * pointer, 1 the device, 2 the size, 3 the stream.
 */
SEC("uprobe/usdt_block")
int usdt_block(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id))
		return 0;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 spec_id = cookie >> 32;
	struct usdt_spec *spec = bpf_map_lookup_elem(&usdt_specs, &spec_id);
	__u32 zero = 0;
	struct record *r = bpf_map_lookup_elem(&block_scratch, &zero);
	if (!spec || !r)
		return 0;
	fill_common(r, id, (__u8)(cookie >> 16));
	r->api = (__u16)cookie;
	r->flags = REC_F_BLOCK;
	r->addr = usdt_value(ctx, &spec->args[0]);
	if (r->kind == REC_ALLOC) {
		r->device = (__s32)usdt_value(ctx, &spec->args[1]);
		r->size = usdt_value(ctx, &spec->args[2]);
		r->stream = usdt_value(ctx, &spec->args[3]);
		/* A probe site is not a function entry: the caller's return
		 * address is not at sp, and the frame-pointer walk is whole. */
		walk_user_stack(ctx, r);
		if (py_new_stack(r, walk_python(r, id), id))
			r->flags |= REC_F_WAKE;
	}
	__u64 wake = r->flags & REC_F_WAKE ? BPF_RB_FORCE_WAKEUP : wakeup_flag();
	if (bpf_ringbuf_output(&events, r, record_size(r), wake))
		__sync_fetch_and_add(&lost, 1);
	return 0;
}

/* ==== allocator specs (block layer): begin ====
 *
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
	__type(key, __u64); /* pid_tgid */
	__type(value, struct spec_call);
} spec_calls SEC(".maps");

/* Entry-only records are built here; it also seeds new spec_calls slots. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct spec_call);
} spec_scratch SEC(".maps");

struct spec_contract {
	enum spec_flags flags;
} spec_contract_types __attribute__((unused));

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

SEC("uprobe/spec_enter")
int spec_enter(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id))
		return 0;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 spec_id = cookie >> 32;
	struct usdt_spec *spec = bpf_map_lookup_elem(&usdt_specs, &spec_id);
	if (!spec)
		return 0;
	int at_return = (cookie >> 24) & SPEC_F_AT_RETURN;
	__u32 zero = 0;
	struct spec_call *c = at_return ? spec_slot(id) : bpf_map_lookup_elem(&spec_scratch, &zero);
	if (!c) {
		__sync_fetch_and_add(&unpaired, 1);
		return 0;
	}
	__u64 sp = PT_REGS_SP(ctx), ra = 0;
	bpf_probe_read_user(&ra, sizeof(ra), (void *)sp);
	if (at_return && c->r.kind != REC_IDLE && c->sp > sp) {
		__u64 outer = 0;
		bpf_probe_read_user(&outer, sizeof(outer), (void *)c->sp);
		if (outer == c->ra)
			return 0; /* inside a spec'd call in flight: it counts */
	}
	struct record *r = &c->r;
	c->sp = sp;
	c->ra = ra;
	fill_common(r, id, (__u8)(cookie >> 16));
	r->api = (__u16)cookie;
	r->flags = REC_F_BLOCK;
	/* The thread's current device, read but never created here. */
	struct thread *th = bpf_map_lookup_elem(&threads, &id);
	if (th)
		r->device = th->device;
	r->addr = usdt_value(ctx, &spec->args[0]);
	r->size = usdt_value(ctx, &spec->args[2]);
	if (r->kind == REC_ALLOC) {
		r->caller = ra;
		walk_user_stack(ctx, r);
		if (py_new_stack(r, walk_python(r, id), id))
			r->flags |= REC_F_WAKE;
	}
	if (!at_return)
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
/* ==== allocator specs (block layer): end ==== */

/*
 * fork: a target's child is a target too (DataLoader workers, launchers
 * starting ranks). Threads share their process's tgid and are skipped.
 */

/*
 * stop_target stops the calling process with SIGSTOP for user space to
 * probe its new mappings, and marks r (REC_F_STOPPED, the sequence number
 * in addr) and returns 1 when it did. The process goes into
 * stopped first: whoever resumes it (vramprof, or its guardian when
 * vramprof died) finds it there, and tells a reused PID apart by the start
 * time, which /proc/PID/stat shows in clock ticks. A process that cannot be
 * listed is not stopped: nobody would know to resume it.
 */
static __always_inline int stop_target(struct record *r, __u32 tgid)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 seq = __sync_fetch_and_add(&stop_seq, 1) + 1;
	struct stop st = {
		.start = task->group_leader->start_boottime,
		.tgid = tgid,
	};
	if (bpf_map_update_elem(&stopped, &seq, &st, BPF_NOEXIST))
		return 0;
	if (bpf_send_signal(SIGSTOP)) {
		bpf_map_delete_elem(&stopped, &seq);
		return 0;
	}
	r->addr = seq;
	r->flags = REC_F_STOPPED;
	return 1;
}

/* announce sends a record about a target's life (fork, exec, exit). */
static __always_inline void announce(__u32 tgid, __u32 tid, __u8 kind, __u64 addr, int stop)
{
	struct record *r = bpf_ringbuf_reserve(&events, RECORD_HEADER_SIZE, 0);
	if (!r) {
		__sync_fetch_and_add(&lost, 1);
		return;
	}
	fill_common(r, (__u64)tgid << 32 | tid, kind);
	r->addr = addr;
	if (stop)
		stop_target(r, tgid);
	bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
}

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
 * the job in the background after the SIGCONT.
 */
static __always_inline int may_stop_other(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	return !task->ptrace && !task->signal->tty;
}

/*
 * loader_state: entry of the dynamic loader's _dl_debug_state, which it
 * calls around every change to the link map (dlopen, dlclose, and the
 * initial load). The target is stopped so that user space can scan its new
 * mappings and attach before the first call into a new CUDA library; user
 * space sends SIGCONT when it is done. With trace_all, other processes are
 * announced but not stopped (stopping every process on the host at every
 * dlopen is not ours to do), unless it mapped a file user space has not
 * examined yet (pending, see file_faulted) and may_stop_other allows it.
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
	if (target)
		stop_target(r, tgid);
	else if (bpf_map_lookup_elem(&pending, &tgid)) {
		bpf_map_delete_elem(&pending, &tgid);
		if (may_stop_other())
			stop_target(r, tgid);
	}
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
 * file_faulted makes the calling process pending when mapping's file is
 * not in known_files (trace_all; a process that is not a target: targets
 * are stopped at every rendezvous anyway).
 */
static __always_inline void file_faulted(struct address_space *mapping)
{
	if (!trace_all || !mapping)
		return;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (bpf_map_lookup_elem(&targets, &tgid))
		return;
	struct inode *in = mapping->host;
	if (!in)
		return;
	__u32 kdev = in->i_sb->s_dev;
	__u32 major = kdev >> 20, minor = kdev & 0xfffff;
	struct file_key key = {
		.dev = (minor & 0xff) | (major << 8) | ((__u64)(minor & ~0xffu) << 12),
		.ino = in->i_ino,
	};
	if (bpf_map_lookup_elem(&known_files, &key))
		return;
	__u8 one = 1;
	bpf_map_update_elem(&pending, &tgid, &one, BPF_ANY);
}

/*
 * map_fault, map_pages (trace_all only; attached by AttachAll): a process's
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
