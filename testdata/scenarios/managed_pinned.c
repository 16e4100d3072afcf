/*
 * managed_pinned: managed, pinned host and pitched memory (device 0).
 * managed_alloc: cudaMallocManaged 32 MiB and 1 MiB + 1 (device memory).
 * pinned_alloc: cudaMallocHost 4 MiB, cudaHostAlloc 2 MiB + 123 (portable,
 * mapped), cudaMallocHost 1 MiB (host memory: never in totals).
 * pitched_alloc: cudaMallocPitch 1000 x 300 (pitch 1024: 307200 bytes),
 * cudaMalloc3D {700, 50, 8} (pitch 1024: 1024*50*8 = 409600 bytes).
 * pitched_too_big: cudaMallocPitch 1000 x 2^30 and cudaMalloc3D {700, 2^20,
 * 1024}, both beyond the device (cudaErrorMemoryAllocation): failed requests
 * of 1000 * 2^30 and 700 * 2^30 bytes (width x height [x depth]: the pitch
 * of a failed call is unknown).
 * release_some: cudaFree of the 1 MiB + 1 managed buffer and of the 2D
 * pitched one, cudaFreeHost of the two cudaMallocHost buffers.
 * Device: 4 allocations (and 2 failed), 35319809 bytes = peak, 2 frees, live at end
 * 33964032 (32 MiB + 409600). Host: 3 allocations, 7340155 bytes = peak,
 * 2 frees, live at end 2097275.
 */
#include "truth.h"

#include <stdio.h>
#include <stdlib.h>

static void *m1, *m2, *h1, *h2, *h3, *p2d;
static struct cudaPitchedPtr p3d;

NOINLINE void managed_alloc(void)
{
	check_cuda(TRUTH_MALLOC_MANAGED(&m1, 32 * MiB, cudaMemAttachGlobal), __func__);
	check_cuda(TRUTH_MALLOC_MANAGED(&m2, 1 * MiB + 1, cudaMemAttachGlobal), __func__);
}

NOINLINE void pinned_alloc(void)
{
	check_cuda(TRUTH_MALLOC_HOST(&h1, 4 * MiB), __func__);
	check_cuda(TRUTH_HOST_ALLOC(&h2, 2 * MiB + 123, cudaHostAllocPortable | cudaHostAllocMapped),
		   __func__);
	check_cuda(TRUTH_MALLOC_HOST(&h3, 1 * MiB), __func__);
	/* Pinned host memory is real memory. */
	((char *)h2)[2 * MiB + 122] = 1;
}

NOINLINE void pitched_alloc(void)
{
	size_t pitch = 0;
	struct cudaExtent extent = {700, 50, 8};

	check_cuda(TRUTH_MALLOC_PITCH(&p2d, &pitch, 1000, 300), __func__);
	check_cuda(TRUTH_MALLOC_3D(&p3d, extent), __func__);
	if (pitch != 1024 || p3d.pitch != 1024 || p3d.xsize != 700 || p3d.ysize != 50) {
		fprintf(stderr, "pitched_alloc: pitch %zu, 3D pitch %zu\n", pitch, p3d.pitch);
		exit(3);
	}
}

NOINLINE void pitched_too_big(void)
{
	void *p = NULL;
	size_t pitch = 0;
	struct cudaPitchedPtr pp = {0};
	struct cudaExtent extent = {700, (size_t)1 << 20, 1024};

	if (TRUTH_MALLOC_PITCH(&p, &pitch, 1000, (size_t)1 << 30) != cudaErrorMemoryAllocation ||
	    TRUTH_MALLOC_3D(&pp, extent) != cudaErrorMemoryAllocation) {
		fprintf(stderr, "pitched_too_big: the requests did not fail\n");
		exit(3);
	}
}

NOINLINE void release_some(void)
{
	check_cuda(TRUTH_FREE(m2), __func__);
	check_cuda(TRUTH_FREE(p2d), __func__);
	check_cuda(TRUTH_FREE_HOST(h1), __func__);
	check_cuda(TRUTH_FREE_HOST(h3), __func__);
}

int main(void)
{
	truth_init("managed_pinned");
	managed_alloc();
	pinned_alloc();
	pitched_alloc();
	pitched_too_big();
	release_some();
	return 0;
}
