// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

/*
 * task.h: the kernel task fields the programs read, relocated by CO-RE.
 */

#ifndef VRAMPROF_TASK_H
#define VRAMPROF_TASK_H

#include "common.h"
#include "stacks.h"

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

/* A process's uprobes area ("[uprobes]" in its maps): its first slot is
 * the uretprobe trampoline, the return address a uretprobe puts on the
 * stack in place of the real one. */
struct xol_area {
	unsigned long vaddr;
} __attribute__((preserve_access_index));

struct uprobes_state {
	struct xol_area *xol_area;
} __attribute__((preserve_access_index));

struct mm_struct {
	struct uprobes_state uprobes_state;
	unsigned long arg_start, arg_end; /* argv, NUL-separated */
} __attribute__((preserve_access_index));

struct task_struct {
	struct mm_struct *mm;
	int pid;
	int tgid;
	int exit_code;
	unsigned int ptrace; /* PT_* flags; 0: not traced by a debugger */
	struct signal_struct *signal;
	struct thread_struct thread;
	struct task_struct *group_leader;
	struct task_struct *real_parent; /* the process that forked it */
	__u64 start_boottime;
} __attribute__((preserve_access_index));

/*
 * ra_in_place reports whether the return address at sp is still ra: the
 * call that found ra there at its entry has not returned (nor been unwound
 * through). Another tracer's uretprobe on the same call (bpftrace, an older
 * vramprof, any uprobe tracer on the host) replaces it with the uretprobe
 * trampoline after the entry probes ran: that is in place too. sw: the
 * calling thread's (id) stack window, if any.
 */
static __always_inline int ra_in_place(struct stack_window *sw, __u64 id, __u64 sp, __u64 ra)
{
	__u64 now = 0;
	if (stack_read(sw, id, sp, &now, 1))
		return 0;
	if (now == ra)
		return 1;
	struct task_struct *task = bpf_get_current_task_btf();
	struct mm_struct *mm = task->mm;
	if (!mm)
		return 0;
	struct xol_area *area = mm->uprobes_state.xol_area;
	return area && now == area->vaddr;
}

#endif /* VRAMPROF_TASK_H */
