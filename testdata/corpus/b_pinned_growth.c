/*
 * b_pinned_growth (broken: pinned_host_growth): a data loader that pins a
 * new host buffer for every batch (pin_batch, cudaHostAlloc 2 MiB + 4096)
 * and never frees it, over 60 steps. Growth at pin_batch: 60 x (2 MiB +
 * 4096).
 */
#include "corpus.h"

#define STEPS 60
#define BATCH (2 * MiB + 4096)

static void *pinned[STEPS];
static size_t kept;

NOINLINE void pin_batch(int step)
{
	check_cuda(TRUTH_HOST_ALLOC(&pinned[step], BATCH, cudaHostAllocDefault), __func__);
	kept += BATCH;
}

NOINLINE void *to_device(void)
{
	return C10_MUST_ALLOC(BATCH);
}

NOINLINE void train_step(int step)
{
	truth_step(__func__);
	void *batch;

	pin_batch(step);
	batch = to_device();
	forward(512);
	backward(512);
	optimizer_step();
	zero_grad();
	C10_FREE(batch);
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	pool_truth_init("corpus_b_pinned_growth");
	load_model();
	for (int step = 0; step < STEPS; step++)
		train_step(step);
	teardown();
	truth_label_defect("pinned_host_growth", "pin_batch", kept);
	return 0;
}
