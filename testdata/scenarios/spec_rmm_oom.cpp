/*
 * spec_rmm_oom: RMM's pool throws rmm::out_of_memory out of do_allocate
 * and the caller catches it, ten times, and the process goes on and exits
 * 0. A uretprobe on do_allocate would turn each throw into a terminate
 * (the unwinder cannot pass its trampoline): vramprof has none there.
 * FAKECUDA_CAPACITY defaults to 64 MiB here; the pool takes 32 MiB. 10 x
 * attempt: allocate 20 MiB, ask 48 MiB (the pool grows by 48 MiB: the
 * cudaMalloc fails, 32 + 48 > 64, and cuda_memory_resource throws through
 * the pool's do_allocate; caught here), deallocate the 20 MiB. finish
 * allocates 8 MiB and 5 MiB + 1, frees them, deletes the pool. The thrown
 * requests hand out nothing: they are not block allocations (vramprof sees
 * their entries only, and records nothing for them). Segments: 1
 * allocation (33554432), 10 failed, 1 free, peak 33554432, live 0. Blocks:
 * 12 allocations, 12 frees, 223346689 bytes, peak 20971520, live 0.
 */
#include "spec_truth.h"

#include <stdio.h>
#include <stdlib.h>

#include "rmm.h"

static rmm::mr::cuda_memory_resource *upstream;
static rmm::mr::device_memory_resource *pool;
static int caught;

NOINLINE static void attempt(void)
{
	void *p = SPEC_BLOCK_ALLOC(pool->allocate(20 * MiB), 20 * MiB);
	try {
		void *q = pool->allocate(48 * MiB);
		fprintf(stderr, "spec_rmm_oom: 48 MiB did not fail (%p)\n", q);
		exit(3);
	} catch (rmm::out_of_memory const &e) {
		caught++;
	}
	SPEC_BLOCK_FREE(pool->deallocate(p, 20 * MiB), p);
}

NOINLINE static void finish(void)
{
	void *a = SPEC_BLOCK_ALLOC(pool->allocate(8 * MiB), 8 * MiB);
	void *b = SPEC_BLOCK_ALLOC(pool->allocate(5 * MiB + 1), 5 * MiB + 1);
	SPEC_BLOCK_FREE(pool->deallocate(a, 8 * MiB), a);
	SPEC_BLOCK_FREE(pool->deallocate(b, 5 * MiB + 1), b);
	delete pool;
	delete upstream;
}

int main(void)
{
	setenv("FAKECUDA_CAPACITY", "67108864", 0);
	truth_init("spec_rmm_oom");
	upstream = new rmm::mr::cuda_memory_resource(&spec_observer);
	pool = rmm::mr::make_pool(upstream, 32 * MiB);
	for (int i = 0; i < 10; i++)
		attempt();
	finish();
	if (caught != 10) {
		fprintf(stderr, "spec_rmm_oom: caught %d exceptions, want 10\n", caught);
		return 3;
	}
	return 0;
}
