/*
 * churn_threads: 16 churner threads each make $CHURN_PAIRS (default 100000)
 * cudaMalloc/cudaFree pairs of 1 MiB in churn_pair, while 8 keeper threads
 * each allocate 1000 buffers of 1 MiB in keep_buffer and keep them. Every
 * pointer the driver hands out is the lowest free one, so an address one
 * thread frees is handed at once to another thread's cudaMalloc: a free's
 * return and the reallocation's return race, the case where a profiler that
 * orders calls by their return misreads a free as one of memory never seen
 * allocated (issue 10).
 *
 * The truth is not truth.c's per-call log: that one records each call after
 * it returned, under one lock, so it cannot order a free against another
 * thread's reallocation of the same address any better than the profiler
 * (and 3.2 million calls would be a 400 MB log). This program counts what it
 * did with atomics, which needs no order: allocations, frees, bytes, and
 * what it keeps. It writes $VRAMPROF_TRUTH (temporary file, then rename) in
 * the schema of ../README.md, "Truth JSON", keys "scenario", "pid", "totals"
 * (peak_bytes left out: with concurrent threads the program cannot know its
 * own peak without serializing them) and "books" (every cudaMalloc and
 * cudaFree here makes one nested driver call).
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

#define CHURNERS 16
#define KEEPERS 8
#define KEPT_PER_KEEPER 1000
#define SIZE ((size_t)1 << 20)

static long pairs = 100000;
static uint64_t allocations, frees, allocated_bytes, live_bytes;
static pthread_barrier_t start;

static void fail(const char *what, cudaError_t ret)
{
	fprintf(stderr, "churn_threads: %s returned %d\n", what, (int)ret);
	exit(2);
}

/* churn_pair allocates and frees one buffer. */
NOINLINE void churn_pair(void)
{
	void *p = NULL;
	cudaError_t ret = cudaMalloc(&p, SIZE);
	if (ret != cudaSuccess)
		fail("cudaMalloc", ret);
	__atomic_add_fetch(&allocations, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&allocated_bytes, SIZE, __ATOMIC_RELAXED);
	ret = cudaFree(p);
	if (ret != cudaSuccess)
		fail("cudaFree", ret);
	__atomic_add_fetch(&frees, 1, __ATOMIC_RELAXED);
}

/* keep_buffer allocates one buffer that stays live to the end. */
NOINLINE void keep_buffer(void)
{
	void *p = NULL;
	cudaError_t ret = cudaMalloc(&p, SIZE);
	if (ret != cudaSuccess)
		fail("cudaMalloc", ret);
	__atomic_add_fetch(&allocations, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&allocated_bytes, SIZE, __ATOMIC_RELAXED);
	__atomic_add_fetch(&live_bytes, SIZE, __ATOMIC_RELAXED);
}

static void *churner(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&start);
	for (long i = 0; i < pairs; i++)
		churn_pair();
	return NULL;
}

/* keeper spreads its allocations over the churners' run: its k-th waits
 * until the churners have made k/KEPT_PER_KEEPER of their pairs, so kept
 * buffers take addresses churners have just freed all along. */
static void *keeper(void *arg)
{
	(void)arg;
	uint64_t total = (uint64_t)CHURNERS * (uint64_t)pairs;
	pthread_barrier_wait(&start);
	for (int k = 0; k < KEPT_PER_KEEPER; k++) {
		uint64_t due = total * (uint64_t)k / KEPT_PER_KEEPER;
		while (__atomic_load_n(&frees, __ATOMIC_RELAXED) < due)
			usleep(50);
		keep_buffer();
	}
	return NULL;
}

static int write_truth(void)
{
	const char *path = getenv("VRAMPROF_TRUTH");
	if (!path)
		return 0;
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	FILE *f = fopen(tmp, "w");
	if (!f) {
		perror(tmp);
		return -1;
	}
	fprintf(f,
		"{\"scenario\": \"churn_threads\", \"pid\": %d,\n"
		" \"totals\": {\"allocations\": %llu, \"frees\": %llu, \"failed_allocations\": 0,"
		" \"unknown_frees\": 0, \"null_frees\": 0, \"zero_size_allocations\": 0,"
		" \"allocated_bytes\": %llu, \"live_bytes_at_end\": %llu},\n"
		" \"books\": {\"runtime\": {\"allocations\": %llu, \"frees\": %llu, \"allocated_bytes\": %llu},\n"
		"           \"driver\": {\"allocations\": %llu, \"frees\": %llu, \"allocated_bytes\": %llu}},\n"
		" \"children\": []}\n",
		(int)getpid(), (unsigned long long)allocations, (unsigned long long)frees,
		(unsigned long long)allocated_bytes, (unsigned long long)live_bytes,
		(unsigned long long)allocations, (unsigned long long)frees,
		(unsigned long long)allocated_bytes, (unsigned long long)allocations,
		(unsigned long long)frees, (unsigned long long)allocated_bytes);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		perror(path);
		return -1;
	}
	return 0;
}

int main(void)
{
	const char *env = getenv("CHURN_PAIRS");
	if (env) {
		pairs = atol(env);
		if (pairs < 0) {
			fprintf(stderr, "churn_threads: CHURN_PAIRS must be >= 0\n");
			return 2;
		}
	}
	pthread_t th[CHURNERS + KEEPERS];
	pthread_barrier_init(&start, NULL, CHURNERS + KEEPERS);
	for (long t = 0; t < CHURNERS + KEEPERS; t++)
		if (pthread_create(&th[t], NULL, t < CHURNERS ? churner : keeper, NULL) != 0) {
			perror("pthread_create");
			return 3;
		}
	for (int t = 0; t < CHURNERS + KEEPERS; t++)
		pthread_join(th[t], NULL);
	return write_truth() ? 1 : 0;
}
