/*
 * b_eval_leak (broken: leak): predictions kept on the GPU. Every 10 of 80
 * steps, evaluate runs 3 batches and collect_predictions appends each
 * batch's logits (2 MiB + 512) to a list that is never moved to the CPU.
 * Leak at collect_predictions: 8 evals x 3 x (2 MiB + 512).
 */
#include "corpus.h"

#define STEPS 80
#define EVAL_EVERY 10
#define LOGITS (2 * MiB + 512)

static void *preds[STEPS / EVAL_EVERY * 3];
static size_t npreds, kept;

NOINLINE void collect_predictions(void)
{
	preds[npreds++] = C10_MUST_ALLOC(LOGITS);
	kept += LOGITS;
}

NOINLINE void evaluate(void)
{
	for (int b = 0; b < 3; b++) {
		void *h = C10_MUST_ALLOC(1024 * 16 * KiB);

		collect_predictions();
		C10_FREE(h);
	}
}

NOINLINE void train_step(void)
{
	truth_step(__func__);
	forward(512);
	backward(512);
	optimizer_step();
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	pool_truth_init("corpus_b_eval_leak");
	load_model();
	for (int step = 0; step < STEPS; step++) {
		train_step();
		if (step % EVAL_EVERY == EVAL_EVERY - 1)
			evaluate();
	}
	corpus_check("prediction bytes", kept, (size_t)STEPS / EVAL_EVERY * 3 * LOGITS);
	truth_label_defect("leak", "collect_predictions", kept);
	return 0;
}
