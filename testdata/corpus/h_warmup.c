/*
 * h_warmup (healthy): the common case, the trainer. Weights once;
 * 400 steps of about 2.5 ms whose batch grows from 32 to 1280 tokens over the
 * first 40 steps and repeats that cycle after: the cache grows while new
 * sizes appear (the first cycle, about a tenth of the run), then stays flat
 * (checked). Adam's state is made at the first step.
 */
#include "corpus.h"

#define STEPS 400
#define CYCLE 40

NOINLINE void train_step(int step)
{
	truth_step(__func__);
	size_t tokens = 32 * (size_t)(1 + step % CYCLE);

	forward(tokens);
	backward(tokens);
	optimizer_step();
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	size_t warm = 0;

	pool_truth_init("corpus_h_warmup");
	load_model();
	for (int step = 0; step < STEPS; step++) {
		train_step(step);
		if (step == CYCLE - 1)
			warm = corpus_stats().reserved_bytes;
	}
	corpus_check("reserved after the first cycle", warm, corpus_stats().reserved_bytes);
	teardown();
	truth_label_healthy();
	return 0;
}
