/*
 * b_ckpt_spike (broken: spike): a checkpoint that copies the whole
 * training state on the GPU. Every 25 of 75 steps, save_checkpoint
 * flattens the weights and both Adam moments into one GPU buffer (3 x the
 * weights: 345 MiB + 780 KiB), copies it to the host and frees it: the
 * process's peak is the copy. Spike at save_checkpoint: the copy's size.
 */
#include "corpus.h"

#define STEPS 75
#define SAVE_EVERY 25

static size_t state_bytes(void)
{
	size_t n = 0;

	for (int i = 0; i < NW; i++)
		n += 3 * weight_sizes[i];
	return n;
}

NOINLINE void save_checkpoint(void)
{
	void *flat = C10_MUST_ALLOC(state_bytes());

	truth_sleep_ms(1); /* the device-to-host copy */
	C10_FREE(flat);
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
	pool_truth_init("corpus_b_ckpt_spike");
	load_model();
	for (int step = 0; step < STEPS; step++) {
		train_step();
		if (step % SAVE_EVERY == SAVE_EVERY - 1)
			save_checkpoint();
	}
	teardown();
	truth_label_defect("spike", "save_checkpoint", state_bytes());
	return 0;
}
