/*
 * truth.h: the ground-truth log every scenario links in.
 *
 * A scenario function calls cudaMalloc/cudaFree itself (so it is the direct
 * caller in the native stack) and then records what happened here, through
 * the TRUTH_* macros, which expand inside the calling function. The log never
 * asks the runtime or vramprof anything: it is what the program did.
 *
 * At exit (atexit) or on truth_write(), the log is written as JSON to the path
 * in $VRAMPROF_TRUTH (via a temporary file and rename, so a reader never sees
 * half a file); when that is unset nothing is written. The schema is in
 * ../README.md. All functions are safe for concurrent use.
 */
#ifndef TRUTH_H
#define TRUTH_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#define NOINLINE __attribute__((noinline))

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* truth_init starts the log for scenario; calls are traced from now on. */
void truth_init(const char *scenario);

/* truth_init_untraced starts the log with tracing off: allocations recorded
 * before truth_start_tracing are "preexisting" (what a profiler that attaches
 * later never saw), kept out of totals, by_function and calls. */
void truth_init_untraced(const char *scenario);
void truth_start_tracing(void);

/* truth_malloc and truth_free record one call just after it returned. Use the
 * macros below rather than calling them directly. */
void truth_malloc(const char *func, cudaError_t ret, void *ptr, size_t size);
void truth_free(const char *func, cudaError_t ret, void *ptr);

/* truth_write writes the log now; the atexit hook writes again only if calls
 * were recorded since. Returns 0, or -1 (and says why on stderr). */
int truth_write(void);

/* truth_capacity is $FAKECUDA_CAPACITY parsed as the fake runtime parses it. */
uint64_t truth_capacity(void);

/* truth_sleep_ms sleeps without touching CUDA. */
void truth_sleep_ms(long ms);

/* TRUTH_MALLOC_VIA(fn, pp, size) calls fn(pp, size) from the enclosing
 * function, records it under __func__ and evaluates to the return code. */
#define TRUTH_MALLOC_VIA(fn, pp, size)                                   \
	__extension__({                                                  \
		size_t truth_size_ = (size);                             \
		void **truth_pp_ = (void **)(pp);                        \
		cudaError_t truth_ret_ = (fn)(truth_pp_, truth_size_);   \
		truth_malloc(__func__, truth_ret_, *truth_pp_,           \
			     truth_size_);                               \
		truth_ret_;                                              \
	})

/* TRUTH_FREE_VIA(fn, p) calls fn(p) from the enclosing function, records it
 * under __func__ and evaluates to the return code. */
#define TRUTH_FREE_VIA(fn, p)                                            \
	__extension__({                                                  \
		void *truth_p_ = (void *)(p);                            \
		cudaError_t truth_ret_ = (fn)(truth_p_);                 \
		truth_free(__func__, truth_ret_, truth_p_);              \
		truth_ret_;                                              \
	})

#define TRUTH_MALLOC(pp, size) TRUTH_MALLOC_VIA(cudaMalloc, pp, size)
#define TRUTH_FREE(p) TRUTH_FREE_VIA(cudaFree, p)

/* check_cuda exits with a message when a call that must succeed did not. */
void check_cuda(cudaError_t ret, const char *what);

#endif
