/*
 * bench_blocks N: N x (c10_alloc of 1 MiB, then c10_free) through the
 * caching allocator, after a warm-up that leaves the segment cached: the
 * loop makes no CUDA call, only the allocator's USDT probe sites (which fire
 * only while a tracer holds their semaphores). Prints "ns_per_pair <float>".
 * Used by `make bench` to price --pool.
 */
#include <c10_cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

NOINLINE static int pair(void)
{
	void *p = c10_alloc(1 << 20, 0, NULL);
	if (!p)
		return 1;
	return c10_free(p) != 0;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	if (n <= 0) {
		fprintf(stderr, "usage: bench_blocks N (N > 0)\n");
		return 2;
	}
	for (int i = 0; i < 100; i++)
		if (pair())
			return 1;
	double t0 = now_ns();
	for (long i = 0; i < n; i++)
		if (pair())
			return 1;
	double t1 = now_ns();
	printf("ns_per_pair %.1f\n", (t1 - t0) / (double)n);
	return 0;
}
