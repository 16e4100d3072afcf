/*
 * h_empty_cache_periodic (healthy): torch.cuda.empty_cache() after each
 * eval, every 25 of 75 steps. The next step takes its activation segments
 * back (a handful of cudaMalloc calls every 25 steps): a cost of well under
 * a millisecond per second of run.
 */
#include "corpus.h"

#define STEPS 75
#define EVERY 25

NOINLINE void train_step(void)
{
	truth_step(__func__);
	forward(512);
	backward(512);
	optimizer_step();
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

NOINLINE void evaluate(void)
{
	void *logits = C10_MUST_ALLOC(12 * MiB);

	C10_FREE(logits);
}

NOINLINE void release_cache(void)
{
	C10_EMPTY_CACHE();
}

int main(void)
{
	pool_truth_init("corpus_h_empty_cache_periodic");
	load_model();
	for (int step = 0; step < STEPS; step++) {
		train_step();
		if (step % EVERY == EVERY - 1) {
			evaluate();
			release_cache();
		}
	}
	teardown();
	truth_label_healthy();
	return 0;
}
