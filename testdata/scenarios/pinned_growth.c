/*
 * pinned_growth: a training loop whose pinned host memory grows.
 * load_model allocates 64 MiB of device memory; alloc_staging pins an
 * 8 MiB staging buffer once (cudaMallocHost), freed in teardown. Then 50
 * iterations, 5 ms apart: forward allocates 16 MiB and 8 MiB of device
 * memory; pin_batch pins a new batch buffer of 2 MiB + 4096 bytes
 * (cudaHostAlloc, portable) and keeps it (never freed: the growth);
 * copy_staging pins 1 MiB + 100 bytes and frees it (steady);
 * optimizer_step frees the activations. teardown frees the weights and the
 * staging buffer.
 * Device: 101 allocations, 101 frees, live at end 0.
 * Host: 101 allocations, 51 frees, live at end 50 * 2101248 = 105062400,
 * all of it pin_batch's.
 */
#include "truth.h"

#define ITERATIONS 50

static void *weights, *staging, *acts[2];
static void *batches[ITERATIONS];

NOINLINE void load_model(void)
{
	check_cuda(TRUTH_MALLOC(&weights, 64 * MiB), __func__);
}

NOINLINE void alloc_staging(void)
{
	check_cuda(TRUTH_MALLOC_HOST(&staging, 8 * MiB), __func__);
}

NOINLINE void forward(void)
{
	check_cuda(TRUTH_MALLOC(&acts[0], 16 * MiB), __func__);
	check_cuda(TRUTH_MALLOC(&acts[1], 8 * MiB), __func__);
}

NOINLINE void pin_batch(int i)
{
	check_cuda(TRUTH_HOST_ALLOC(&batches[i], 2 * MiB + 4096, cudaHostAllocPortable), __func__);
}

NOINLINE void copy_staging(void)
{
	void *tmp = NULL;

	check_cuda(TRUTH_MALLOC_HOST(&tmp, 1 * MiB + 100), __func__);
	check_cuda(TRUTH_FREE_HOST(tmp), __func__);
}

NOINLINE void optimizer_step(void)
{
	for (int k = 0; k < 2; k++) {
		check_cuda(TRUTH_FREE(acts[k]), __func__);
		acts[k] = NULL;
	}
}

NOINLINE void teardown(void)
{
	check_cuda(TRUTH_FREE(weights), __func__);
	check_cuda(TRUTH_FREE_HOST(staging), __func__);
}

int main(void)
{
	truth_init("pinned_growth");
	load_model();
	alloc_staging();
	for (int i = 0; i < ITERATIONS; i++) {
		forward();
		pin_batch(i);
		copy_staging();
		optimizer_step();
		truth_sleep_ms(5);
	}
	teardown();
	return 0;
}
