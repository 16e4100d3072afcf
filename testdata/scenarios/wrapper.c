/*
 * wrapper: a trainer whose every allocation goes through one helper,
 * dev_alloc (and every free through dev_free), as real code wraps
 * cudaMalloc. The truth charges each call to dev_alloc's caller (the
 * function the site should name), not to dev_alloc:
 *   load_weights      6 x 128 MiB at start, freed in teardown (the bulk of
 *                     the peak);
 *   forward           8 MiB + 4 MiB per step, freed at the end of the step
 *                     (the iterations' rhythm);
 *   save_checkpoint   512 MiB after steps 10 and 30, freed at once (the
 *                     spike; the peak is reached inside it at step 30, with
 *                     31 MiB of metrics live);
 *   log_metrics       1 MiB per step, never freed (the leak: 60 MiB).
 */
#include "truth.h"

#define STEPS 60
#define NWEIGHTS 6
#define NACT 2

static void *weights[NWEIGHTS];
static void *metrics[STEPS];

/* dev_alloc is the shared helper: it makes every cudaMalloc and records it
 * under its caller's name. */
NOINLINE void *dev_alloc(size_t size, const char *caller)
{
	void *p = NULL;
	cudaError_t ret = cudaMalloc(&p, size);

	truth_malloc(caller, ret, p, size);
	check_cuda(ret, caller);
	return p;
}

NOINLINE void dev_free(void *p, const char *caller)
{
	cudaError_t ret = cudaFree(p);

	truth_free(caller, ret, p);
	check_cuda(ret, caller);
}

NOINLINE void load_weights(void)
{
	for (int i = 0; i < NWEIGHTS; i++)
		weights[i] = dev_alloc(128 * MiB, __func__);
}

NOINLINE void forward(void **act)
{
	for (int i = 0; i < NACT; i++)
		act[i] = dev_alloc((size_t)(8 >> i) * MiB, __func__);
}

NOINLINE void release_activations(void **act)
{
	for (int i = 0; i < NACT; i++)
		dev_free(act[i], __func__);
}

NOINLINE void save_checkpoint(void)
{
	void *staging = dev_alloc(512 * MiB, __func__);

	dev_free(staging, __func__);
}

NOINLINE void log_metrics(int step)
{
	metrics[step] = dev_alloc(1 * MiB, __func__);
}

NOINLINE void teardown_weights(void)
{
	for (int i = 0; i < NWEIGHTS; i++)
		dev_free(weights[i], __func__);
}

int main(void)
{
	void *act[NACT];

	truth_init("wrapper");
	load_weights();
	for (int step = 0; step < STEPS; step++) {
		forward(act);
		release_activations(act);
		log_metrics(step);
		if (step == 10 || step == 30)
			save_checkpoint();
		/* Paced, so the loop spans most of the run: the leak rule reads
		 * live bytes at windows over the whole run. */
		truth_sleep_ms(3);
	}
	teardown_weights();
	return 0;
}
