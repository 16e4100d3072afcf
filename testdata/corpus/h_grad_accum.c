/*
 * h_grad_accum (healthy): gradient accumulation. 30 optimizer steps of 4
 * micro-batches each: the gradients are made by the first micro-batch's
 * backward and accumulated into by the next three; optimizer_step, then
 * zero_grad frees them. Memory rises within a step and falls back: the same
 * every step.
 */
#include "corpus.h"

#define STEPS 30
#define MICRO 4

NOINLINE void micro_step(void)
{
	forward(256);
	backward(256);
	truth_sleep_ms(1);
}

NOINLINE void train_step(void)
{
	truth_step(__func__);
	for (int m = 0; m < MICRO; m++)
		micro_step();
	optimizer_step();
	zero_grad();
}

int main(void)
{
	size_t warm = 0;

	pool_truth_init("corpus_h_grad_accum");
	load_model();
	for (int step = 0; step < STEPS; step++) {
		train_step();
		if (step == WARMUP)
			warm = corpus_stats().reserved_bytes;
	}
	corpus_check("reserved after the warm-up steps", warm, corpus_stats().reserved_bytes);
	teardown();
	truth_label_healthy();
	return 0;
}
