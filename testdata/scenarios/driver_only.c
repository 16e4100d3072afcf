/*
 * driver_only: the runtime is linked in statically and its symbols are
 * stripped from the executable (cudaMalloc is in neither .symtab nor
 * .dynsym), so a profiler sees only the driver's cuMemAlloc_v2/cuMemFree_v2,
 * called from an anonymous runtime frame under hidden_alloc.
 * hidden_alloc allocates 6 buffers of (i+1) * 7 MiB with cudaMalloc and frees
 * the first 4: 147 MiB = 154140672 bytes allocated (= peak), 77 MiB =
 * 80740352 live at end. books: runtime and driver both 6 allocations,
 * 4 frees.
 */
#include "truth.h"

#define NBUFS 6

static void *bufs[NBUFS];

NOINLINE void hidden_alloc(void)
{
	for (int i = 0; i < NBUFS; i++)
		check_cuda(TRUTH_MALLOC(&bufs[i], (size_t)(i + 1) * 7 * MiB), __func__);
	for (int i = 0; i < NBUFS - 2; i++) {
		check_cuda(TRUTH_FREE(bufs[i]), __func__);
		bufs[i] = NULL;
	}
}

int main(void)
{
	truth_init("driver_only");
	hidden_alloc();
	return 0;
}
