/*
 * h_late_long_batch (healthy): one long batch, late. 80 steps of 512
 * tokens; step 55 is the longest document of the epoch, 2048 tokens: the
 * cache grows once, then serves the remaining steps from what it holds
 * (checked). A late rise that stays is the cache, not a leak: nothing is
 * kept from step to step.
 */
#include "corpus.h"

#define STEPS 80
#define LONG_STEP 55

NOINLINE size_t batch_tokens(int step)
{
	return step == LONG_STEP ? 2048 : 512;
}

NOINLINE void train_step(int step)
{
	truth_step(__func__);
	size_t tokens = batch_tokens(step);

	forward(tokens);
	backward(tokens);
	optimizer_step();
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	size_t warm = 0;

	pool_truth_init("corpus_h_late_long_batch");
	load_model();
	for (int step = 0; step < STEPS; step++) {
		train_step(step);
		if (step == LONG_STEP)
			warm = corpus_stats().reserved_bytes;
	}
	corpus_check("reserved after the long batch", warm, corpus_stats().reserved_bytes);
	teardown();
	truth_label_healthy();
	return 0;
}
