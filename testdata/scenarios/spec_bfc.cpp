/*
 * spec_bfc: blocks from the fake XLA BFC allocator (libtensorflow_framework.so.2,
 * ../specs/bfc_allocator.h), traced by vramprof's built-in xla_bfc spec.
 * FAKECUDA_CAPACITY defaults to 128 MiB here. load_weights allocates 8 MiB,
 * 6 MiB + 100, 4 MiB and 1 MiB + 3 (the 32 MiB first region); 10 x
 * train_step allocates 2 MiB, 3 MiB + 7, 512 KiB, 1000 and 4 MiB and frees
 * them; grow allocates 40 MiB (a 64 MiB region); too_big asks 50 MiB: no
 * free range holds it, the 128 MiB region's cudaMalloc fails (96 + 128 >
 * 128 MiB) and AllocateRaw returns nullptr; teardown frees the blocks and
 * deletes the allocator (both regions cudaFree'd). Segments: 2 allocations
 * (100663296), 1 failed, 2 frees, peak 100663296, live 0. Blocks: 55
 * allocations + 1 failed, 55 frees, 161490877 bytes, peak 61866087, live 0.
 */
#include "spec_truth.h"

#include <stdlib.h>

#include "bfc_allocator.h"

static tsl::BFCAllocator *bfc;
static void *weights[4];
static void *big;

NOINLINE static void load_weights(void)
{
	const size_t sizes[4] = {8 * MiB, 6 * MiB + 100, 4 * MiB, 1 * MiB + 3};
	for (int i = 0; i < 4; i++)
		weights[i] = SPEC_BLOCK_ALLOC(bfc->AllocateRaw(256, sizes[i]), sizes[i]);
}

NOINLINE static void train_step(void)
{
	const size_t sizes[5] = {2 * MiB, 3 * MiB + 7, 512 * 1024, 1000, 4 * MiB};
	void *acts[5];
	for (int i = 0; i < 5; i++)
		acts[i] = SPEC_BLOCK_ALLOC(bfc->AllocateRaw(256, sizes[i]), sizes[i]);
	for (int i = 4; i >= 0; i--)
		SPEC_BLOCK_FREE(bfc->DeallocateRaw(acts[i]), acts[i]);
}

NOINLINE static void grow(void)
{
	big = SPEC_BLOCK_ALLOC(bfc->AllocateRaw(256, 40 * MiB), 40 * MiB);
}

NOINLINE static void too_big(void)
{
	void *p = SPEC_BLOCK_ALLOC(bfc->AllocateRaw(256, 50 * MiB), 50 * MiB);
	if (p != nullptr)
		exit(3);
}

NOINLINE static void teardown(void)
{
	for (int i = 0; i < 4; i++)
		SPEC_BLOCK_FREE(bfc->DeallocateRaw(weights[i]), weights[i]);
	SPEC_BLOCK_FREE(bfc->DeallocateRaw(big), big);
	delete bfc;
}

int main(void)
{
	setenv("FAKECUDA_CAPACITY", "134217728", 0);
	truth_init("spec_bfc");
	bfc = new tsl::BFCAllocator(size_t(1) << 30, &spec_observer);
	load_weights();
	for (int i = 0; i < 10; i++)
		train_step();
	grow();
	too_big();
	teardown();
	return 0;
}
