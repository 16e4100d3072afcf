/*
 * ctx_destroy: contexts the driver destroys, on one thread. A profiler that
 * still maps a destroyed context to its device would put the allocations
 * that follow on that device: none of them is there.
 *
 * on_device allocates and frees 8 MiB on device 0 (cudaSetDevice(0)), then
 * on device 2 (cudaSetDevice(2)): each device has handed out an address
 * range, where its next allocations go (first fit). make_context
 * creates context A on device 1 (cuCtxCreate_v2 makes it current) and
 * ctx_alloc keeps 4 MiB there; back_to_primary's cudaSetDevice(2) makes
 * device 2's primary context current again; destroy_other destroys A (not
 * current). set_destroyed's cuCtxSetCurrent(A) fails
 * (CUDA_ERROR_INVALID_CONTEXT, 201): the thread stays on device 2, where
 * after_failed_set keeps 5 MiB. make_context creates context B on device 3
 * and ctx_alloc keeps 6 MiB there; destroy_current destroys B, the current
 * context, which leaves the thread none: the fake driver's device 0, where
 * after_destroy keeps 7 MiB.
 *
 * Per device (allocations / allocated / live at the end):
 *   0: 2 / (8+7) MiB = 15 MiB / 7 MiB
 *   1: 1 / 4 MiB / 4 MiB
 *   2: 2 / (8+5) MiB = 13 MiB / 5 MiB
 *   3: 1 / 6 MiB / 6 MiB
 * Totals: 6 allocations, 2 frees, 38 MiB allocated, 22 MiB live at the
 * end, peak 22 MiB (at the end: the 8 MiB ones were freed at once).
 * The truth's calls[] holds every set-device, context and allocation call in
 * order; a context call's ptr is the context's handle.
 */
#include "truth.h"

#include <stdio.h>
#include <stdlib.h>

NOINLINE void on_device(int device, size_t size)
{
	void *p = NULL;

	check_cuda(TRUTH_SET_DEVICE(device), __func__);
	check_cuda(TRUTH_MALLOC(&p, size), __func__);
	check_cuda(TRUTH_FREE(p), __func__);
}

NOINLINE CUcontext make_context(int device)
{
	CUcontext ctx = NULL;

	check_cu(TRUTH_CU_CTX_CREATE(&ctx, device), __func__);
	return ctx;
}

NOINLINE void ctx_alloc(size_t size)
{
	void *p = NULL;

	check_cuda(TRUTH_MALLOC(&p, size), __func__);
}

NOINLINE void back_to_primary(int device)
{
	check_cuda(TRUTH_SET_DEVICE(device), __func__);
}

NOINLINE void destroy_other(CUcontext ctx, int device)
{
	check_cu(TRUTH_CU_CTX_DESTROY(ctx, device, 0), __func__);
}

NOINLINE void set_destroyed(CUcontext ctx, int device)
{
	int r = TRUTH_CU_CTX_SET_CURRENT(ctx, device);

	if (r != CUDA_ERROR_INVALID_CONTEXT) {
		fprintf(stderr, "cuCtxSetCurrent(destroyed) returned %d, not %d\n", r,
			CUDA_ERROR_INVALID_CONTEXT);
		exit(3);
	}
}

NOINLINE void after_failed_set(void)
{
	void *p = NULL;

	check_cuda(TRUTH_MALLOC(&p, 5 * MiB), __func__);
}

NOINLINE void destroy_current(CUcontext ctx, int device)
{
	check_cu(TRUTH_CU_CTX_DESTROY(ctx, device, 1), __func__);
}

NOINLINE void after_destroy(void)
{
	void *p = NULL;

	check_cuda(TRUTH_MALLOC(&p, 7 * MiB), __func__);
}

int main(void)
{
	CUcontext a, b;

	truth_init("ctx_destroy");
	on_device(0, 8 * MiB);
	on_device(2, 8 * MiB);
	a = make_context(1);
	ctx_alloc(4 * MiB);
	back_to_primary(2);
	destroy_other(a, 1);
	set_destroyed(a, 1);
	after_failed_set();
	b = make_context(3);
	ctx_alloc(6 * MiB);
	destroy_current(b, 3);
	after_destroy();
	return 0;
}
