// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

/*
 * lifecycle.h: records about a target's life (fork, exec, exit, loader
 * changes), and the stop that holds a target for user space.
 */

#ifndef VRAMPROF_LIFECYCLE_H
#define VRAMPROF_LIFECYCLE_H

#include "common.h"
#include "records.h"
#include "maps.h"
#include "task.h"

#define SIGSTOP 19

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

#endif /* VRAMPROF_LIFECYCLE_H */
