/*
 * spec_truth.h: the truth log for the scenarios over the fake allocators
 * in ../specs (C++). The libraries report their cudaMalloc/cudaFree calls
 * through fake_observer; the SPEC_* macros record blocks under the
 * enclosing function's name, as pool.h does for the caching allocator.
 */
#ifndef SPEC_TRUTH_H
#define SPEC_TRUTH_H

extern "C" {
#include "truth.h"
}
#include "observer.h"

static void spec_seg_alloc(const char *func, int ret, void *ptr, size_t size)
{
	truth_malloc(func, (cudaError_t)ret, ptr, size);
}

static void spec_seg_free(const char *func, int ret, void *ptr)
{
	truth_free(func, (cudaError_t)ret, ptr);
}

static const fake_observer spec_observer = {spec_seg_alloc, spec_seg_free};

/* SPEC_BLOCK_ALLOC(call, size): a block allocation by call (nullptr: failed). */
#define SPEC_BLOCK_ALLOC(call, size)                                                    \
	__extension__({                                                                 \
		size_t spec_size_ = (size);                                             \
		truth_block_enter(__func__);                                            \
		void *spec_p_ = (call);                                                 \
		truth_block_alloc(__func__, TRUTH_U64_(spec_p_), spec_size_,            \
				  truth_current_device(), 0);                           \
		spec_p_;                                                                \
	})

#define SPEC_BLOCK_FREE(call, p)                                                        \
	do {                                                                            \
		call;                                                                   \
		truth_block_free(__func__, 0, TRUTH_U64_(p));                           \
	} while (0)

#endif
