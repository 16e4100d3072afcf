/*
 * pool_warm_healthy: a healthy trainer whose cache warms up, then stays
 * flat. load_model makes the weights (8 MiB, 4 MiB + 2048, 600 KiB) and
 * make_optimizer_state the optimizer's state (the same three sizes), once;
 * then STEPS (400) training steps of about 2.3 ms, each: forward
 * (activations whose sizes grow with the step until step 40 and repeat
 * after: k = step % 40, sizes (10 + k) MiB, 2 MiB + k * 64 KiB,
 * 256 KiB + k * 1024; the first, 10 MiB or more, gets a segment of its own
 * each time it outgrows the cached ones: every other step until step 40),
 * backward (gradients of the weights' sizes),
 * optimizer_step frees the activations and the gradients, then a 2.3 ms
 * sleep. teardown frees the weights and the state, and keeps the cache.
 * Nothing leaks: every block is freed (truth: blocks.live_bytes_at_end 0);
 * the allocator's segments are made in the first 40 steps and reused after.
 */
#include "pool.h"

#include <errno.h>
#include <time.h>

#define STEPS 400
#define CYCLE 40
#define NW 3
#define NA 3

static const size_t weight_sizes[NW] = {8 * MiB, 4 * MiB + 2048, 600 * 1024};

static void *weights[NW], *state[NW], *activations[NA], *gradients[NW];

NOINLINE void load_model(void)
{
	for (int i = 0; i < NW; i++)
		weights[i] = C10_MUST_ALLOC(weight_sizes[i]);
}

NOINLINE void make_optimizer_state(void)
{
	for (int i = 0; i < NW; i++)
		state[i] = C10_MUST_ALLOC(weight_sizes[i]);
}

NOINLINE void forward(int step)
{
	size_t k = (size_t)(step % CYCLE);
	size_t sizes[NA] = {(10 + k) * MiB, 2 * MiB + k * 64 * 1024, 256 * 1024 + k * 1024};

	for (int i = 0; i < NA; i++)
		activations[i] = C10_MUST_ALLOC(sizes[i]);
}

NOINLINE void backward(void)
{
	for (int i = 0; i < NW; i++)
		gradients[i] = C10_MUST_ALLOC(weight_sizes[i]);
}

NOINLINE void optimizer_step(void)
{
	for (int i = 0; i < NA; i++)
		C10_FREE(activations[i]);
	for (int i = 0; i < NW; i++)
		C10_FREE(gradients[i]);
}

/* teardown frees the weights and the state; as PyTorch at exit, it keeps
 * the cache (the segments stay reserved until the process ends). */
NOINLINE void teardown(void)
{
	for (int i = 0; i < NW; i++) {
		C10_FREE(weights[i]);
		C10_FREE(state[i]);
	}
}

static void pause_step(void)
{
	struct timespec ts = {0, 2300000};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

int main(void)
{
	pool_truth_init("pool_warm_healthy");
	load_model();
	make_optimizer_state();
	for (int s = 0; s < STEPS; s++) {
		forward(s);
		backward();
		optimizer_step();
		pause_step();
	}
	pool_print_stats("pool_warm_healthy before teardown");
	teardown();
	return 0;
}
