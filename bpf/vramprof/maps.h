// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

/*
 * maps.h: the globals and maps every program shares (see "Maps" in the
 * contract header of vramprof.bpf.c), and their accessors: the target
 * filter, the wakeup policy of the events ring, per-thread state and the
 * record slots of calls in flight.
 */

#ifndef VRAMPROF_MAPS_H
#define VRAMPROF_MAPS_H

#include "common.h"
#include "records.h"
#include "task.h"

#define BPF_RB_NO_WAKEUP	   (1ULL << 0)
#define BPF_RB_FORCE_WAKEUP	   (1ULL << 1)
#define BPF_RB_AVAIL_DATA	   0
/* Task local storage (kernel 5.12+ in tracing programs); common.h predates it. */
#define MAP_TYPE_TASK_STORAGE	   29
#define MAP_F_NO_PREALLOC	   1
#define LOCAL_STORAGE_GET_F_CREATE 1

struct ctx_key {
	__u64 ctx; /* CUcontext */
	__u32 tgid;
	__u32 pad;
};
/* Set from Go before load. */
volatile const __u64 wakeup_bytes = 256 * 1024;
volatile const __u8 trace_all = 0;
/* vramprof's own process: its faults only answer resolve_key. */
volatile const __u32 self_tgid = 0;

/*
 * Set from Go after load, once map_fault and map_pages watch every file
 * mapping (probes/loaded.go): a target is stopped at its loader's
 * rendezvous only when it faulted on a file user space has not examined
 * since its last stop (pending), not at every rendezvous. 0 (the watch
 * could not be attached): at every one.
 */
volatile __u8 quiet = 0;

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
 * Runtimes loaded after the start (trace_all, or a quiet session's targets): a page fault on
 * a mapping of a file user space has not examined yet makes its process
 * "pending"; the loader's next rendezvous in that process stops it (see
 * loader_state), so a CUDA library dlopen()ed after the session began is
 * probed before its first call. Each file stops at most the processes that
 * map it before user space has examined it once (it then goes into
 * known_files); a file examined before any process maps it (a CUDA library
 * on a target's search path) stops nobody.
 */
struct file_key {
	__u64 dev; /* as stat(2) gives st_dev (new_encode_dev) */
	__u64 ino;
};

/* known_files values. */
enum known {
	KNOWN_EXAMINED = 1, /* nothing to probe there, or data */
	KNOWN_PROBED = 2,   /* probed: a mapping of it is announced (REC_MAPPED) */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct file_key);
	__type(value, enum known);
} known_files SEC(".maps");

/*
 * mapped: the processes (tgid and start time: a reused PID is another
 * process) that have announced mapping a probed file (REC_MAPPED), once
 * each. A file probed before a process maps it stops nobody, and the
 * process may be gone before user space reads its maps: the record names
 * the file and the process, so that both are described all the same.
 */
struct mapped_key {
	__u64 dev;
	__u64 ino;
	__u64 start; /* task->group_leader->start_boottime */
	__u32 tgid;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct mapped_key);
	__type(value, __u8);
} mapped SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} pending SEC(".maps");

/*
 * resolve_key (trace_all or quiet): a thread of vramprof's own (self_tgid) that
 * user space put here gets the key of the next file it faults on. On a
 * stacked file system (overlayfs: every container's root) stat(2) gives
 * the overlay's device, while a fault's mapping is the file underneath:
 * user space maps and touches a file it has examined, so as to put the
 * key the faults carry into known_files too (probes/loaded.go, realKey).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct file_key);
} resolve_key SEC(".maps");

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

/* A traced thread's calls in flight, from its first traced call on (8.4 KiB). */
struct {
	__uint(type, MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, MAP_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread_calls);
} calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct ctx_key);
	__type(value, __s32);
} contexts SEC(".maps");

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
/*
 * thread_state returns the calling thread's entry in threads, creating it
 * for a thread of a target. A thread has one only once it is known to be a
 * target's, so an existing entry spares the targets lookup; user space
 * deletes a process's entries when it stops tracing it. Looked up at an
 * outermost call only: it is the target filter, and since is its news.
 */
static __always_inline struct thread *thread_state(__u64 id)
{
	struct thread *th = bpf_map_lookup_elem(&threads, &id);
	if (th)
		return th;
	if (!traced(id))
		return 0;
	struct thread init = {.since = 0};
	bpf_map_update_elem(&threads, &id, &init, BPF_ANY);
	return bpf_map_lookup_elem(&threads, &id);
}

/* clear_since marks the thread id as having no call in flight, once the
 * record of its last one is in the ring buffer. */
static __always_inline void clear_since(__u64 id)
{
	struct thread *th = bpf_map_lookup_elem(&threads, &id);
	if (th)
		th->since = 0;
}

/* thread_calls returns the calling thread's calls in flight, creating them
 * when create is set (a thread of a target: thread_state said so). */
static __always_inline struct thread_calls *thread_calls(int create)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct thread_calls *tc = bpf_task_storage_get(&calls, task, 0, 0);
	if (tc || !create)
		return tc;
	tc = bpf_task_storage_get(&calls, task, 0, LOCAL_STORAGE_GET_F_CREATE);
	if (tc && !tc->ready) {
		tc->device = -1;
		tc->ready = 1;
	}
	return tc;
}

#endif /* VRAMPROF_MAPS_H */
