/*
 * pool_leak_cached: a leak of tensors hidden inside cached segments.
 * load_model makes two weights (32 MiB, 8 MiB + 4096); then STEPS (40)
 * training steps of about 20 ms, each: forward (activations 6 MiB,
 * 3 MiB + 512, 700 KiB), backward (gradients 32 MiB, 8 MiB + 4096 and two
 * of exactly 1 MiB, small-pool blocks), optimizer_step frees the
 * activations and the gradients, leak_step keeps one block of exactly
 * 1 MiB, then a 20 ms sleep. leak_step's block lands in the cached space a
 * gradient of 1 MiB just left, so the next backward finds too little small
 * space and makes a new 2 MiB segment: the segments grow at backward (one
 * every other step), the tensors at leak_step. teardown frees the
 * weights; with $POOL_LEAK_EMPTY_CACHE=1 it then calls empty_cache() (the
 * segments holding the leaked blocks stay). The leak: 40 blocks at
 * leak_step, 41943040 bytes live at the end (truth:
 * by_function_blocks.leak_step).
 */
#include "pool.h"

#include <stdlib.h>
#include <string.h>

#define STEPS 40
#define NA 3
#define NG 4

static const size_t activation_sizes[NA] = {6 * MiB, 3 * MiB + 512, 700 * 1024};
static const size_t gradient_sizes[NG] = {32 * MiB, 8 * MiB + 4096, 1 * MiB, 1 * MiB};

static void *weights[2], *activations[NA], *gradients[NG], *kept[STEPS];

NOINLINE void load_model(void)
{
	weights[0] = C10_MUST_ALLOC(32 * MiB);
	weights[1] = C10_MUST_ALLOC(8 * MiB + 4096);
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

/* leak_step keeps what a step should have let go: 1 MiB per step. */
NOINLINE void leak_step(int step)
{
	kept[step] = C10_MUST_ALLOC(1 * MiB);
}

NOINLINE void optimizer_step(void)
{
	for (int i = 0; i < NA; i++)
		C10_FREE(activations[i]);
	for (int i = 0; i < NG; i++)
		C10_FREE(gradients[i]);
}

NOINLINE void teardown(int empty)
{
	C10_FREE(weights[0]);
	C10_FREE(weights[1]);
	if (empty)
		C10_EMPTY_CACHE();
}

int main(void)
{
	const char *e = getenv("POOL_LEAK_EMPTY_CACHE");
	int empty = e != NULL && strcmp(e, "1") == 0;

	pool_truth_init("pool_leak_cached");
	load_model();
	for (int s = 0; s < STEPS; s++) {
		forward();
		backward();
		optimizer_step();
		leak_step(s);
		truth_sleep_ms(20);
	}
	pool_print_stats("pool_leak_cached before teardown");
	teardown(empty);
	return 0;
}
