/*
 * b_capacity_oom (broken: oom): a batch too large for the device.
 * FAKECUDA_CAPACITY defaults to 512 MiB here. The model (115 MiB + 260
 * KiB) and Adam's state (twice that) live; 12 steps of 512 tokens, then the
 * data loader yields a batch of 16384 tokens: embed asks 16384 x 16 KiB =
 * 256 MiB, more than the device has beside the 345 MiB that live tensors
 * hold, whatever the cache does. Exits 1.
 */
#include "corpus.h"

#define STEPS 12

NOINLINE void *embed(size_t tokens)
{
	return C10_ALLOC(tokens * 16 * KiB);
}

NOINLINE void train_step(size_t tokens)
{
	truth_step(__func__);
	void *e = embed(tokens);

	if (e == NULL) {
		fprintf(stderr, "corpus_b_capacity_oom: CUDA out of memory\n");
		exit(1);
	}
	forward(tokens);
	backward(tokens);
	optimizer_step();
	zero_grad();
	C10_FREE(e);
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	size_t live = 0, big = 16384;

	setenv("FAKECUDA_CAPACITY", "536870912", 0); /* 512 MiB */
	pool_truth_init("corpus_b_capacity_oom");
	load_model();
	for (int step = 0; step < STEPS; step++)
		train_step(512);
	for (int i = 0; i < NW; i++)
		live += 3 * weight_sizes[i];
	corpus_check("live tensors before the big batch", live, corpus_stats().requested_bytes);
	if (live + big * 16 * KiB <= truth_capacity()) {
		fprintf(stderr, "corpus_b_capacity_oom: the batch would fit\n");
		return 3;
	}
	truth_label_defect("oom", "embed", big * 16 * KiB);
	train_step(big); /* exits 1 */
	return 3;
}
