/*
 * h_pinned_loader (healthy): a DataLoader with pin_memory=True. The pinned
 * host pool grows to 4 batch buffers of 2 MiB + 4096 (prefetch_factor 2 x
 * 2 workers) over the first 4 steps (pin_batch, cudaHostAlloc), then reuses
 * them round robin for the other 76; to_device copies each batch into a
 * device tensor freed at the end of the step. The buffers are freed when the
 * loader shuts down.
 */
#include "corpus.h"

#define STEPS 80
#define NPINNED 4
#define BATCH (2 * MiB + 4096)

static void *pinned[NPINNED];

NOINLINE void *pin_batch(int step)
{
	void **slot = &pinned[step % NPINNED];

	if (*slot == NULL)
		check_cuda(TRUTH_HOST_ALLOC(slot, BATCH, cudaHostAllocDefault), __func__);
	return *slot;
}

NOINLINE void *to_device(void)
{
	return C10_MUST_ALLOC(BATCH);
}

NOINLINE void shutdown_loader(void)
{
	for (int i = 0; i < NPINNED; i++)
		check_cuda(TRUTH_FREE_HOST(pinned[i]), __func__);
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
	pool_truth_init("corpus_h_pinned_loader");
	load_model();
	for (int step = 0; step < STEPS; step++)
		train_step(step);
	teardown();
	shutdown_loader();
	truth_label_healthy();
	return 0;
}
