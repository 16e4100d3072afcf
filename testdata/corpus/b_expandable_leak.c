/*
 * b_expandable_leak (broken: leak under expandable segments). main sets
 * PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (when unset): the cache
 * grows by mapping 20 MiB pages (large pool) and 2 MiB pages (small pool)
 * into one reservation per pool and stream (cuMemAddressReserve, cuMemCreate,
 * cuMemMap), never with cudaMalloc. 60 steps; each, cache_hidden_states
 * keeps a 3 MiB + 2048 tensor (hidden states appended to a list for a
 * later probe). Leak at cache_hidden_states: 60 x (3 MiB + 2048).
 */
#include "corpus.h"

#define STEPS 60
#define HIDDEN (3 * MiB + 2048)

static void *hidden[STEPS];
static size_t kept;

NOINLINE void cache_hidden_states(int step)
{
	hidden[step] = C10_MUST_ALLOC(HIDDEN);
	kept += HIDDEN;
}

NOINLINE void train_step(int step)
{
	truth_step(__func__);
	forward(512);
	cache_hidden_states(step);
	backward(512);
	optimizer_step();
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", 0);
	pool_truth_init("corpus_b_expandable_leak");
	load_model();
	for (int step = 0; step < STEPS; step++)
		train_step(step);
	corpus_check("hidden-state bytes", kept, (size_t)STEPS * HIDDEN);
	truth_label_defect("leak", "cache_hidden_states", kept);
	return 0;
}
