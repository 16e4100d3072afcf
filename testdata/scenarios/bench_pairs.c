/*
 * bench_pairs N: N x (cudaMalloc of 1 MiB, then cudaFree), timed around the
 * loop with CLOCK_MONOTONIC; prints "ns_per_pair <float>" and exits. No truth
 * log: the loop is the measurement, and nothing else is in it. Used by
 * `make bench` to price the probes: the same binary runs unprobed, under a
 * bare counting probe and under vramprof, in one run.
 */
#include <cuda_runtime_api.h>
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
	void *p = NULL;
	if (cudaMalloc(&p, 1 << 20) != cudaSuccess)
		return 1;
	return cudaFree(p) != cudaSuccess;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	if (n <= 0) {
		fprintf(stderr, "usage: bench_pairs N (N > 0)\n");
		return 2;
	}
	/* Warm up: the first call resolves the PLT and reads the environment. */
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
