/*
 * leak: the steady loop for 100 iterations, plus cache_activations keeping
 * one buffer of 1 MiB + i*4096 bytes per iteration i, never freed.
 * Live at end: sum over i<100 of (1048576 + 4096*i) = 125132800 bytes, all
 * in cache_activations.
 */
#include "trainer.h"

#define ITERATIONS 100

static void *cache[ITERATIONS];

NOINLINE void cache_activations(int i)
{
	check_cuda(TRUTH_MALLOC(&cache[i], 1 * MiB + (size_t)i * 4096), __func__);
}

int main(void)
{
	struct model m = {0};

	truth_init("leak");
	load_model(&m);
	for (int i = 0; i < ITERATIONS; i++) {
		forward(&m);
		cache_activations(i);
		backward(&m);
		optimizer_step(&m);
	}
	teardown(&m);
	return 0;
}
