/*
 * engine.c: libengine.so, a shared library with the CUDA runtime linked in
 * statically (libcudart_static.a) and its API left visible, bound to its own
 * copy (-Bsymbolic-functions), as vendored inference engines ship it. It
 * also carries the truth log for the static_lib scenario.
 * engine_alloc allocates 5 buffers of (i+1) * 2 MiB through the engine's own
 * runtime copy and frees the first 3: 4 + 5... see static_lib.c.
 */
#include "truth.h"

#define NBUFS 5

static void *bufs[NBUFS];

NOINLINE void engine_alloc(void)
{
	for (int i = 0; i < NBUFS; i++)
		check_cuda(TRUTH_MALLOC(&bufs[i], (size_t)(i + 1) * 2 * MiB), __func__);
	for (int i = 0; i < 3; i++) {
		check_cuda(TRUTH_FREE(bufs[i]), __func__);
		bufs[i] = NULL;
	}
}
