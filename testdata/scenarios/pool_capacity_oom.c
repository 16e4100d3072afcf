/*
 * pool_capacity_oom: an OOM that no defragmentation would have avoided.
 * FAKECUDA_CAPACITY defaults to 64 MiB here. load_weights allocates
 * 3 x 12 MiB (3 segments of 12 MiB); forward allocates 2 x 4 MiB (one 20 MiB
 * segment); drop_activation frees the second (it merges with the 12 MiB
 * tail). Reserved 56 MiB, allocated 40 MiB, cached free 16 MiB in one range,
 * device free 8 MiB. big_batch asks for 32 MiB: cudaMalloc(32 MiB) fails, the
 * free-all releases nothing (every segment holds a live block), the retry
 * fails: oom_kind "capacity" (16 MiB cached free < 32 MiB; even all free
 * memory, 24 MiB = capacity - allocated, is less). release_all frees the
 * live blocks, the truth is written, exit 1 (0 if it succeeded).
 */
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>

static void *weights[3], *acts[2];

NOINLINE void load_weights(void)
{
	for (int i = 0; i < 3; i++)
		weights[i] = C10_MUST_ALLOC(12 * MiB);
}

NOINLINE void forward(void)
{
	for (int i = 0; i < 2; i++)
		acts[i] = C10_MUST_ALLOC(4 * MiB);
}

NOINLINE void drop_activation(void)
{
	C10_FREE(acts[1]);
	acts[1] = NULL;
}

NOINLINE void *big_batch(void)
{
	return C10_ALLOC(32 * MiB);
}

NOINLINE void release_all(void)
{
	for (int i = 0; i < 3; i++)
		C10_FREE(weights[i]);
	C10_FREE(acts[0]);
}

int main(void)
{
	void *p;

	setenv("FAKECUDA_CAPACITY", "67108864", 0);
	pool_truth_init("pool_capacity_oom");
	load_weights();
	forward();
	drop_activation();
	pool_print_stats("pool_capacity_oom before big_batch");
	p = big_batch();
	if (p == NULL) {
		struct c10_pool_state st;
		c10_last_oom(&st);
		fprintf(stderr,
			"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %zu bytes. "
			"GPU 0 has a total capacity of %zu bytes of which %zu bytes is free. "
			"%zu bytes allocated by PyTorch, %zu reserved but unallocated\n",
			st.requested, st.device_total_bytes, st.device_free_bytes,
			st.allocated_bytes, st.cached_free_bytes);
	} else {
		C10_FREE(p);
	}
	release_all();
	if (truth_write() != 0)
		return 3;
	return p == NULL ? 1 : 0;
}
