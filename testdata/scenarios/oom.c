/*
 * oom: a trainer that dies of out-of-memory. FAKECUDA_CAPACITY is the device
 * size (default here 1 GiB: main sets it when unset, before the first CUDA
 * call; the runtime reads it lazily). probe_device does one cudaMalloc of size
 * 0 (returns NULL) and one cudaFree(NULL). grow_buffers allocates 64 MiB,
 * 128 MiB, 192 MiB, ... (k * 64 MiB) until cudaMalloc returns 2; release_all
 * frees everything; the truth is written and the process exits with code 1.
 * With 1 GiB: 5 allocations (960 MiB = peak), the 6th (384 MiB) fails.
 */
#include "truth.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX_BUFFERS 4096

static void *buffers[MAX_BUFFERS];
static int nbuffers;

NOINLINE void probe_device(void)
{
	void *p = (void *)1;

	check_cuda(TRUTH_MALLOC(&p, 0), __func__);
	if (p != NULL) {
		fprintf(stderr, "cudaMalloc(0) did not return NULL\n");
		exit(3);
	}
	check_cuda(TRUTH_FREE(NULL), __func__);
}

/* grow_buffers returns the size of the request that failed. */
NOINLINE size_t grow_buffers(void)
{
	for (size_t k = 1; nbuffers < MAX_BUFFERS; k++) {
		void *p = NULL;
		size_t size = k * 64 * MiB;
		cudaError_t ret = TRUTH_MALLOC(&p, size);
		if (ret == cudaErrorMemoryAllocation)
			return size;
		check_cuda(ret, __func__);
		buffers[nbuffers++] = p;
	}
	fprintf(stderr, "grow_buffers: capacity never reached\n");
	exit(3);
}

NOINLINE void release_all(void)
{
	for (int i = 0; i < nbuffers; i++)
		check_cuda(TRUTH_FREE(buffers[i]), __func__);
	nbuffers = 0;
}

int main(void)
{
	size_t failed;

	setenv("FAKECUDA_CAPACITY", "1073741824", 0);
	truth_init("oom");
	probe_device();
	failed = grow_buffers();
	fprintf(stderr,
		"RuntimeError: CUDA out of memory. Tried to allocate %zu bytes "
		"(%d buffers held)\n",
		failed, nbuffers);
	release_all();
	if (truth_write() != 0)
		return 3;
	exit(1);
}
