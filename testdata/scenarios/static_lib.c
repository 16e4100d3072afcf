/*
 * static_lib: two copies of the CUDA runtime in one process. main_alloc
 * uses libcudart.so.12; engine_alloc (in libengine.so) uses the copy linked
 * statically into libengine.so. Both must be probed, each call counted once.
 * main_alloc: 4 x 8 MiB, frees 2 (16 MiB live). engine_alloc: 2, 4, 6, 8,
 * 10 MiB, frees the first 3 (18 MiB live). Live at end 34 MiB = 35651584.
 */
#include "truth.h"

#define NMAIN 4

void engine_alloc(void);

static void *bufs[NMAIN];

NOINLINE void main_alloc(void)
{
	for (int i = 0; i < NMAIN; i++)
		check_cuda(TRUTH_MALLOC(&bufs[i], 8 * MiB), __func__);
	for (int i = 0; i < 2; i++) {
		check_cuda(TRUTH_FREE(bufs[i]), __func__);
		bufs[i] = NULL;
	}
}

int main(void)
{
	truth_init("static_lib");
	main_alloc();
	engine_alloc();
	return 0;
}
