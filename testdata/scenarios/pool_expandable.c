/*
 * pool_expandable: a training loop over the caching allocator with
 * expandable segments (main sets PYTORCH_CUDA_ALLOC_CONF=
 * expandable_segments:True when unset): no cudaMalloc; each pool reserves
 * one address range and maps pages into it as it grows (cuMemCreate +
 * cuMemMap, 2 MiB pages in the small pool, 20 MiB in the large).
 * load_model (weights 64 MiB, 32 MiB, 16 MiB + 1024, 600 KiB), 20 x
 * (forward: activations 8 MiB, 4 MiB, 2 MiB + 12288, 1 MiB, 300 KiB;
 * backward: gradients 16 MiB, 8 MiB, 2999808, 1024; optimizer_step frees
 * both), then unload_embedding frees the 64 MiB weight and empty_cache
 * unmaps every page wholly inside a free block (the range's first three
 * large pages, the activations' pages at its top, the small pool's free
 * pages). The allocator's own stats at the end (weights 32 MiB, 16 MiB +
 * 1024 and 600 KiB live) go to "$VRAMPROF_TRUTH-allocator.json".
 */
#include "pool.h"

#include <stdlib.h>

#define NW 4
#define NA 5
#define NG 4

static const size_t weight_sizes[NW] = {64 * MiB, 32 * MiB, 16 * MiB + 1024, 600 * 1024};
static const size_t activation_sizes[NA] = {8 * MiB, 4 * MiB, 2 * MiB + 12288, 1 * MiB,
					    300 * 1024};
static const size_t gradient_sizes[NG] = {16 * MiB, 8 * MiB, 2999808, 1024};

static void *weights[NW], *activations[NA], *gradients[NG];

NOINLINE void load_model(void)
{
	for (int i = 0; i < NW; i++)
		weights[i] = C10_MUST_ALLOC(weight_sizes[i]);
}

NOINLINE void forward(void)
{
	for (int i = 0; i < NA; i++)
		activations[i] = C10_MUST_ALLOC(activation_sizes[i]);
}

NOINLINE void backward(void)
{
	for (int i = 0; i < NG; i++)
		gradients[i] = C10_MUST_ALLOC(gradient_sizes[i]);
}

NOINLINE void optimizer_step(void)
{
	for (int i = 0; i < NA; i++)
		C10_FREE(activations[i]);
	for (int i = 0; i < NG; i++)
		C10_FREE(gradients[i]);
}

NOINLINE void unload_embedding(void)
{
	C10_FREE(weights[0]);
	weights[0] = NULL;
	C10_EMPTY_CACHE();
}

int main(void)
{
	setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", 0);
	pool_truth_init("pool_expandable");
	load_model();
	for (int i = 0; i < 20; i++) {
		forward();
		backward();
		optimizer_step();
	}
	unload_embedding();
	pool_print_stats("pool_expandable at the end");
	pool_write_stats("end");
	return 0;
}
