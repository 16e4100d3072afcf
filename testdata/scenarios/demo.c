/*
 * demo: the trainer behind `make demo` (about 2 s). A small transformer's
 * training loop on the fake runtime: 4 epochs of 25 steps.
 *
 *   load_model       parameters, 1.5 GiB (embedding, 8 blocks, lm_head)
 *   init_optimizer   Adam moments, 2 x parameters (3 GiB)
 *   forward          activations per block and logits; freed in optimizer_step
 *   backward         gradients, one per parameter;     freed in optimizer_step
 *   log_metrics      keeps a 256 KiB metrics buffer per step: the slow leak
 *   save_checkpoint  end of every epoch, a 3 GiB staging buffer, freed at once:
 *                    the peak is in the last checkpoint
 */
#include "truth.h"

#include <stdio.h>

#define EPOCHS 4
#define STEPS 25
#define NBLOCKS 8
#define NPARAMS (NBLOCKS + 2)

struct trainer {
	void *params[NPARAMS];
	size_t param_sizes[NPARAMS];
	void *exp_avg[NPARAMS], *exp_avg_sq[NPARAMS];
	void *grads[NPARAMS];
	void *activations[NBLOCKS + 1];
	void *metrics[EPOCHS * STEPS];
	int nmetrics;
};

NOINLINE void load_model(struct trainer *tr)
{
	for (int i = 0; i < NPARAMS; i++) {
		/* embed_tokens and lm_head: 384 MiB; each block: 96 MiB */
		size_t size = (i == 0 || i == NPARAMS - 1) ? 384 * MiB : 96 * MiB;
		check_cuda(TRUTH_MALLOC(&tr->params[i], size), __func__);
		tr->param_sizes[i] = size;
	}
}

NOINLINE void init_optimizer(struct trainer *tr)
{
	for (int i = 0; i < NPARAMS; i++) {
		check_cuda(TRUTH_MALLOC(&tr->exp_avg[i], tr->param_sizes[i]), __func__);
		check_cuda(TRUTH_MALLOC(&tr->exp_avg_sq[i], tr->param_sizes[i]), __func__);
	}
}

NOINLINE void next_batch(void)
{
	truth_sleep_ms(20); /* the data loader */
}

NOINLINE double forward(struct trainer *tr, int step)
{
	for (int i = 0; i < NBLOCKS; i++)
		check_cuda(TRUTH_MALLOC(&tr->activations[i], 48 * MiB + 4096), __func__);
	check_cuda(TRUTH_MALLOC(&tr->activations[NBLOCKS], 128 * MiB), __func__);
	return 4.0 / (1.0 + 0.05 * step);
}

NOINLINE void backward(struct trainer *tr)
{
	for (int i = NPARAMS - 1; i >= 0; i--)
		check_cuda(TRUTH_MALLOC(&tr->grads[i], tr->param_sizes[i]), __func__);
}

NOINLINE void optimizer_step(struct trainer *tr)
{
	for (int i = 0; i < NPARAMS; i++) {
		check_cuda(TRUTH_FREE(tr->grads[i]), __func__);
		tr->grads[i] = NULL;
	}
	for (int i = 0; i <= NBLOCKS; i++) {
		check_cuda(TRUTH_FREE(tr->activations[i]), __func__);
		tr->activations[i] = NULL;
	}
}

NOINLINE void log_metrics(struct trainer *tr)
{
	/* The bug: a per-step metrics tensor appended to a history list. */
	check_cuda(TRUTH_MALLOC(&tr->metrics[tr->nmetrics], 256 * 1024), __func__);
	tr->nmetrics++;
}

NOINLINE void save_checkpoint(struct trainer *tr, int epoch)
{
	void *staging = NULL;

	check_cuda(TRUTH_MALLOC(&staging, 3 * GiB), __func__);
	check_cuda(TRUTH_FREE(staging), __func__);
	(void)tr;
	(void)epoch;
}

int main(void)
{
	static struct trainer tr;
	int step = 0;

	truth_init("demo");
	check_cuda(cudaSetDevice(0), "cudaSetDevice");
	load_model(&tr);
	init_optimizer(&tr);
	for (int epoch = 1; epoch <= EPOCHS; epoch++) {
		double loss = 0;
		size_t free_b = 0, total_b = 0;

		for (int s = 0; s < STEPS; s++, step++) {
			next_batch();
			loss = forward(&tr, step);
			backward(&tr);
			optimizer_step(&tr);
			log_metrics(&tr);
		}
		save_checkpoint(&tr, epoch);
		check_cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
		printf("epoch %d/%d  step %3d  loss %.4f  vram %.2f GiB used of %.2f GiB\n",
		       epoch, EPOCHS, step, loss,
		       (double)(total_b - free_b) / (double)GiB,
		       (double)total_b / (double)GiB);
		fflush(stdout);
	}
	return 0;
}
