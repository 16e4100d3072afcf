/*
 * four_devices: one process, four devices.
 * main's default_alloc allocates 3 MiB on device 0 without ever calling
 * cudaSetDevice (the default device). Then 4 threads: thread i calls
 * cudaSetDevice(i); device_alloc allocates A = (i+1) * 16 MiB and
 * B = (i+1) MiB + i on device i; barrier; device_free frees B; barrier.
 * Thread 1 then makes the primary context of device 3 current with the
 * driver (cuDevicePrimaryCtxRetain + cuCtxSetCurrent) and ctx_alloc
 * allocates 5 MiB there, kept.
 * Per device (allocations / allocated / peak / live at end):
 *   0: 3 / 20971520 / 20971520 / 19922944
 *   1: 2 / 35651585 / 35651585 / 33554432
 *   2: 2 / 53477378 / 53477378 / 50331648
 *   3: 3 / 76546051 / 72351744 / 72351744
 * Totals: 10 allocations, 4 frees, 186646534 bytes, peak 181403654 (at the
 * first barrier), live at end 176160768.
 */
#include "truth.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define NTHREADS 4

static pthread_barrier_t barrier;
static void *default_buf;

NOINLINE void default_alloc(void)
{
	check_cuda(TRUTH_MALLOC(&default_buf, 3 * MiB), __func__);
}

NOINLINE void device_alloc(int i, void **a, void **b)
{
	check_cuda(TRUTH_MALLOC(a, (size_t)(i + 1) * 16 * MiB), __func__);
	check_cuda(TRUTH_MALLOC(b, (size_t)(i + 1) * MiB + (size_t)i), __func__);
}

NOINLINE void device_free(void *b)
{
	check_cuda(TRUTH_FREE(b), __func__);
}

NOINLINE void switch_context(int device)
{
	CUcontext ctx;

	check_cu(cuDevicePrimaryCtxRetain(&ctx, device), __func__);
	check_cu(TRUTH_CU_CTX_SET_CURRENT(ctx, device), __func__);
}

NOINLINE void ctx_alloc(void **p)
{
	check_cuda(TRUTH_MALLOC(p, 5 * MiB), __func__);
}

static void *worker(void *arg)
{
	int i = (int)(long)arg;
	void *a = NULL, *b = NULL, *c = NULL;
	int dev = -1;

	check_cuda(TRUTH_SET_DEVICE(i), "cudaSetDevice");
	check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
	if (dev != i) {
		fprintf(stderr, "thread %d: current device %d\n", i, dev);
		exit(3);
	}
	device_alloc(i, &a, &b);
	pthread_barrier_wait(&barrier);
	device_free(b);
	pthread_barrier_wait(&barrier);
	if (i == 1) {
		switch_context(3);
		ctx_alloc(&c);
	}
	return NULL;
}

int main(void)
{
	pthread_t th[NTHREADS];

	truth_init("four_devices");
	default_alloc();
	pthread_barrier_init(&barrier, NULL, NTHREADS);
	for (long i = 0; i < NTHREADS; i++)
		if (pthread_create(&th[i], NULL, worker, (void *)i) != 0) {
			perror("pthread_create");
			return 3;
		}
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	return 0;
}
