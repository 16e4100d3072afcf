/*
 * c10_cuda.h: the C API of the fake libc10_cuda.so (c10_cuda.cpp), a caching
 * allocator with PyTorch's rules over the fake runtime, carrying PyTorch's
 * USDT probes pytorch:malloc(ptr, device, size, stream) and pytorch:free(ptr)
 * guarded by semaphores. See ../README.md ("The caching allocator").
 *
 * The library is C++ and throws C++ exceptions inside (OutOfMemoryError from
 * DeviceCachingAllocator::malloc, as PyTorch does), but never across this
 * API: every entry point catches them.
 */
#ifndef C10_CUDA_H
#define C10_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* c10_alloc returns a block of at least size bytes on device (which must be
 * the calling thread's current device: the allocator never switches) for
 * stream (blocks are reused on the stream they were allocated on only), or
 * NULL when size is 0, the device is out of range, or the allocation failed
 * even after freeing the cache and retrying (the caller raises OOM). */
void *c10_alloc(size_t size, int device, void *stream);
/* c10_free returns the block to the cache: 0, or -1 for NULL or a pointer
 * that c10_alloc did not return (nothing happens then). */
int c10_free(void *ptr);
/* c10_empty_cache releases (cudaFree) every fully free segment of every
 * device, as torch.cuda.empty_cache(); with expandable segments it unmaps
 * and releases every page that lies wholly in a free block. */
void c10_empty_cache(void);

/* The allocator's state on one device. Block sizes are the allocator's
 * (rounded, including unsplit remainders); requested_bytes is the sum of the
 * sizes asked for by the live blocks. */
struct c10_memory_stats {
	size_t reserved_bytes;      /* sum of live segments (cudaMalloc'd, or mapped pages) */
	size_t allocated_bytes;     /* sum of allocated blocks */
	size_t requested_bytes;     /* sum of the requests of allocated blocks */
	size_t cached_free_bytes;   /* sum of free blocks: reserved - allocated */
	size_t largest_free_range;  /* the largest free block */
	size_t segments, active_blocks, free_blocks; /* expandable: mapped runs */
	size_t cuda_malloc_calls, cuda_malloc_failures, cuda_free_calls;
	size_t alloc_retries, ooms;
};
/* c10_memory_stats fills *st for device: 0, or -1 for a bad device. */
int c10_memory_stats(int device, struct c10_memory_stats *st);

/* c10_pool_state: the allocator's state at a failed cudaMalloc, taken
 * before the free-all-and-retry (reserved_bytes ... segments), plus what the
 * retry did. */
struct c10_pool_state {
	int device;
	size_t requested;          /* the size c10_alloc was asked for */
	size_t rounded;            /* rounded up to 512 */
	size_t segment_size;       /* the cudaMalloc (or expandable: cuMemCreate) that failed */
	size_t reserved_bytes, allocated_bytes, requested_bytes, cached_free_bytes;
	size_t largest_free_range, segments;
	size_t device_free_bytes, device_total_bytes; /* cudaMemGetInfo, before */
	size_t released_bytes, released_segments;     /* freed by the release */
	int retry_succeeded;
	int expandable; /* the allocator maps pages (expandable segments) */
};
/* c10_last_oom fills *st with the state of the last c10_alloc that failed
 * (on any thread): 0, or -1 if none has. */
int c10_last_oom(struct c10_pool_state *st);

/* Observers (for ground-truth logs), called under the allocator's lock just
 * after the event: segment_alloc after every cudaMalloc (retry: it is the
 * one after free-all), segment_free after every cudaFree, alloc_retry after
 * each free-all-and-retry. func names the C++ function that made the CUDA
 * call, as a profiler demangles it without parameters. */
struct c10_observer {
	void (*segment_alloc)(const char *func, int ret, void *ptr, size_t size, int device,
			      int retry);
	void (*segment_free)(const char *func, int ret, void *ptr, int device);
	void (*alloc_retry)(const struct c10_pool_state *st);
	/* Expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True):
	 * every driver VMM call the allocator made, after it returned. ptr is
	 * an address, handle a physical allocation handle. */
	void (*vmm_reserve)(const char *func, int ret, unsigned long long ptr, size_t size);
	void (*vmm_unreserve)(const char *func, int ret, unsigned long long ptr, size_t size);
	void (*vmm_create)(const char *func, int ret, unsigned long long handle, size_t size,
			   int device);
	void (*vmm_release)(const char *func, int ret, unsigned long long handle);
	void (*vmm_map)(const char *func, int ret, unsigned long long ptr, size_t size,
			unsigned long long handle);
	void (*vmm_unmap)(const char *func, int ret, unsigned long long ptr, size_t size);
};
void c10_set_observer(const struct c10_observer *obs);

#ifdef __cplusplus
}
#endif

#endif
