/*
 * pool_steady: a training loop through the caching allocator. load_model
 * (weights 64 MiB, 32 MiB, 16 MiB + 1000, 600 KiB), 50 x (forward:
 * activations 8 MiB, 4 MiB, 2 MiB + 12345, 1 MiB, 300 KiB; backward:
 * gradients 16 MiB, 8 MiB, 3000000, 777; optimizer_step frees both), then
 * teardown frees the weights and empties the cache. The allocator makes its
 * 7 segments (64, 32, 18, 2, 20, 16, 20 MiB: 180355072 bytes) in load_model
 * and the first iteration and reuses them ever after; teardown's
 * empty_cache releases all 7.
 */
#include "pool.h"

#define NW 4
#define NA 5
#define NG 4

static const size_t weight_sizes[NW] = {64 * MiB, 32 * MiB, 16 * MiB + 1000, 600 * 1024};
static const size_t activation_sizes[NA] = {8 * MiB, 4 * MiB, 2 * MiB + 12345, 1 * MiB,
					    300 * 1024};
static const size_t gradient_sizes[NG] = {16 * MiB, 8 * MiB, 3000000, 777};

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

NOINLINE void teardown(void)
{
	for (int i = 0; i < NW; i++)
		C10_FREE(weights[i]);
	C10_EMPTY_CACHE();
}

int main(void)
{
	pool_truth_init("pool_steady");
	load_model();
	for (int i = 0; i < 50; i++) {
		forward();
		backward();
		optimizer_step();
	}
	pool_print_stats("pool_steady before teardown");
	teardown();
	return 0;
}
