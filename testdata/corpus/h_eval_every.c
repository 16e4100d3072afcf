/*
 * h_eval_every (healthy): an eval pass every 10 steps. 70 training steps;
 * after steps 9, 19, ... evaluate runs 3 batches of 2048 tokens without
 * gradients (bigger activations, logits of 6 MiB), freed batch by batch.
 * The first eval grows the cache; the later ones reuse it.
 */
#include "corpus.h"

#define STEPS 70
#define EVAL_EVERY 10

NOINLINE void train_step(void)
{
	truth_step(__func__);
	forward(512);
	backward(512);
	optimizer_step();
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

NOINLINE void eval_batch(void)
{
	void *h = C10_MUST_ALLOC(2048 * 16 * KiB);
	void *logits = C10_MUST_ALLOC(6 * MiB);

	C10_FREE(h);
	C10_FREE(logits);
}

NOINLINE void evaluate(void)
{
	for (int b = 0; b < 3; b++)
		eval_batch();
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	size_t warm = 0;

	pool_truth_init("corpus_h_eval_every");
	load_model();
	for (int step = 0; step < STEPS; step++) {
		train_step();
		if (step % EVAL_EVERY == EVAL_EVERY - 1)
			evaluate();
		if (step == EVAL_EVERY - 1)
			warm = corpus_stats().reserved_bytes;
	}
	corpus_check("reserved after the first eval", warm, corpus_stats().reserved_bytes);
	teardown();
	truth_label_healthy();
	return 0;
}
