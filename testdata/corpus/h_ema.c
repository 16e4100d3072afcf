/*
 * h_ema (healthy): an exponential moving average of the weights.
 * update_ema makes the EMA copy at the first step (the weights' sizes) and
 * updates it in place after every optimizer step, through a temporary of
 * the weight's size (the difference), freed at once. 60 steps.
 */
#include "corpus.h"

#define STEPS 60

static void *ema[NW];

NOINLINE void update_ema(void)
{
	for (int i = 0; i < NW; i++) {
		void *diff;

		if (ema[i] == NULL)
			ema[i] = C10_MUST_ALLOC(weight_sizes[i]);
		diff = C10_MUST_ALLOC(weight_sizes[i]);
		C10_FREE(diff);
	}
}

NOINLINE void train_step(void)
{
	truth_step(__func__);
	forward(512);
	backward(512);
	optimizer_step();
	zero_grad();
	update_ema();
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	size_t warm = 0;

	pool_truth_init("corpus_h_ema");
	load_model();
	for (int step = 0; step < STEPS; step++) {
		train_step();
		if (step == WARMUP)
			warm = corpus_stats().reserved_bytes;
	}
	corpus_check("reserved after the warm-up steps", warm, corpus_stats().reserved_bytes);
	for (int i = 0; i < NW; i++)
		C10_FREE(ema[i]);
	teardown();
	truth_label_healthy();
	return 0;
}
