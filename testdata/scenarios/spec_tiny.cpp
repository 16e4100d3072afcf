/*
 * spec_tiny: blocks from libtinypool.so (../specs/tinypool.cpp), which no
 * built-in spec names: traced with a user spec (testdata/specs/tiny.spec,
 * --allocators). 8 x work: tiny_alloc 100000, tiny_alloc7 (size as arg7)
 * 2 MiB + 1 (it calls tiny_alloc: nested, one block), tiny_alloc 1 MiB +
 * 512 i kept; frees the first two; keep asks 20 MiB, which does not fit
 * the 16 MiB region: NULL, a failed allocation; main keeps 4 MiB more.
 * Segments: 1 allocation (16777216), 0 frees (the region stays), live
 * 16777216. Blocks: 25 allocations + 1 failed, 16 frees, 30174472 bytes,
 * peak 12597248, live 12597248.
 */
#include "spec_truth.h"

#include <stdlib.h>

extern "C" {
void tiny_set_observer(const fake_observer *o);
void *tiny_alloc(size_t size);
void *tiny_alloc7(int a, int b, int c, int d, int e, int f, size_t size);
void tiny_free(void *ptr);
}

static void *kept[8];

NOINLINE static void work(int i)
{
	void *a = SPEC_BLOCK_ALLOC(tiny_alloc(100000), 100000);
	void *b = SPEC_BLOCK_ALLOC(tiny_alloc7(1, 2, 3, 4, 5, 6, 2 * MiB + 1), 2 * MiB + 1);
	kept[i] = SPEC_BLOCK_ALLOC(tiny_alloc(1 * MiB + 512 * i), 1 * MiB + 512 * i);
	SPEC_BLOCK_FREE(tiny_free(a), a);
	SPEC_BLOCK_FREE(tiny_free(b), b);
}

NOINLINE static void keep(void)
{
	void *p = SPEC_BLOCK_ALLOC(tiny_alloc(20 * MiB), 20 * MiB);
	if (p != nullptr)
		exit(3);
}

int main(void)
{
	truth_init("spec_tiny");
	tiny_set_observer(&spec_observer);
	for (int i = 0; i < 8; i++)
		work(i);
	keep();
	void *last = SPEC_BLOCK_ALLOC(tiny_alloc(4 * MiB), 4 * MiB);
	(void)last;
	return 0;
}
