// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * bare: the floor vramprof's overhead is measured against. The same attach
 * points as vramprof.bpf.c (uprobe + uretprobe on the allocation function,
 * uprobe on the free function), each program only counting its hits. What
 * vramprof costs beyond this is its own work: stacks, pairing, the ring
 * buffer, the reader.
 *
 * Globals read from Go: enters, returns, frees. Minimum kernel: 5.15.
 */

#include "common.h"

char __license[] SEC("license") = "Dual BSD/GPL";

__u64 enters = 0;
__u64 returns = 0;
__u64 frees = 0;

SEC("uprobe/count_enter")
int count_enter(void *ctx)
{
	__sync_fetch_and_add(&enters, 1);
	return 0;
}

SEC("uretprobe/count_return")
int count_return(void *ctx)
{
	__sync_fetch_and_add(&returns, 1);
	return 0;
}

SEC("uprobe/count_free")
int count_free(void *ctx)
{
	__sync_fetch_and_add(&frees, 1);
	return 0;
}
