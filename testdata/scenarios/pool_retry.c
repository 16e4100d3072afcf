/*
 * pool_retry: a cudaMalloc fails, the allocator frees its cache and the
 * retry succeeds. FAKECUDA_CAPACITY defaults to 64 MiB here. warmup
 * allocates 8 MiB, 8 MiB (one 20 MiB segment), 12 MiB and 14 MiB (a segment
 * each): 46 MiB reserved; shrink frees the 12 MiB, the 14 MiB and the second
 * 8 MiB block: 38 MiB cached free (largest range 14 MiB), 18 MiB free on the
 * device. big_step asks for 28 MiB: cudaMalloc(28 MiB) fails (46 + 28 > 64),
 * the free-all releases the 12 and 14 MiB segments (26 MiB), the retry
 * (marked "retry": true) succeeds (20 + 28 <= 64); big_step frees it. finish
 * frees the first block and empties the cache. Segments: 4 cudaMalloc
 * (77594624 bytes), 1 failed, 4 cudaFree, peak 50331648, live at end 0.
 * Blocks: 5 allocations, 73400320 bytes, peak 44040192.
 */
#include "pool.h"

#include <stdlib.h>

static void *a, *b, *c, *d;

NOINLINE void warmup(void)
{
	a = C10_MUST_ALLOC(8 * MiB);
	b = C10_MUST_ALLOC(8 * MiB);
	c = C10_MUST_ALLOC(12 * MiB);
	d = C10_MUST_ALLOC(14 * MiB);
}

NOINLINE void shrink(void)
{
	C10_FREE(c);
	C10_FREE(d);
	C10_FREE(b);
}

NOINLINE void big_step(void)
{
	void *p = C10_MUST_ALLOC(28 * MiB);
	C10_FREE(p);
}

NOINLINE void finish(void)
{
	C10_FREE(a);
	C10_EMPTY_CACHE();
}

int main(void)
{
	setenv("FAKECUDA_CAPACITY", "67108864", 0);
	pool_truth_init("pool_retry");
	warmup();
	shrink();
	big_step();
	pool_print_stats("pool_retry after big_step");
	finish();
	return 0;
}
