/*
 * truth.h: the ground-truth log every scenario links in.
 *
 * A scenario function calls the CUDA API itself (so it is the direct caller
 * in the native stack) and then records what happened here, through the
 * TRUTH_* macros, which expand inside the calling function. The log never
 * asks the runtime, the driver or vramprof anything: it is what the program
 * did (it knows that the runtime makes one nested driver call per runtime
 * allocation call, and which device each thread made current).
 *
 * At exit (atexit) or on truth_write(), the log is written as JSON to the path
 * in $VRAMPROF_TRUTH (via a temporary file and rename, so a reader never sees
 * half a file); when that is unset nothing is written. In a process tree each
 * process writes "$VRAMPROF_TRUTH.<pid>" and the parent also writes
 * "$VRAMPROF_TRUTH" (see ../README.md). The schema is in ../README.md. All
 * functions are safe for concurrent use.
 */
#ifndef TRUTH_H
#define TRUTH_H

#include <cuda_runtime_api.h>
#include <cuda.h>
#include <stdint.h>
#include <sys/types.h>

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

/* truth_init_child starts the log of a process exec()ed by a traced parent:
 * it writes "$VRAMPROF_TRUTH.<pid>". (A fork()ed child needs nothing: at
 * fork its log starts empty and goes to "$VRAMPROF_TRUTH.<pid>".) */
void truth_init_child(const char *scenario);

/* truth_add_child records a child process the parent started; the parent's
 * log lists it under "children". Write the parent's log (exit) only after
 * waiting for the children: its file appears after theirs. */
void truth_add_child(pid_t pid);

/* The API level of a recorded call: a runtime call makes one nested driver
 * call (books count it at both levels; totals once). */
enum truth_level { TRUTH_RUNTIME, TRUTH_DRIVER };

/* truth_malloc and truth_free record one cudaMalloc/cudaFree just after it
 * returned. Use the macros below rather than calling them directly. */
void truth_malloc(const char *func, cudaError_t ret, void *ptr, size_t size);
void truth_free(const char *func, cudaError_t ret, void *ptr);

/* Device memory: an allocation call of any API (size: the bytes it took) and
 * a free of any device pointer (the device is the allocation's). */
void truth_alloc(const char *func, const char *api, int level, int ret, uint64_t ptr,
		 uint64_t size, int device, uint64_t stream);
void truth_dfree(const char *func, const char *api, int level, int ret, uint64_t ptr,
		 uint64_t stream);
/* Pinned host memory. */
void truth_host_alloc(const char *func, const char *api, int level, int ret, uint64_t ptr,
		      uint64_t size);
void truth_host_free(const char *func, const char *api, int level, int ret, uint64_t ptr);
/* Virtual memory management (driver API). */
void truth_reserve(const char *func, int ret, uint64_t ptr, uint64_t size);
void truth_unreserve(const char *func, int ret, uint64_t ptr, uint64_t size);
void truth_create(const char *func, int ret, uint64_t handle, uint64_t size, int device);
void truth_release(const char *func, int ret, uint64_t handle);
void truth_map(const char *func, int ret, uint64_t ptr, uint64_t size, uint64_t handle);
void truth_unmap(const char *func, int ret, uint64_t ptr, uint64_t size);
/* A thread choosing its current device (cudaSetDevice, cuCtxSetCurrent). */
void truth_set_device(const char *func, const char *api, int ret, int device);
/* A context (handle ctx, the call's ptr) created on device (cuCtxCreate_v2:
 * current to the calling thread once made), and one destroyed
 * (cuCtxDestroy_v2; was_current: it was the calling thread's current
 * context, which leaves the thread none: device 0 in the fake driver). */
void truth_ctx_create(const char *func, int ret, uint64_t ctx, int device);
void truth_ctx_destroy(const char *func, int ret, uint64_t ctx, int device, int was_current);

/* The calling thread's current device as the program set it (0 until set). */
int truth_current_device(void);
/* Streams and pools: the device each belongs to. */
void truth_stream(uint64_t stream, int device);
int truth_stream_device(uint64_t stream);
void truth_pool(uint64_t pool, int device);
int truth_pool_device(uint64_t pool);

/* ---- the block layer: a caching allocator's blocks inside segments ----
 * (pool.h records them; see ../README.md, "Truth JSON", blocks.) A log with
 * any block-layer record gains the "blocks", "by_function_blocks",
 * "retries", "fragmentation" and "block_calls" keys; other logs do not. */

/* The allocator's state at a failed cudaMalloc (before the free-all), and
 * what the free-all-and-retry did. */
struct truth_pool_state {
	int device;
	uint64_t requested, rounded, segment_size, reserved_bytes, allocated_bytes,
		requested_bytes, cached_free_bytes, largest_free_range, segments,
		device_free_bytes, device_total_bytes, released_bytes, released_segments;
	int retry_succeeded;
};

/* truth_segment_alloc is truth_alloc for a cudaMalloc made by the allocator;
 * retry marks the one after free-all (its call gets "retry": true). */
void truth_segment_alloc(const char *func, int ret, uint64_t ptr, uint64_t size, int device,
			 int retry);
/* truth_block_enter names the function about to call the allocator on this
 * thread (retries are charged to it). */
void truth_block_enter(const char *func);
/* A block handed out (ptr 0: the allocation failed, the caller raises OOM). */
void truth_block_alloc(const char *func, uint64_t ptr, uint64_t size, int device,
		       uint64_t stream);
/* A block given back (ret: the allocator's return code, 0 = ok). */
void truth_block_free(const char *func, int ret, uint64_t ptr);
/* An empty_cache() call. */
void truth_empty_cache(const char *func);
/* A free-all-and-retry, after it finished (the thread's entered function). */
void truth_pool_retry(const struct truth_pool_state *st);
/* A failed block allocation's state: a "fragmentation" record. */
void truth_block_oom(const char *func, const struct truth_pool_state *st);

/* ---- labels: what is wrong with the program, by its own account ----
 * A corpus program (../corpus/) says what a person would judge of it,
 * independently of any profiler: healthy, or one defect per problem, with
 * the kind of finding it deserves ("leak", "oom", "fragmentation", "churn",
 * "spike", "pinned_host_growth"), the C function that allocates the memory
 * at stake (for churn: the one that calls empty_cache), and the bytes at
 * stake, computed from the sizes the program allocated and kept. A log with
 * either gains a "label" key (../README.md, "Labels"). A process tree labels
 * each process in its own file: a fork()ed child starts unlabelled. */
void truth_label_healthy(void);
void truth_label_defect(const char *kind, const char *site, uint64_t bytes);
/* truth_step marks the start of one step of the program's loop (called
 * first thing in its step function, func = __func__): the label gains
 * "steps" (the function, how many began, the median time between starts,
 * as report.json's iterations give a period).
 * Only the first function named counts. */
void truth_step(const char *func);

/* truth_write writes the log now; the atexit hook writes again only if calls
 * were recorded since. Returns 0, or -1 (and says why on stderr). */
int truth_write(void);

/* truth_capacity is $FAKECUDA_CAPACITY parsed as the fake driver parses it. */
uint64_t truth_capacity(void);

/* truth_sleep_ms sleeps without touching CUDA. */
void truth_sleep_ms(long ms);

#define TRUTH_U64_(x) ((uint64_t)(uintptr_t)(x))

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

/* ---- runtime: async, pools, managed, pitched ---- */

#define TRUTH_MALLOC_ASYNC_VIA_(fn, api, pp, size, stream)                              \
	__extension__({                                                                 \
		size_t truth_size_ = (size);                                            \
		void **truth_pp_ = (void **)(pp);                                       \
		cudaStream_t truth_st_ = (stream);                                      \
		cudaError_t truth_ret_ = fn(truth_pp_, truth_size_, truth_st_);         \
		truth_alloc(__func__, api, TRUTH_RUNTIME, truth_ret_,                   \
			    TRUTH_U64_(*truth_pp_), truth_size_,                        \
			    truth_stream_device(TRUTH_U64_(truth_st_)),                 \
			    TRUTH_U64_(truth_st_));                                     \
		truth_ret_;                                                             \
	})
#define TRUTH_MALLOC_ASYNC(pp, size, stream) \
	TRUTH_MALLOC_ASYNC_VIA_(cudaMallocAsync, "cudaMallocAsync", pp, size, stream)
#define TRUTH_MALLOC_ASYNC_PTSZ(pp, size, stream) \
	TRUTH_MALLOC_ASYNC_VIA_(cudaMallocAsync_ptsz, "cudaMallocAsync_ptsz", pp, size, stream)

#define TRUTH_FREE_ASYNC_VIA_(fn, api, p, stream)                                       \
	__extension__({                                                                 \
		void *truth_p_ = (void *)(p);                                           \
		cudaStream_t truth_st_ = (stream);                                      \
		cudaError_t truth_ret_ = fn(truth_p_, truth_st_);                       \
		truth_dfree(__func__, api, TRUTH_RUNTIME, truth_ret_,                   \
			    TRUTH_U64_(truth_p_), TRUTH_U64_(truth_st_));               \
		truth_ret_;                                                             \
	})
#define TRUTH_FREE_ASYNC(p, stream) TRUTH_FREE_ASYNC_VIA_(cudaFreeAsync, "cudaFreeAsync", p, stream)
#define TRUTH_FREE_ASYNC_PTSZ(p, stream) \
	TRUTH_FREE_ASYNC_VIA_(cudaFreeAsync_ptsz, "cudaFreeAsync_ptsz", p, stream)

/* The memory is on the pool's device (registered by TRUTH_DEFAULT_MEM_POOL). */
#define TRUTH_MALLOC_FROM_POOL_VIA_(fn, api, pp, size, pool, stream)                    \
	__extension__({                                                                 \
		size_t truth_size_ = (size);                                            \
		void **truth_pp_ = (void **)(pp);                                       \
		cudaMemPool_t truth_pool_ = (pool);                                     \
		cudaStream_t truth_st_ = (stream);                                      \
		cudaError_t truth_ret_ = fn(truth_pp_, truth_size_, truth_pool_,        \
					    truth_st_);                                 \
		truth_alloc(__func__, api, TRUTH_RUNTIME, truth_ret_,                   \
			    TRUTH_U64_(*truth_pp_), truth_size_,                        \
			    truth_pool_device(TRUTH_U64_(truth_pool_)),                 \
			    TRUTH_U64_(truth_st_));                                     \
		truth_ret_;                                                             \
	})
#define TRUTH_MALLOC_FROM_POOL_ASYNC(pp, size, pool, stream)                            \
	TRUTH_MALLOC_FROM_POOL_VIA_(cudaMallocFromPoolAsync, "cudaMallocFromPoolAsync", \
				    pp, size, pool, stream)
#define TRUTH_MALLOC_FROM_POOL_ASYNC_PTSZ(pp, size, pool, stream)                 \
	TRUTH_MALLOC_FROM_POOL_VIA_(cudaMallocFromPoolAsync_ptsz,                 \
				    "cudaMallocFromPoolAsync_ptsz", pp, size, pool, stream)

#define TRUTH_MALLOC_MANAGED(pp, size, flags)                                           \
	__extension__({                                                                 \
		size_t truth_size_ = (size);                                            \
		void **truth_pp_ = (void **)(pp);                                       \
		cudaError_t truth_ret_ = cudaMallocManaged(truth_pp_, truth_size_,      \
							   (flags));                    \
		truth_alloc(__func__, "cudaMallocManaged", TRUTH_RUNTIME, truth_ret_,   \
			    TRUTH_U64_(*truth_pp_), truth_size_,                        \
			    truth_current_device(), 0);                                 \
		truth_ret_;                                                             \
	})

/* Bytes: pitch * height (the request, width * height, when it failed). */
#define TRUTH_MALLOC_PITCH(pp, ppitch, width, height)                                   \
	__extension__({                                                                 \
		void **truth_pp_ = (void **)(pp);                                       \
		size_t *truth_pitch_ = (ppitch);                                        \
		size_t truth_w_ = (width), truth_h_ = (height);                         \
		cudaError_t truth_ret_ = cudaMallocPitch(truth_pp_, truth_pitch_,       \
							 truth_w_, truth_h_);           \
		truth_alloc(__func__, "cudaMallocPitch", TRUTH_RUNTIME, truth_ret_,     \
			    TRUTH_U64_(*truth_pp_),                                     \
			    (truth_ret_ == cudaSuccess ? *truth_pitch_ : truth_w_) *    \
				    truth_h_,                                           \
			    truth_current_device(), 0);                                 \
		truth_ret_;                                                             \
	})

/* Bytes: pitch * height * depth. */
#define TRUTH_MALLOC_3D(ppitched, extent)                                               \
	__extension__({                                                                 \
		struct cudaPitchedPtr *truth_pp_ = (ppitched);                          \
		struct cudaExtent truth_e_ = (extent);                                  \
		cudaError_t truth_ret_ = cudaMalloc3D(truth_pp_, truth_e_);             \
		truth_alloc(__func__, "cudaMalloc3D", TRUTH_RUNTIME, truth_ret_,        \
			    TRUTH_U64_(truth_pp_->ptr),                                 \
			    (truth_ret_ == cudaSuccess ? truth_pp_->pitch : truth_e_.width) * \
				    truth_e_.height * truth_e_.depth,                   \
			    truth_current_device(), 0);                                 \
		truth_ret_;                                                             \
	})

/* ---- runtime: pinned host memory ---- */

#define TRUTH_MALLOC_HOST(pp, size)                                                     \
	__extension__({                                                                 \
		size_t truth_size_ = (size);                                            \
		void **truth_pp_ = (void **)(pp);                                       \
		cudaError_t truth_ret_ = cudaMallocHost(truth_pp_, truth_size_);        \
		truth_host_alloc(__func__, "cudaMallocHost", TRUTH_RUNTIME, truth_ret_, \
				 TRUTH_U64_(*truth_pp_), truth_size_);                  \
		truth_ret_;                                                             \
	})
#define TRUTH_HOST_ALLOC(pp, size, flags)                                               \
	__extension__({                                                                 \
		size_t truth_size_ = (size);                                            \
		void **truth_pp_ = (void **)(pp);                                       \
		cudaError_t truth_ret_ = cudaHostAlloc(truth_pp_, truth_size_, (flags)); \
		truth_host_alloc(__func__, "cudaHostAlloc", TRUTH_RUNTIME, truth_ret_,  \
				 TRUTH_U64_(*truth_pp_), truth_size_);                  \
		truth_ret_;                                                             \
	})
#define TRUTH_FREE_HOST(p)                                                              \
	__extension__({                                                                 \
		void *truth_p_ = (void *)(p);                                           \
		cudaError_t truth_ret_ = cudaFreeHost(truth_p_);                        \
		truth_host_free(__func__, "cudaFreeHost", TRUTH_RUNTIME, truth_ret_,    \
				TRUTH_U64_(truth_p_));                                  \
		truth_ret_;                                                             \
	})

/* ---- devices, streams, pools ---- */

#define TRUTH_SET_DEVICE(dev)                                                           \
	__extension__({                                                                 \
		int truth_dev_ = (dev);                                                 \
		cudaError_t truth_ret_ = cudaSetDevice(truth_dev_);                     \
		truth_set_device(__func__, "cudaSetDevice", truth_ret_, truth_dev_);    \
		truth_ret_;                                                             \
	})
/* ctx must be a context of device dev (primary, or cuCtxCreate_v2's). */
#define TRUTH_CU_CTX_SET_CURRENT(ctx, dev)                                              \
	__extension__({                                                                 \
		CUresult truth_ret_ = cuCtxSetCurrent(ctx);                             \
		truth_set_device(__func__, "cuCtxSetCurrent", truth_ret_, (dev));       \
		(int)truth_ret_;                                                        \
	})
#define TRUTH_CU_CTX_CREATE(pctx, dev)                                                  \
	__extension__({                                                                 \
		int truth_dev_ = (dev);                                                 \
		CUcontext *truth_pc_ = (pctx);                                          \
		CUresult truth_ret_ = cuCtxCreate_v2(truth_pc_, 0, truth_dev_);         \
		truth_ctx_create(__func__, truth_ret_,                                  \
				 truth_ret_ == 0 ? TRUTH_U64_(*truth_pc_) : 0, truth_dev_);     \
		(int)truth_ret_;                                                        \
	})
/* ctx must be a context of device dev; was_current: the calling thread's
 * current one. */
#define TRUTH_CU_CTX_DESTROY(ctx, dev, was_current)                                     \
	__extension__({                                                                 \
		CUcontext truth_c_ = (ctx);                                             \
		CUresult truth_ret_ = cuCtxDestroy_v2(truth_c_);                        \
		truth_ctx_destroy(__func__, truth_ret_, TRUTH_U64_(truth_c_), (dev),    \
				  (was_current));                                       \
		(int)truth_ret_;                                                        \
	})
#define TRUTH_STREAM_CREATE(pstream)                                                    \
	__extension__({                                                                 \
		cudaStream_t *truth_ps_ = (pstream);                                    \
		cudaError_t truth_ret_ = cudaStreamCreate(truth_ps_);                   \
		if (truth_ret_ == cudaSuccess)                                          \
			truth_stream(TRUTH_U64_(*truth_ps_), truth_current_device());   \
		truth_ret_;                                                             \
	})
#define TRUTH_DEFAULT_MEM_POOL(ppool, dev)                                              \
	__extension__({                                                                 \
		cudaMemPool_t *truth_pp_ = (ppool);                                     \
		int truth_dev_ = (dev);                                                 \
		cudaError_t truth_ret_ = cudaDeviceGetDefaultMemPool(truth_pp_,         \
								     truth_dev_);       \
		if (truth_ret_ == cudaSuccess)                                          \
			truth_pool(TRUTH_U64_(*truth_pp_), truth_dev_);                 \
		truth_ret_;                                                             \
	})

/* ---- driver: virtual memory management (evaluate to the CUresult as int) ---- */

#define TRUTH_CU_MEM_ADDRESS_RESERVE(pptr, size, align, addr, flags)                    \
	__extension__({                                                                 \
		CUdeviceptr *truth_pp_ = (pptr);                                        \
		size_t truth_size_ = (size);                                            \
		CUresult truth_ret_ = cuMemAddressReserve(truth_pp_, truth_size_,       \
							  (align), (addr), (flags));    \
		truth_reserve(__func__, truth_ret_,                                     \
			      truth_ret_ == CUDA_SUCCESS ? *truth_pp_ : 0, truth_size_); \
		(int)truth_ret_;                                                        \
	})
#define TRUTH_CU_MEM_ADDRESS_FREE(ptr, size)                                            \
	__extension__({                                                                 \
		CUdeviceptr truth_p_ = (ptr);                                           \
		size_t truth_size_ = (size);                                            \
		CUresult truth_ret_ = cuMemAddressFree(truth_p_, truth_size_);          \
		truth_unreserve(__func__, truth_ret_, truth_p_, truth_size_);           \
		(int)truth_ret_;                                                        \
	})
/* The physical memory is on prop->location.id. */
#define TRUTH_CU_MEM_CREATE(phandle, size, prop, flags)                                 \
	__extension__({                                                                 \
		CUmemGenericAllocationHandle *truth_ph_ = (phandle);                    \
		size_t truth_size_ = (size);                                            \
		const CUmemAllocationProp *truth_prop_ = (prop);                        \
		CUresult truth_ret_ = cuMemCreate(truth_ph_, truth_size_, truth_prop_,  \
						  (flags));                             \
		truth_create(__func__, truth_ret_,                                      \
			     truth_ret_ == CUDA_SUCCESS ? *truth_ph_ : 0, truth_size_,  \
			     truth_prop_->location.id);                                 \
		(int)truth_ret_;                                                        \
	})
#define TRUTH_CU_MEM_RELEASE(handle)                                                    \
	__extension__({                                                                 \
		CUmemGenericAllocationHandle truth_h_ = (handle);                       \
		CUresult truth_ret_ = cuMemRelease(truth_h_);                           \
		truth_release(__func__, truth_ret_, truth_h_);                          \
		(int)truth_ret_;                                                        \
	})
#define TRUTH_CU_MEM_MAP(ptr, size, offset, handle, flags)                              \
	__extension__({                                                                 \
		CUdeviceptr truth_p_ = (ptr);                                           \
		size_t truth_size_ = (size);                                            \
		CUmemGenericAllocationHandle truth_h_ = (handle);                       \
		CUresult truth_ret_ = cuMemMap(truth_p_, truth_size_, (offset),         \
					       truth_h_, (flags));                      \
		truth_map(__func__, truth_ret_, truth_p_, truth_size_, truth_h_);       \
		(int)truth_ret_;                                                        \
	})
#define TRUTH_CU_MEM_UNMAP(ptr, size)                                                   \
	__extension__({                                                                 \
		CUdeviceptr truth_p_ = (ptr);                                           \
		size_t truth_size_ = (size);                                            \
		CUresult truth_ret_ = cuMemUnmap(truth_p_, truth_size_);                \
		truth_unmap(__func__, truth_ret_, truth_p_, truth_size_);               \
		(int)truth_ret_;                                                        \
	})

/* check_cuda exits with a message when a call that must succeed did not. */
void check_cuda(cudaError_t ret, const char *what);
/* check_cu is check_cuda for driver calls. */
void check_cu(int ret, const char *what);

#endif
