/*
 * pool_frag_worst: two failing requests, the second the worse. The
 * fragmentation finding must quote the second. FAKECUDA_CAPACITY defaults
 * to 200 MiB here (main sets it when unset).
 *
 * fill_segments allocates 6 MiB tensors until one fails: each 20 MiB
 * large-pool segment takes three (6 + 6 + 6, the 2 MiB rest split off as a
 * free block), so 30 succeed in 10 segments (200 MiB reserved, 180 MiB
 * allocated); the 31st asks cudaMalloc for a 20 MiB segment, which fails
 * (200 + 20 > 200), the free-all finds no whole free segment, the retry
 * fails: OOM, with 20 MiB (10%) cached free in 10 ranges of 2 MiB.
 * free_two_of_three frees the second and third tensor of every segment:
 * each segment's 6 + 6 + 2 MiB merge into one free 14 MiB range (140 MiB,
 * 70%, cached free; 60 MiB allocated). grow_request asks for 16 MiB: no
 * range fits, cudaMalloc(16 MiB) fails, the free-all again finds nothing,
 * the retry fails: OOM with 140 MiB cached free, largest range 14 MiB.
 * release_all frees the rest; the truth is written; exit 1.
 */
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>

#define MAXT 64

static void *tensors[MAXT];
static int ntensors;

NOINLINE void fill_segments(void)
{
	for (;;) {
		void *p = C10_ALLOC(6 * MiB);
		if (p == NULL)
			return;
		if (ntensors == MAXT)
			pool_fail(__func__, 6 * MiB);
		tensors[ntensors++] = p;
	}
}

NOINLINE void free_two_of_three(void)
{
	for (int i = 0; i < ntensors; i++) {
		if (i % 3 != 0) {
			C10_FREE(tensors[i]);
			tensors[i] = NULL;
		}
	}
}

/* grow_request returns the block, NULL on OOM. */
NOINLINE void *grow_request(void)
{
	return C10_ALLOC(16 * MiB);
}

NOINLINE void release_all(void)
{
	for (int i = 0; i < ntensors; i++)
		if (tensors[i] != NULL)
			C10_FREE(tensors[i]);
}

int main(void)
{
	void *p;

	setenv("FAKECUDA_CAPACITY", "209715200", 0);
	pool_truth_init("pool_frag_worst");
	fill_segments();
	if (ntensors != 30)
		fprintf(stderr, "pool_frag_worst: %d tensors of 6 MiB before the first OOM, not 30\n",
			ntensors);
	free_two_of_three();
	pool_print_stats("pool_frag_worst before grow_request");
	p = grow_request();
	if (p != NULL)
		C10_FREE(p);
	release_all();
	if (truth_write() != 0)
		return 3;
	return p == NULL ? 1 : 0;
}
