/*
 * spec_rmm: blocks from the fake RMM pool (librmm.so, ../specs/rmm.h),
 * traced by vramprof's built-in rmm spec. The pool takes 32 MiB at once;
 * 20 x step allocates 1 MiB + 13, 6 MiB and 700 KiB (through
 * device_memory_resource::allocate, as RMM's callers do) and deallocates
 * them; hold keeps 20 MiB, then 30 MiB (the pool grows by its initial
 * 32 MiB, more than the request rounded up to 2 MiB); release gives them
 * back and deletes the pool. Segments: 2 allocations (67108864), 2 frees,
 * peak 67108864, live 0. Blocks: 62 allocations, 62 frees, 213565700
 * bytes, peak 52428800, live 0.
 */
#include "spec_truth.h"

#include "rmm.h"

static rmm::mr::cuda_memory_resource *upstream;
static rmm::mr::device_memory_resource *pool;
static void *held[2];

NOINLINE static void step(void)
{
	const size_t sizes[3] = {1 * MiB + 13, 6 * MiB, 700 * 1024};
	void *p[3];
	for (int i = 0; i < 3; i++)
		p[i] = SPEC_BLOCK_ALLOC(pool->allocate(sizes[i]), sizes[i]);
	for (int i = 0; i < 3; i++)
		SPEC_BLOCK_FREE(pool->deallocate(p[i], sizes[i]), p[i]);
}

NOINLINE static void hold(void)
{
	held[0] = SPEC_BLOCK_ALLOC(pool->allocate(20 * MiB), 20 * MiB);
	held[1] = SPEC_BLOCK_ALLOC(pool->allocate(30 * MiB), 30 * MiB);
}

NOINLINE static void release(void)
{
	SPEC_BLOCK_FREE(pool->deallocate(held[0], 20 * MiB), held[0]);
	SPEC_BLOCK_FREE(pool->deallocate(held[1], 30 * MiB), held[1]);
	delete pool;
	delete upstream;
}

int main(void)
{
	truth_init("spec_rmm");
	upstream = new rmm::mr::cuda_memory_resource(&spec_observer);
	pool = rmm::mr::make_pool(upstream, 32 * MiB);
	for (int i = 0; i < 20; i++)
		step();
	hold();
	release();
	return 0;
}
