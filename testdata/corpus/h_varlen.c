/*
 * h_varlen (healthy): variable sequence lengths. 80 steps whose batches
 * have 128 * (1 + (step * 7) % 9) tokens (128 to 1152, in an irregular
 * order, the longest first seen at step 5): the cache grows until the
 * longest batch has been seen, then serves every length from what it holds.
 */
#include "corpus.h"

#define STEPS 80

NOINLINE size_t next_batch(int step)
{
	return 128 * (size_t)(1 + (step * 7) % 9);
}

NOINLINE void train_step(int step)
{
	truth_step(__func__);
	size_t tokens = next_batch(step);

	forward(tokens);
	backward(tokens);
	optimizer_step();
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	size_t warm = 0;

	pool_truth_init("corpus_h_varlen");
	load_model();
	for (int step = 0; step < STEPS; step++) {
		train_step(step);
		if (step == 17)
			warm = corpus_stats().reserved_bytes;
	}
	corpus_check("reserved after two rounds of lengths", warm, corpus_stats().reserved_bytes);
	teardown();
	truth_label_healthy();
	return 0;
}
