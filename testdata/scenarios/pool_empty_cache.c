/*
 * pool_empty_cache: empty_cache() every iteration, the churn it costs.
 * load_model allocates a 40 MiB weight (its own segment); 20 x (train_step
 * allocates 6 MiB, 3 MiB (one 20 MiB segment), 700 KiB (a 2 MiB small
 * segment), 12 MiB (its own segment) and frees them; release_cache calls
 * empty_cache: 3 cudaFree, and the next step 3 cudaMalloc again); teardown
 * frees the weight and empties the cache. Segments: 61 cudaMalloc,
 * 61 cudaFree, 754974720 bytes, peak 77594624, live at end 0. Blocks:
 * 81 allocations, 81 frees, 496680960 bytes, peak 64679936; 21 empty_cache.
 */
#include "pool.h"

static void *weight;

NOINLINE void load_model(void)
{
	weight = C10_MUST_ALLOC(40 * MiB);
}

NOINLINE void train_step(void)
{
	static const size_t sizes[4] = {6 * MiB, 3 * MiB, 700 * 1024, 12 * MiB};
	void *p[4];

	for (int i = 0; i < 4; i++)
		p[i] = C10_MUST_ALLOC(sizes[i]);
	for (int i = 0; i < 4; i++)
		C10_FREE(p[i]);
}

NOINLINE void release_cache(void)
{
	C10_EMPTY_CACHE();
}

NOINLINE void teardown(void)
{
	C10_FREE(weight);
	C10_EMPTY_CACHE();
}

int main(void)
{
	pool_truth_init("pool_empty_cache");
	load_model();
	for (int i = 0; i < 20; i++) {
		train_step();
		release_cache();
	}
	teardown();
	return 0;
}
