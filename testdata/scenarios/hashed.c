/*
 * hashed: linked against the hashed copy libcudart-1a2b3c4d.so.12 (SONAME
 * too), as pip wheels ship it. hashed_alloc allocates 6 buffers of
 * (i+1) * 5 MiB and frees them all; peak 105 MiB = 110100480 bytes.
 */
#include "truth.h"

#define NBUFS 6

NOINLINE void hashed_alloc(void)
{
	void *bufs[NBUFS];

	for (int i = 0; i < NBUFS; i++)
		check_cuda(TRUTH_MALLOC(&bufs[i], (size_t)(i + 1) * 5 * MiB), __func__);
	for (int i = 0; i < NBUFS; i++)
		check_cuda(TRUTH_FREE(bufs[i]), __func__);
}

int main(void)
{
	truth_init("hashed");
	hashed_alloc();
	return 0;
}
