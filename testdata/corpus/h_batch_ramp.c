/*
 * h_batch_ramp (healthy): batch-size warm-up. 256 tokens for steps 0-19,
 * 512 for 20-39, 1024 for 40-79: the cache grows at each new size, then
 * holds it. Three plateaus, each flat; nothing is kept from step to step.
 */
#include "corpus.h"

#define STEPS 80

NOINLINE size_t batch_tokens(int step)
{
	return step < 20 ? 256 : step < 40 ? 512 : 1024;
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

	pool_truth_init("corpus_h_batch_ramp");
	load_model();
	for (int step = 0; step < STEPS; step++) {
		train_step(step);
		if (step == 40)
			warm = corpus_stats().reserved_bytes;
	}
	corpus_check("reserved after the last ramp", warm, corpus_stats().reserved_bytes);
	teardown();
	truth_label_healthy();
	return 0;
}
