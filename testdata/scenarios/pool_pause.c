/*
 * pool_pause N: N x (c10_alloc of 1 MiB, then c10_free) through the caching
 * allocator, then waits for a byte on stdin, then N pairs more, all on the
 * main thread (what a tracer keeps per thread outlives the pause). The
 * segment is cudaMalloc'ed once, in the first pair.
 * Prints "phase1 done" before waiting and "phase2 done" at the end. Used by
 * probes' TestBlockFilterChange: the tracer changes what it traces
 * during the pause.
 */
#include <c10_cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int pairs(long n)
{
	for (long i = 0; i < n; i++) {
		void *p = c10_alloc(1 << 20, 0, NULL);
		if (!p || c10_free(p) != 0)
			return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 0;
	if (n <= 0) {
		fprintf(stderr, "usage: pool_pause N (N > 0)\n");
		return 2;
	}
	if (pairs(n))
		return 1;
	printf("phase1 done\n");
	fflush(stdout);
	char c;
	if (read(0, &c, 1) != 1)
		return 3;
	if (pairs(n))
		return 1;
	printf("phase2 done\n");
	return 0;
}
