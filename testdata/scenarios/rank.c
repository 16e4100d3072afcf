/*
 * rank: one rank started by launcher (RANK=0 or 1 in the environment; not a
 * scenario on its own). It calls cudaSetDevice(RANK), then rank_alloc
 * allocates params = 100 MiB + RANK * 10 MiB, grads = (RANK+1) * 8 MiB + RANK
 * and activations = (RANK+1) * 3 MiB, and rank_step frees activations and
 * grads: params stay live. Its truth goes to $VRAMPROF_TRUTH.<pid>.
 *   RANK=0 (device 0): 3 allocations, 116391936 bytes = peak, live 104857600
 *   RANK=1 (device 1): 3 allocations, 138412033 bytes = peak, live 115343360
 */
#include "truth.h"

#include <stdio.h>
#include <stdlib.h>

static void *params, *grads, *acts;

NOINLINE void rank_alloc(int rank)
{
	check_cuda(TRUTH_MALLOC(&params, 100 * MiB + (size_t)rank * 10 * MiB), __func__);
	check_cuda(TRUTH_MALLOC(&grads, (size_t)(rank + 1) * 8 * MiB + (size_t)rank), __func__);
	check_cuda(TRUTH_MALLOC(&acts, (size_t)(rank + 1) * 3 * MiB), __func__);
}

NOINLINE void rank_step(void)
{
	check_cuda(TRUTH_FREE(acts), __func__);
	check_cuda(TRUTH_FREE(grads), __func__);
}

int main(void)
{
	const char *s = getenv("RANK");
	int rank = s && *s ? atoi(s) : 0;

	truth_init_child("rank");
	check_cuda(TRUTH_SET_DEVICE(rank), "cudaSetDevice");
	rank_alloc(rank);
	rank_step();
	return 0;
}
