/*
 * async_streams: stream-ordered allocation on two streams (device 0).
 * make_streams creates streams s1, s2 and gets device 0's default pool.
 * stream_alloc: cudaMallocAsync 8 MiB on s1 and 12 MiB + 100 on s2,
 * cudaMallocAsync_ptsz 4 MiB on stream 0 (the per-thread default stream).
 * pool_alloc: cudaMallocFromPoolAsync 6 MiB on s2 and
 * cudaMallocFromPoolAsync_ptsz 2 MiB on s1. stream_free: cudaFreeAsync of
 * the 8 MiB buffer on s1, cudaFreeAsync_ptsz of the 4 MiB one on stream 0,
 * and a plain cudaFree of the 12 MiB + 100 one.
 * 5 allocations, 33554532 bytes, all live at the peak; 3 frees; the pool's
 * 8 MiB (8388608) are live at the end.
 */
#include "truth.h"

static cudaStream_t s1, s2;
static cudaMemPool_t pool;
static void *a1, *a2, *a3, *a4, *a5;

NOINLINE void make_streams(void)
{
	check_cuda(TRUTH_STREAM_CREATE(&s1), __func__);
	check_cuda(TRUTH_STREAM_CREATE(&s2), __func__);
	check_cuda(TRUTH_DEFAULT_MEM_POOL(&pool, 0), __func__);
}

NOINLINE void stream_alloc(void)
{
	check_cuda(TRUTH_MALLOC_ASYNC(&a1, 8 * MiB, s1), __func__);
	check_cuda(TRUTH_MALLOC_ASYNC(&a2, 12 * MiB + 100, s2), __func__);
	check_cuda(TRUTH_MALLOC_ASYNC_PTSZ(&a3, 4 * MiB, (cudaStream_t)0), __func__);
}

NOINLINE void pool_alloc(void)
{
	check_cuda(TRUTH_MALLOC_FROM_POOL_ASYNC(&a4, 6 * MiB, pool, s2), __func__);
	check_cuda(TRUTH_MALLOC_FROM_POOL_ASYNC_PTSZ(&a5, 2 * MiB, pool, s1), __func__);
}

NOINLINE void stream_free(void)
{
	check_cuda(TRUTH_FREE_ASYNC(a1, s1), __func__);
	check_cuda(TRUTH_FREE_ASYNC_PTSZ(a3, (cudaStream_t)0), __func__);
	check_cuda(cudaDeviceSynchronize(), __func__);
	check_cuda(TRUTH_FREE(a2), __func__);
}

int main(void)
{
	truth_init("async_streams");
	make_streams();
	stream_alloc();
	pool_alloc();
	stream_free();
	check_cuda(cudaStreamDestroy(s1), "cudaStreamDestroy");
	check_cuda(cudaStreamDestroy(s2), "cudaStreamDestroy");
	return 0;
}
