/*
 * pool_frag_oom: an OOM from fragmentation that expandable segments would
 * have avoided. FAKECUDA_CAPACITY defaults to 100 MiB here (main sets it when
 * unset). scratch_buffers allocates and frees 3 x 256 KiB (a fully free 2 MiB
 * small segment stays cached); fill_cache allocates 20 x 4 MiB (4 segments of
 * 20 MiB, 5 blocks each); free_every_other frees the odd ones: 10 holes of
 * 4 MiB, never adjacent. Reserved 82 MiB, allocated 40 MiB, cached free
 * 42 MiB, largest free range 4 MiB, device free 18 MiB. grow_activations asks
 * for 24 MiB: no hole fits, cudaMalloc(24 MiB) fails (82 + 24 > 100), the
 * free-all releases only the small segment (2 MiB), the retry fails
 * (80 + 24 > 100): c10_alloc returns NULL, oom_kind "fragmentation"
 * (42 MiB cached free >= 24 MiB; 18 + 42 MiB of free memory in all).
 * release_all frees the 10 live blocks (segments stay cached); the truth is
 * written and the process exits 1 (0 if the allocation succeeded).
 */
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>

#define NBLOCKS 20

static void *blocks[NBLOCKS];

NOINLINE void scratch_buffers(void)
{
	void *p[3];

	for (int i = 0; i < 3; i++)
		p[i] = C10_MUST_ALLOC(256 * 1024);
	for (int i = 0; i < 3; i++)
		C10_FREE(p[i]);
}

NOINLINE void fill_cache(void)
{
	for (int i = 0; i < NBLOCKS; i++)
		blocks[i] = C10_MUST_ALLOC(4 * MiB);
}

NOINLINE void free_every_other(void)
{
	for (int i = 1; i < NBLOCKS; i += 2) {
		C10_FREE(blocks[i]);
		blocks[i] = NULL;
	}
}

/* grow_activations returns the block, NULL on OOM. */
NOINLINE void *grow_activations(void)
{
	return C10_ALLOC(24 * MiB);
}

NOINLINE void release_all(void)
{
	for (int i = 0; i < NBLOCKS; i++)
		if (blocks[i] != NULL)
			C10_FREE(blocks[i]);
}

int main(void)
{
	void *p;

	setenv("FAKECUDA_CAPACITY", "104857600", 0);
	pool_truth_init("pool_frag_oom");
	scratch_buffers();
	fill_cache();
	free_every_other();
	pool_print_stats("pool_frag_oom before grow_activations");
	p = grow_activations();
	if (p == NULL) {
		struct c10_pool_state st;
		c10_last_oom(&st);
		fprintf(stderr,
			"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %zu bytes. "
			"%zu bytes reserved by PyTorch but unallocated, largest free range %zu "
			"bytes. If reserved but unallocated memory is large try setting "
			"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n",
			st.requested, st.cached_free_bytes, st.largest_free_range);
	} else {
		C10_FREE(p);
	}
	release_all();
	if (truth_write() != 0)
		return 3;
	return p == NULL ? 1 : 0;
}
