/*
 * pool.h: scenarios over the caching allocator (build/lib/libc10_cuda.so).
 * pool_truth_init starts the truth log and makes the allocator report its
 * segments (every cudaMalloc/cudaFree it made, charged to the C++ function
 * that made it) and its free-all-and-retries to it. The C10_* macros call the
 * allocator from the enclosing function and record the block under __func__.
 */
#ifndef POOL_H
#define POOL_H

#include "truth.h"
#include <c10_cuda.h>

/* The functions the allocator's CUDA calls are charged to (their demangled
 * names without parameters, as a profiler shows them). */
#define C10_ALLOC_BLOCK_FUNC "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_block"
#define C10_RELEASE_BLOCK_FUNC \
	"c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::release_block"

void pool_truth_init(const char *scenario);
/* pool_record_oom records the allocator's state at the last failed
 * c10_alloc as a fragmentation record charged to func. */
void pool_record_oom(const char *func);
/* pool_print_stats prints the allocator's device-0 stats on stderr. */
void pool_print_stats(const char *when);
/* pool_write_stats writes the allocator's device-0 stats (c10_memory_stats)
 * as JSON to "$VRAMPROF_TRUTH-allocator.json" (nothing when that is unset):
 * the allocator's own figures at that moment, for tests to compare. */
void pool_write_stats(const char *when);

/* C10_ALLOC(size): c10_alloc(size, current device, NULL stream). */
#define C10_ALLOC_ON(size, stream)                                                      \
	__extension__({                                                                 \
		size_t c10_size_ = (size);                                              \
		void *c10_stream_ = (stream);                                           \
		int c10_dev_ = truth_current_device();                                  \
		truth_block_enter(__func__);                                            \
		void *c10_p_ = c10_alloc(c10_size_, c10_dev_, c10_stream_);             \
		truth_block_alloc(__func__, TRUTH_U64_(c10_p_), c10_size_, c10_dev_,    \
				  TRUTH_U64_(c10_stream_));                             \
		if (c10_p_ == NULL)                                                     \
			pool_record_oom(__func__);                                      \
		c10_p_;                                                                 \
	})
#define C10_ALLOC(size) C10_ALLOC_ON(size, NULL)

#define C10_FREE(p)                                                                     \
	__extension__({                                                                 \
		void *c10_p_ = (p);                                                     \
		int c10_ret_ = c10_free(c10_p_);                                        \
		truth_block_free(__func__, c10_ret_, TRUTH_U64_(c10_p_));               \
		c10_ret_;                                                               \
	})

#define C10_EMPTY_CACHE()                                                               \
	do {                                                                            \
		c10_empty_cache();                                                      \
		truth_empty_cache(__func__);                                            \
	} while (0)

/* must_alloc: C10_ALLOC that exits (3) on NULL, for allocations that the
 * scenario's arithmetic says succeed. */
#define C10_MUST_ALLOC(size)                                                            \
	__extension__({                                                                 \
		void *c10_m_ = C10_ALLOC(size);                                         \
		if (c10_m_ == NULL)                                                     \
			pool_fail(__func__, (size));                                    \
		c10_m_;                                                                 \
	})
void pool_fail(const char *func, size_t size) __attribute__((noreturn));

#endif
