/*
 * driver_only: the runtime is linked in statically and its symbols are
 * stripped from the executable (cudaMalloc is in neither .symtab nor
 * .dynsym), so a profiler sees only the driver's cuMemAlloc_v2/cuMemFree_v2,
 * called from an anonymous runtime frame under hidden_alloc.
 * hidden_alloc allocates 6 buffers of (i+1) * 7 MiB with cudaMalloc and frees
 * the first 4: 147 MiB = 154140672 bytes allocated (= peak), 77 MiB =
 * 80740352 live at end. books: runtime and driver both 6 allocations,
 * 4 frees.
 * hidden_failures: two cudaMallocPitch calls that fail in the driver's
 * cuMemAllocPitch_v2, the only level visible: 1000 x 2^30 is beyond the
 * device (CUDA_ERROR_OUT_OF_MEMORY, 2), 1000 x 0 is invalid
 * (CUDA_ERROR_INVALID_VALUE, 1). 2 failed allocations, 1000 * 2^30 bytes
 * requested (width x height: a failed call's pitch is unknown).
 */
#include "truth.h"

#include <stdio.h>
#include <stdlib.h>

#define NBUFS 6

static void *bufs[NBUFS];

NOINLINE void hidden_alloc(void)
{
	for (int i = 0; i < NBUFS; i++)
		check_cuda(TRUTH_MALLOC(&bufs[i], (size_t)(i + 1) * 7 * MiB), __func__);
	for (int i = 0; i < NBUFS - 2; i++) {
		check_cuda(TRUTH_FREE(bufs[i]), __func__);
		bufs[i] = NULL;
	}
}

NOINLINE void hidden_failures(void)
{
	void *p = NULL;
	size_t pitch = 0;

	if (TRUTH_MALLOC_PITCH(&p, &pitch, 1000, (size_t)1 << 30) != cudaErrorMemoryAllocation ||
	    TRUTH_MALLOC_PITCH(&p, &pitch, 1000, 0) != cudaErrorInvalidValue) {
		fprintf(stderr, "hidden_failures: the requests did not fail as expected\n");
		exit(3);
	}
}

int main(void)
{
	truth_init("driver_only");
	hidden_alloc();
	hidden_failures();
	return 0;
}
