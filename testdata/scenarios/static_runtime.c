/*
 * static_runtime: the runtime is linked in from libcudart_static.a, so
 * cudaMalloc/cudaFree are in this executable's .symtab only (not .dynsym).
 * static_alloc allocates 8 buffers of (i+1) * 3 MiB and frees all but the
 * last two: 21 + 24 MiB = 47185920 bytes live at end.
 */
#include "truth.h"

#define NBUFS 8

static void *bufs[NBUFS];

NOINLINE void static_alloc(void)
{
	for (int i = 0; i < NBUFS; i++)
		check_cuda(TRUTH_MALLOC(&bufs[i], (size_t)(i + 1) * 3 * MiB), __func__);
	for (int i = 0; i < NBUFS - 2; i++) {
		check_cuda(TRUTH_FREE(bufs[i]), __func__);
		bufs[i] = NULL;
	}
}

int main(void)
{
	truth_init("static_runtime");
	static_alloc();
	return 0;
}
