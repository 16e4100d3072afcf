/*
 * c10_cuda.cpp: a fake libc10_cuda.so. A caching allocator with the rules of
 * PyTorch's CUDACachingAllocator (DeviceCachingAllocator, 2.1+, default
 * configuration: no max_split_size, no expandable segments, no graphs) over
 * the fake runtime, and PyTorch's USDT probes:
 *
 *   pytorch:malloc(ptr, device, size, stream)   after a block was handed out
 *   pytorch:free(ptr)                           before a block goes back
 *
 * each guarded by a semaphore in .probes (pytorch_malloc_semaphore,
 * pytorch_free_semaphore): a probe fires only while a tracer holds the
 * semaphore raised (a uprobe attached with the reference-counter offset).
 *
 * Rules (c10/cuda/CUDACachingAllocator.cpp):
 * - sizes round up to 512 bytes (kMinBlockSize);
 * - size <= 1 MiB (kSmallSize): small pool, segments of 2 MiB (kSmallBuffer);
 *   1 MiB < size < 10 MiB (kMinLargeAlloc): large pool, segments of 20 MiB
 *   (kLargeBuffer); size >= 10 MiB: large pool, a segment of size rounded up
 *   to 2 MiB (kRoundLarge);
 * - a request takes the best fit (smallest size, then lowest address) among
 *   the free blocks of its pool on its stream, split when the remainder is
 *   >= 512 (small pool) or > 1 MiB (large pool); otherwise a new segment;
 * - a freed block merges with free neighbours of its segment and goes back
 *   to its pool;
 * - a failed cudaMalloc: release_cached_blocks (cudaFree of every segment
 *   that is one free block, both pools) and one retry; a second failure
 *   throws OutOfMemoryError, which the C API turns into NULL;
 * - empty_cache is release_cached_blocks.
 *
 * C++ with exceptions inside: a uretprobe on DeviceCachingAllocator::malloc
 * would kill the process when the OOM unwinds through the trampoline. Never
 * put uretprobes on this library.
 */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#include "c10_cuda.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>

/* The semaphores: the tracer increments them (uprobe reference counter). */
extern "C" {
__extension__ volatile unsigned short pytorch_malloc_semaphore
	__attribute__((unused)) __attribute__((section(".probes"))) = 0;
__extension__ volatile unsigned short pytorch_free_semaphore
	__attribute__((unused)) __attribute__((section(".probes"))) = 0;
}

#define PYTORCH_MALLOC_ENABLED() __builtin_expect(pytorch_malloc_semaphore != 0, 0)
#define PYTORCH_FREE_ENABLED() __builtin_expect(pytorch_free_semaphore != 0, 0)

#define NOINLINE __attribute__((noinline))
#define MAX_DEVICES 64

namespace {
const c10_observer *observer;
std::mutex last_oom_mu;
bool have_last_oom;
c10_pool_state last_oom;
} // namespace

namespace c10 {
namespace cuda {
namespace CUDACachingAllocator {

constexpr size_t kMinBlockSize = 512;
constexpr size_t kSmallSize = 1048576;
constexpr size_t kSmallBuffer = 2097152;
constexpr size_t kLargeBuffer = 20971520;
constexpr size_t kMinLargeAlloc = 10485760;
constexpr size_t kRoundLarge = 2097152;

class OutOfMemoryError : public std::runtime_error {
public:
	explicit OutOfMemoryError(const std::string &msg) : std::runtime_error(msg) {}
};

namespace Native {

struct Block;
struct BlockComparator {
	bool operator()(const Block *a, const Block *b) const;
};
typedef std::set<Block *, BlockComparator> BlockPool;

struct Block {
	int device;
	cudaStream_t stream;
	size_t size;      // the block's size (rounded; may hold an unsplit remainder)
	size_t requested; // what c10_alloc was asked for, while allocated
	BlockPool *pool;
	char *ptr;
	bool allocated;
	Block *prev, *next; // neighbours within the segment
	Block(int d, cudaStream_t s, size_t sz, BlockPool *p, char *pt)
		: device(d), stream(s), size(sz), requested(0), pool(p), ptr(pt), allocated(false),
		  prev(nullptr), next(nullptr)
	{
	}
};

bool BlockComparator::operator()(const Block *a, const Block *b) const
{
	if (a->stream != b->stream)
		return (uintptr_t)a->stream < (uintptr_t)b->stream;
	if (a->size != b->size)
		return a->size < b->size;
	return (uintptr_t)a->ptr < (uintptr_t)b->ptr;
}

static size_t round_size(size_t size)
{
	if (size < kMinBlockSize)
		return kMinBlockSize;
	return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

static size_t get_allocation_size(size_t size)
{
	if (size <= kSmallSize)
		return kSmallBuffer;
	if (size < kMinLargeAlloc)
		return kLargeBuffer;
	return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

class DeviceCachingAllocator {
public:
	explicit DeviceCachingAllocator(int device) : device_(device) {}

	Block *malloc(int device, size_t orig_size, cudaStream_t stream);
	void free(Block *block);
	void emptyCache();
	void stats(struct c10_memory_stats *st);

private:
	Block *get_free_block(BlockPool &pool, size_t size, cudaStream_t stream);
	Block *alloc_block(BlockPool &pool, size_t alloc_size, cudaStream_t stream, bool retry);
	void release_block(Block *block);
	bool release_cached_blocks(size_t *bytes, size_t *segments);
	void fill_state(c10_pool_state *st);

	int device_;
	std::recursive_mutex mutex_;
	BlockPool large_blocks_, small_blocks_;
	std::set<Block *> segments_; // the first block of every segment
	struct c10_memory_stats counters_ = {};
};

Block *DeviceCachingAllocator::get_free_block(BlockPool &pool, size_t size,
					      cudaStream_t stream)
{
	Block key(device_, stream, size, &pool, nullptr);
	auto it = pool.lower_bound(&key);
	if (it == pool.end() || (*it)->stream != stream)
		return nullptr;
	Block *b = *it;
	pool.erase(it);
	return b;
}

/* alloc_block makes the segment (cudaMalloc): its one block, or NULL. */
NOINLINE Block *DeviceCachingAllocator::alloc_block(BlockPool &pool, size_t alloc_size,
						     cudaStream_t stream, bool retry)
{
	void *ptr = nullptr;
	cudaError_t err = cudaMalloc(&ptr, alloc_size);

	counters_.cuda_malloc_calls++;
	if (observer && observer->segment_alloc)
		observer->segment_alloc("c10::cuda::CUDACachingAllocator::Native::"
					"DeviceCachingAllocator::alloc_block",
					(int)err, err == cudaSuccess ? ptr : nullptr, alloc_size,
					device_, retry);
	if (err != cudaSuccess) {
		counters_.cuda_malloc_failures++;
		(void)cudaGetLastError(); // clear the error, as PyTorch does
		return nullptr;
	}
	Block *b = new Block(device_, stream, alloc_size, &pool, (char *)ptr);
	segments_.insert(b);
	return b;
}

/* release_block frees one whole-segment free block (cudaFree). */
NOINLINE void DeviceCachingAllocator::release_block(Block *block)
{
	cudaError_t err = cudaFree(block->ptr);

	counters_.cuda_free_calls++;
	if (observer && observer->segment_free)
		observer->segment_free("c10::cuda::CUDACachingAllocator::Native::"
				       "DeviceCachingAllocator::release_block",
				       (int)err, block->ptr, device_);
	if (err != cudaSuccess)
		throw std::runtime_error("cudaFree failed");
	block->pool->erase(block);
	segments_.erase(block);
	delete block;
}

NOINLINE bool DeviceCachingAllocator::release_cached_blocks(size_t *bytes, size_t *segments)
{
	size_t nbytes = 0, nsegs = 0;

	for (BlockPool *pool : {&large_blocks_, &small_blocks_}) {
		for (auto it = pool->begin(); it != pool->end();) {
			Block *b = *it++;
			if (b->prev == nullptr && b->next == nullptr) {
				nbytes += b->size;
				nsegs++;
				release_block(b);
			}
		}
	}
	if (bytes)
		*bytes = nbytes;
	if (segments)
		*segments = nsegs;
	return true;
}

void DeviceCachingAllocator::stats(struct c10_memory_stats *st)
{
	std::lock_guard<std::recursive_mutex> lock(mutex_);
	*st = counters_;
	st->reserved_bytes = st->allocated_bytes = st->requested_bytes = 0;
	st->cached_free_bytes = st->largest_free_range = 0;
	st->segments = st->active_blocks = st->free_blocks = 0;
	for (Block *seg : segments_) {
		st->segments++;
		for (Block *b = seg; b != nullptr; b = b->next) {
			st->reserved_bytes += b->size;
			if (b->allocated) {
				st->active_blocks++;
				st->allocated_bytes += b->size;
				st->requested_bytes += b->requested;
			} else {
				st->free_blocks++;
				st->cached_free_bytes += b->size;
				if (b->size > st->largest_free_range)
					st->largest_free_range = b->size;
			}
		}
	}
}

void DeviceCachingAllocator::fill_state(c10_pool_state *st)
{
	struct c10_memory_stats ms;
	size_t free_b = 0, total_b = 0;

	stats(&ms);
	st->device = device_;
	st->reserved_bytes = ms.reserved_bytes;
	st->allocated_bytes = ms.allocated_bytes;
	st->requested_bytes = ms.requested_bytes;
	st->cached_free_bytes = ms.cached_free_bytes;
	st->largest_free_range = ms.largest_free_range;
	st->segments = ms.segments;
	// PyTorch asks the device for its OOM message.
	if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
		st->device_free_bytes = free_b;
		st->device_total_bytes = total_b;
	}
}

NOINLINE Block *DeviceCachingAllocator::malloc(int device, size_t orig_size,
						cudaStream_t stream)
{
	std::lock_guard<std::recursive_mutex> lock(mutex_);
	size_t size = round_size(orig_size);
	BlockPool &pool = size <= kSmallSize ? small_blocks_ : large_blocks_;
	size_t alloc_size = get_allocation_size(size);
	(void)device;

	Block *block = get_free_block(pool, size, stream);
	if (block == nullptr) {
		block = alloc_block(pool, alloc_size, stream, false);
		if (block == nullptr) {
			c10_pool_state st = {};
			st.requested = orig_size;
			st.rounded = size;
			st.segment_size = alloc_size;
			fill_state(&st);
			counters_.alloc_retries++;
			release_cached_blocks(&st.released_bytes, &st.released_segments);
			block = alloc_block(pool, alloc_size, stream, true);
			st.retry_succeeded = block != nullptr;
			if (observer && observer->alloc_retry)
				observer->alloc_retry(&st);
			if (block == nullptr) {
				counters_.ooms++;
				{
					std::lock_guard<std::mutex> l(last_oom_mu);
					last_oom = st;
					have_last_oom = true;
				}
				char msg[256];
				snprintf(msg, sizeof(msg),
					 "CUDA out of memory. Tried to allocate %zu bytes. "
					 "%zu bytes reserved, %zu allocated, %zu free in cache",
					 orig_size, st.reserved_bytes, st.allocated_bytes,
					 st.cached_free_bytes);
				throw OutOfMemoryError(msg);
			}
		}
	}

	// Split off the remainder when it is worth a block of its own.
	size_t remaining = block->size - size;
	bool split = &pool == &small_blocks_ ? remaining >= kMinBlockSize : remaining > kSmallSize;
	if (split) {
		Block *rest = new Block(device_, stream, remaining, &pool, block->ptr + size);
		rest->prev = block;
		rest->next = block->next;
		if (rest->next)
			rest->next->prev = rest;
		block->next = rest;
		block->size = size;
		pool.insert(rest);
	}
	block->allocated = true;
	block->requested = orig_size;
	return block;
}

NOINLINE void DeviceCachingAllocator::free(Block *block)
{
	std::lock_guard<std::recursive_mutex> lock(mutex_);
	BlockPool &pool = *block->pool;

	block->allocated = false;
	block->requested = 0;
	if (block->prev && !block->prev->allocated) {
		Block *p = block->prev;
		pool.erase(p);
		p->size += block->size;
		p->next = block->next;
		if (p->next)
			p->next->prev = p;
		delete block;
		block = p;
	}
	if (block->next && !block->next->allocated) {
		Block *n = block->next;
		pool.erase(n);
		block->size += n->size;
		block->next = n->next;
		if (block->next)
			block->next->prev = block;
		delete n;
	}
	pool.insert(block);
}

NOINLINE void DeviceCachingAllocator::emptyCache()
{
	std::lock_guard<std::recursive_mutex> lock(mutex_);
	release_cached_blocks(nullptr, nullptr);
}

/* NativeCachingAllocator: the per-process front, where PyTorch's USDT
 * probes are. */
class NativeCachingAllocator {
public:
	void *allocate(size_t size, int device, cudaStream_t stream);
	bool free(void *ptr);
	void emptyCache();
	DeviceCachingAllocator *device_allocator(int device);

private:
	std::mutex mutex_;
	DeviceCachingAllocator *devices_[MAX_DEVICES] = {};
	std::unordered_map<void *, Block *> allocated_blocks_;
};

DeviceCachingAllocator *NativeCachingAllocator::device_allocator(int device)
{
	std::lock_guard<std::mutex> lock(mutex_);
	if (device < 0 || device >= MAX_DEVICES)
		return nullptr;
	if (devices_[device] == nullptr)
		devices_[device] = new DeviceCachingAllocator(device);
	return devices_[device];
}

NOINLINE void *NativeCachingAllocator::allocate(size_t size, int device, cudaStream_t stream)
{
	DeviceCachingAllocator *da = device_allocator(device);
	if (da == nullptr)
		throw std::invalid_argument("invalid device");
	Block *block = da->malloc(device, size, stream);
	{
		std::lock_guard<std::mutex> lock(mutex_);
		allocated_blocks_[block->ptr] = block;
	}
	void *ptr = block->ptr;
	if (PYTORCH_MALLOC_ENABLED()) {
		int64_t stream_id = (int64_t)(intptr_t)stream;
		STAP_PROBE4(pytorch, malloc, ptr, device, size, stream_id);
	}
	return ptr;
}

NOINLINE bool NativeCachingAllocator::free(void *ptr)
{
	Block *block;
	{
		std::lock_guard<std::mutex> lock(mutex_);
		auto it = allocated_blocks_.find(ptr);
		if (it == allocated_blocks_.end())
			return false;
		block = it->second;
		allocated_blocks_.erase(it);
	}
	if (PYTORCH_FREE_ENABLED())
		STAP_PROBE1(pytorch, free, ptr);
	devices_[block->device]->free(block);
	return true;
}

void NativeCachingAllocator::emptyCache()
{
	for (int d = 0; d < MAX_DEVICES; d++) {
		DeviceCachingAllocator *da;
		{
			std::lock_guard<std::mutex> lock(mutex_);
			da = devices_[d];
		}
		if (da)
			da->emptyCache();
	}
}

NativeCachingAllocator allocator;

} // namespace Native
} // namespace CUDACachingAllocator
} // namespace cuda
} // namespace c10

using c10::cuda::CUDACachingAllocator::Native::allocator;

/* ---- the C API: no exception crosses it ---- */

extern "C" {

__attribute__((visibility("default"))) NOINLINE void *c10_alloc(size_t size, int device,
								  void *stream)
{
	if (size == 0)
		return nullptr;
	try {
		return allocator.allocate(size, device, (cudaStream_t)stream);
	} catch (const c10::cuda::CUDACachingAllocator::OutOfMemoryError &e) {
		return nullptr;
	} catch (...) {
		return nullptr;
	}
}

__attribute__((visibility("default"))) NOINLINE int c10_free(void *ptr)
{
	if (ptr == nullptr)
		return -1;
	try {
		return allocator.free(ptr) ? 0 : -1;
	} catch (...) {
		return -1;
	}
}

__attribute__((visibility("default"))) NOINLINE void c10_empty_cache(void)
{
	try {
		allocator.emptyCache();
	} catch (...) {
	}
}

__attribute__((visibility("default"))) int c10_memory_stats(int device, struct c10_memory_stats *st)
{
	try {
		auto *da = allocator.device_allocator(device);
		if (da == nullptr || st == nullptr)
			return -1;
		da->stats(st);
		return 0;
	} catch (...) {
		return -1;
	}
}

__attribute__((visibility("default"))) int c10_last_oom(c10_pool_state *st)
{
	std::lock_guard<std::mutex> l(last_oom_mu);
	if (!have_last_oom || st == nullptr)
		return -1;
	*st = last_oom;
	return 0;
}

__attribute__((visibility("default"))) void c10_set_observer(const c10_observer *obs)
{
	observer = obs;
}

} // extern "C"
