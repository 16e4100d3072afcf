/*
 * ctx_guard: a device guard around every call, and context switches, on one
 * thread. Each guarded call is preceded by cudaSetDevice of the device it
 * works on, as a framework's device guard does; most of those change
 * nothing.
 *
 * 12 rounds: round i works on device d = (i / 4) % 2 (0 0 0 0 1 1 1 1 0 0 0
 * 0): guard_alloc sets d and allocates (i + 1) MiB, guard_free sets d and
 * frees it. Of the 24 cudaSetDevice calls, 3 change the thread's device
 * (rounds 0, from none, 4 and 8). Then switch_context makes device 2's
 * primary context current with the driver (cuDevicePrimaryCtxRetain, then
 * cuCtxSetCurrent twice: the second changes nothing) and ctx_alloc keeps
 * 5 MiB there. bad_device's cudaSetDevice(7) fails (4 devices): the thread
 * stays on device 2, where after_failed keeps 7 MiB. Last, guard_alloc and
 * guard_free on device 3 (3 MiB), a change and then none.
 *
 * Per device (allocations / allocated / live at end):
 *   0: 8 / (1+2+3+4+9+10+11+12) MiB = 52 MiB / 0
 *   1: 4 / (5+6+7+8) MiB = 26 MiB / 0
 *   2: 2 / 12 MiB / 12 MiB
 *   3: 1 / 3 MiB / 0
 * The truth's calls[] holds every set-device call with its outcome and
 * device, in order (cuCtxSetCurrent nested in cudaSetDevice is not listed).
 */
#include "truth.h"

#include <stdio.h>
#include <stdlib.h>

#define ROUNDS 12

NOINLINE void *guard_alloc(int device, size_t size)
{
	void *p = NULL;

	check_cuda(TRUTH_SET_DEVICE(device), __func__);
	check_cuda(TRUTH_MALLOC(&p, size), __func__);
	return p;
}

NOINLINE void guard_free(int device, void *p)
{
	check_cuda(TRUTH_SET_DEVICE(device), __func__);
	check_cuda(TRUTH_FREE(p), __func__);
}

NOINLINE void switch_context(int device)
{
	CUcontext ctx;

	check_cu(cuDevicePrimaryCtxRetain(&ctx, device), __func__);
	check_cu(TRUTH_CU_CTX_SET_CURRENT(ctx, device), __func__);
	check_cu(TRUTH_CU_CTX_SET_CURRENT(ctx, device), __func__);
}

NOINLINE void ctx_alloc(void **p)
{
	check_cuda(TRUTH_MALLOC(p, 5 * MiB), __func__);
}

NOINLINE void bad_device(void)
{
	if (TRUTH_SET_DEVICE(7) == cudaSuccess) {
		fprintf(stderr, "cudaSetDevice(7) succeeded\n");
		exit(3);
	}
}

NOINLINE void after_failed(void **p)
{
	check_cuda(TRUTH_MALLOC(p, 7 * MiB), __func__);
}

int main(void)
{
	void *kept1 = NULL, *kept2 = NULL;

	truth_init("ctx_guard");
	for (int i = 0; i < ROUNDS; i++) {
		int d = (i / 4) % 2;
		guard_free(d, guard_alloc(d, (size_t)(i + 1) * MiB));
	}
	switch_context(2);
	ctx_alloc(&kept1);
	bad_device();
	after_failed(&kept2);
	guard_free(3, guard_alloc(3, 3 * MiB));
	return 0;
}
