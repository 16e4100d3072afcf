// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * bare: the floor vramprof's overhead is measured against. The same attach
 * points and the same kind of links as vramprof.bpf.c (uprobe_multi links
 * on the entries of the allocation and the free function and on their
 * return instructions), each program only counting its hits. What vramprof
 * costs beyond this is its own work: arguments, nesting, stacks, the ring
 * buffer, the reader.
 *
 * count_return is the same count at a uretprobe (a uretprobe_multi link on
 * the functions): what vramprof paid before it stopped using uretprobes
 * (a C++ exception cannot unwind through their trampoline), priced beside
 * count_ret_insn, the plain uprobe on each return instruction it uses now.
 *
 * count_site is the same for a USDT probe site, attached as vramprof
 * attaches those: a single uprobe with the site's semaphore raised.
 *
 * Globals read from Go: enters, returns, sites. Minimum kernel: 6.6.
 */

#include "common.h"

char __license[] SEC("license") = "Dual BSD/GPL";

__u64 enters = 0;
__u64 returns = 0;
__u64 sites = 0;

SEC("uprobe.multi/count_enter")
int count_enter(void *ctx)
{
	__sync_fetch_and_add(&enters, 1);
	return 0;
}

SEC("uretprobe.multi/count_return")
int count_return(void *ctx)
{
	__sync_fetch_and_add(&returns, 1);
	return 0;
}

SEC("uprobe.multi/count_ret_insn")
int count_ret_insn(void *ctx)
{
	__sync_fetch_and_add(&returns, 1);
	return 0;
}

SEC("uprobe/count_site")
int count_site(void *ctx)
{
	__sync_fetch_and_add(&sites, 1);
	return 0;
}
