/*
 * pool_expandable_oom: an OOM under expandable segments (main sets
 * PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True and FAKECUDA_CAPACITY
 * 256 MiB when unset). Large-pool pages are 20 MiB, small-pool pages 2 MiB.
 *
 * scratch_buffers allocates and frees 3 x 256 KiB: one 2 MiB small page
 * stays mapped, free. load_weights allocates 10 x 12 MiB (120 MiB, six
 * large pages, no free byte); forward 8 x 9 MiB activations (mapped up to
 * 200 MiB, 8 MiB free at the top); drop_activations frees activations 1, 3,
 * 5 and 7: three free 9 MiB ranges and 17 MiB at the top (the last one
 * merged with the free top). Reserved (mapped) 202 MiB, allocated 156 MiB,
 * cached free 46 MiB in 4 + 1 ranges, the largest 17 MiB.
 * grow_activations asks for 80 MiB: no free range fits; the allocator
 * grows the large range from its free top (17 MiB) and needs 63 MiB more,
 * four pages: cuMemCreate x 2 succeed (242 MiB), the third fails
 * (262 > 256), the two are released: 60 MiB asked of the driver. The
 * free-all unmaps the one wholly free page (the small one, 2 MiB) and no
 * large page (none lies wholly in a free range), the retry fails the same
 * way: c10_alloc returns NULL. The truth is written; exit 1.
 */
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>

#define NWEIGHTS 10
#define NACT 8

static void *weights[NWEIGHTS], *acts[NACT];

NOINLINE void scratch_buffers(void)
{
	void *p[3];

	for (int i = 0; i < 3; i++)
		p[i] = C10_MUST_ALLOC(256 * 1024);
	for (int i = 0; i < 3; i++)
		C10_FREE(p[i]);
}

NOINLINE void load_weights(void)
{
	for (int i = 0; i < NWEIGHTS; i++)
		weights[i] = C10_MUST_ALLOC(12 * MiB);
}

NOINLINE void forward(void)
{
	for (int i = 0; i < NACT; i++)
		acts[i] = C10_MUST_ALLOC(9 * MiB);
}

NOINLINE void drop_activations(void)
{
	for (int i = 1; i < NACT; i += 2) {
		C10_FREE(acts[i]);
		acts[i] = NULL;
	}
}

/* grow_activations returns the block, NULL on OOM. */
NOINLINE void *grow_activations(void)
{
	return C10_ALLOC(80 * MiB);
}

int main(void)
{
	void *p;

	setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", 0);
	setenv("FAKECUDA_CAPACITY", "268435456", 0);
	pool_truth_init("pool_expandable_oom");
	scratch_buffers();
	load_weights();
	forward();
	drop_activations();
	pool_print_stats("pool_expandable_oom before grow_activations");
	p = grow_activations();
	if (p == NULL) {
		struct c10_pool_state st;
		c10_last_oom(&st);
		fprintf(stderr,
			"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %zu bytes. "
			"%zu bytes reserved by PyTorch but unallocated after the free-all.\n",
			st.requested, st.cached_free_bytes - st.released_bytes);
	} else {
		C10_FREE(p);
	}
	pool_print_stats("pool_expandable_oom at the end");
	pool_write_stats("end");
	if (truth_write() != 0)
		return 3;
	return p == NULL ? 1 : 0;
}
