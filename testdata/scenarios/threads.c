/*
 * threads: 8 pthreads, 3 rounds. Each round every thread allocates 16
 * buffers of distinct sizes in worker_alloc, all meet at a barrier, then each
 * frees its buffers in worker_free and all meet again. Peak: the sum held at
 * the first barrier (every buffer of a round is live; rounds reuse sizes).
 * Thread t, buffer k (0-based) has size (n + 1) * 65536 + n, n = t*16 + k,
 * so the peak is 65536 * 128*129/2 + 127*128/2 = 541073344 bytes.
 */
#include "truth.h"

#include <pthread.h>
#include <stdio.h>

#define NTHREADS 8
#define NBUFS 16
#define ROUNDS 3

static pthread_barrier_t barrier;

static size_t buffer_size(int t, int k)
{
	return (size_t)(t * NBUFS + k + 1) * 65536 + (size_t)(t * NBUFS + k);
}

NOINLINE void worker_alloc(int t, void **bufs)
{
	for (int k = 0; k < NBUFS; k++)
		check_cuda(TRUTH_MALLOC(&bufs[k], buffer_size(t, k)), __func__);
}

NOINLINE void worker_free(void **bufs)
{
	for (int k = 0; k < NBUFS; k++) {
		check_cuda(TRUTH_FREE(bufs[k]), __func__);
		bufs[k] = NULL;
	}
}

static void *worker(void *arg)
{
	int t = (int)(long)arg;
	void *bufs[NBUFS] = {0};

	for (int r = 0; r < ROUNDS; r++) {
		worker_alloc(t, bufs);
		pthread_barrier_wait(&barrier);
		worker_free(bufs);
		pthread_barrier_wait(&barrier);
	}
	return NULL;
}

int main(void)
{
	pthread_t th[NTHREADS];

	truth_init("threads");
	pthread_barrier_init(&barrier, NULL, NTHREADS);
	for (long t = 0; t < NTHREADS; t++)
		if (pthread_create(&th[t], NULL, worker, (void *)t) != 0) {
			perror("pthread_create");
			return 3;
		}
	for (int t = 0; t < NTHREADS; t++)
		pthread_join(th[t], NULL);
	return 0;
}
