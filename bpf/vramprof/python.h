// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

/*
 * python.h: CPython frames. Where a process's interpreter keeps its state
 * (py_proc, from probes/python), the walk of the calling thread's frame
 * chain into a record, and the fast lane (py_new) that hands a new stack's
 * code objects to user space at once.
 */

#ifndef VRAMPROF_PYTHON_H
#define VRAMPROF_PYTHON_H

#include "common.h"
#include "records.h"
#include "maps.h"
#include "task.h"

#define MAX_PY_THREADS 64 /* thread states searched per interpreter */
#define MAX_PY_INTERPS 4  /* interpreters searched */
/*
 * py_proc: a traced process's CPython (probes/python.Layout). Offsets are
 * bytes; a negative one is a field the version lacks.
 */
struct py_proc {
	__u64 runtime;		/* run-time address of _PyRuntime */
	__s32 interp_head;	/* _PyRuntimeState.interpreters.head */
	__s32 interp_next;	/* PyInterpreterState.next */
	__s32 interp_threads;	/* PyInterpreterState.threads.head */
	__s32 thread_next;	/* PyThreadState.next */
	__s32 thread_native_id; /* PyThreadState.native_thread_id (3.11+), or -1 */
	__s32 thread_id;	/* PyThreadState.thread_id: pthread_self(), the fs base */
	__s32 thread_frame;	/* PyThreadState.frame / .cframe / .current_frame */
	__s32 cframe_current;	/* _PyCFrame.current_frame, or -1 */
	__s32 frame_previous;	/* frame: f_back / previous */
	__s32 frame_code;	/* frame: f_code / f_executable */
	__s32 frame_instr;	/* frame: f_lasti / prev_instr / instr_ptr */
	__s32 frame_instr_size; /* 4 or 8 */
	__s32 frame_owner;	/* frame: is_entry / owner, or -1 */
	__s32 frame_size;	/* bytes to read per frame, <= PY_FRAME_READ */
	__u32 depth;		/* frames to record, <= MAX_PY_FRAMES */
};

#define PY_FRAME_READ 128
/* Bytes read at once below a frame, within its page: 3.11+ push the frames
 * of Python calls one after the other on the thread's data stack, so a
 * caller's frame is usually just below its callee's, and one read serves
 * several frames. A whole page: a read's cost is mostly per call, not per
 * byte (stacks.h), and a page read at once is never read again for the
 * frames below. */
#define PY_WINDOW     4096

/*
 * py_codes: a Python stack's code objects, sent on py_new when a process
 * shows a set of them for the first time, so that user space reads them
 * at once, apart from the records (which wait behind the symbolization of
 * earlier stacks, and a short-lived process may be gone by then).
 */
struct py_codes {
	__u32 tgid;
	__u32 n;			/* frames */
	__u64 pairs[2 * MAX_PY_FRAMES]; /* code, instr: the record's pairs */
};


struct py_seen_key {
	__u64 hash;
	__u32 tgid;
	__u32 pad;
};
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

/*
 * One frame's bytes, read at once (one helper call per frame). Per CPU: a
 * program attached through uprobe_multi runs with migration disabled but
 * may be preempted, and the thread that runs next on this CPU may walk its
 * own frames in the same buffer. So a walk writes its thread into owner
 * first, and its frames count only when owner is still its thread once it
 * is done (whoever wrote the buffer in between wrote owner first).
 */
struct py_buf {
	__u64 owner; /* pid_tgid of the thread walking with this buffer */
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
 * py_walk records the Python frames from fp on into r, after its native
 * ones, with buf as thread id's (see struct py_buf). Returns a hash of the
 * code objects, 0 when no Python frame was recorded. A global function
 * (see py_window), run twice at most.
 */
__attribute__((noinline)) __u64 py_walk(struct py_proc *pp, struct py_buf *buf, struct record *r, __u64 fp, __u64 id)
{
	if (!pp || !buf || !r)
		return 0;
	buf->owner = id;
	buf->wbase = 0;
	buf->wend = 0;
	r->flags &= ~(REC_F_PY_TRUNC | REC_F_PY_BROKEN);
	r->npy = 0;

	__u32 base = r->nframes;
	if (base > MAX_FRAMES)
		base = MAX_FRAMES;
	__u32 depth = pp->depth;
	__u64 hash = 0xcbf29ce484222325ULL;
	__u32 n = 0;
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

/*
 * walk_python appends the calling thread's Python frames after the native
 * ones (see the contract header) when the process runs a CPython user
 * space has described. One read serves the frames that lie in the
 * PY_WINDOW bytes below the one it was made for, in its page; the chain
 * ends at a NULL previous, a failed read (REC_F_PY_BROKEN) or the
 * depth limit (REC_F_PY_TRUNC). A walk whose buffer another thread used
 * meanwhile (struct py_buf) is done again, once; twice, its frames are
 * dropped and the chain marked broken. Returns a hash of the code objects,
 * 0 when no Python frame was recorded.
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

	__u64 hash = py_walk(pp, buf, r, fp, id);
	if (*(volatile __u64 *)&buf->owner == id)
		return hash;
	hash = py_walk(pp, buf, r, fp, id);
	if (*(volatile __u64 *)&buf->owner == id)
		return hash;
	r->npy = 0;
	r->flags |= REC_F_PY_BROKEN;
	return 0;
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

#endif /* VRAMPROF_PYTHON_H */
