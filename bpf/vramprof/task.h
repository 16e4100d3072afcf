// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

/*
 * task.h: the kernel task fields the programs read, relocated by CO-RE.
 */

#ifndef VRAMPROF_TASK_H
#define VRAMPROF_TASK_H

#include "common.h"

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

#endif /* VRAMPROF_TASK_H */
