/*
 * bench_pairs N: N x (cudaMalloc of 1 MiB, then cudaFree), timed around the
 * loop with CLOCK_MONOTONIC; prints "ns_per_pair <float>" and exits. No truth
 * log: the loop is the measurement, and nothing else is in it. Used by
 * `make bench` to price the probes: the same binary runs unprobed, under a
 * bare counting probe and under vramprof, in one run.
 *
 * With $BENCH_THREADS = T > 1, T threads each make N pairs at once (after
 * their warm-up, released together), and ns_per_pair is the wall time from
 * their release to the last one's end, over N: what a round of T pairs
 * costs when every thread calls at full rate.
 *
 * With $BENCH_GUARD = 1, each call of a pair is preceded by cudaSetDevice(0),
 * as a framework's device guard makes the call's device current around
 * every allocation and free: a pair is then cudaSetDevice, cudaMalloc,
 * cudaSetDevice, cudaFree, and each cudaSetDevice calls cuCtxSetCurrent in
 * the driver (the first also cuDevicePrimaryCtxRetain). Only the first
 * changes the thread's device.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_THREADS 64

#define NOINLINE __attribute__((noinline))

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int guard; /* $BENCH_GUARD */

NOINLINE static int pair(void)
{
	void *p = NULL;
	if (guard && cudaSetDevice(0) != cudaSuccess)
		return 1;
	if (cudaMalloc(&p, 1 << 20) != cudaSuccess)
		return 1;
	if (guard && cudaSetDevice(0) != cudaSuccess)
		return 1;
	return cudaFree(p) != cudaSuccess;
}

static long pairs_per_thread;
static pthread_barrier_t ready, go;

static void *worker(void *arg)
{
	(void)arg;
	long failed = 0;
	for (int i = 0; i < 100; i++)
		failed |= pair();
	pthread_barrier_wait(&ready);
	pthread_barrier_wait(&go);
	for (long i = 0; i < pairs_per_thread && !failed; i++)
		failed |= pair();
	return (void *)failed;
}

/* threaded runs T workers of n pairs each; returns the wall time from their
 * release to the last join, in ns, or a negative value on failure. */
static double threaded(int t, long n)
{
	pthread_t th[MAX_THREADS];
	pairs_per_thread = n;
	pthread_barrier_init(&ready, NULL, (unsigned)t + 1);
	pthread_barrier_init(&go, NULL, (unsigned)t + 1);
	for (int i = 0; i < t; i++)
		if (pthread_create(&th[i], NULL, worker, NULL))
			return -1;
	pthread_barrier_wait(&ready); /* every warm-up done */
	double t0 = now_ns();
	pthread_barrier_wait(&go);
	long failed = 0;
	for (int i = 0; i < t; i++) {
		void *r;
		pthread_join(th[i], &r);
		failed |= (long)r;
	}
	double t1 = now_ns();
	return failed ? -1 : t1 - t0;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	if (n <= 0) {
		fprintf(stderr, "usage: bench_pairs N (N > 0)\n");
		return 2;
	}
	const char *g = getenv("BENCH_GUARD");
	guard = g && atoi(g) == 1;
	const char *threads = getenv("BENCH_THREADS");
	int t = threads ? atoi(threads) : 1;
	if (t < 1 || t > MAX_THREADS) {
		fprintf(stderr, "bench_pairs: BENCH_THREADS=%s: want 1 to %d\n", threads, MAX_THREADS);
		return 2;
	}
	if (t > 1) {
		double wall = threaded(t, n);
		if (wall < 0)
			return 1;
		printf("ns_per_pair %.1f\n", wall / (double)n);
		return 0;
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
