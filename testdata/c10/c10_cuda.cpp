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
 * Expandable segments (opt-in, as PyTorch's: PYTORCH_CUDA_ALLOC_CONF
 * containing "expandable_segments:True", read when a device's allocator is
 * made): instead of cudaMalloc'ing a segment, each (stream, pool) has one
 * ExpandableSegment, a reservation of the device's memory + 1/8
 * (cuMemAddressReserve) that grows at its top by pages (20 MiB for the large
 * pool, 2 MiB for the small one: cuMemCreate + cuMemMap + cuMemSetAccess
 * each) when no free block fits; the grown range extends the free block at
 * the top, or becomes one. release_cached_blocks (the retry after a failed
 * map, and empty_cache) unmaps and releases the whole pages of a free block
 * at the top of each segment (PyTorch also unmaps free pages in the middle;
 * this fake does not). The driver API comes from dlopen("libcuda.so.1"), as
 * PyTorch's c10/cuda/driver_api.cpp does.
 *
 * C++ with exceptions inside: a uretprobe on DeviceCachingAllocator::malloc
 * would kill the process when the OOM unwinds through the trampoline. Never
 * put uretprobes on this library.
 */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#include "c10_cuda.h"

#include <cuda_runtime_api.h>
#include <cuda.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

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
struct ExpandableSegment;
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
	Block *prev, *next;      // neighbours within the segment
	ExpandableSegment *exp;  // the expandable segment it lies in, or nullptr
	Block(int d, cudaStream_t s, size_t sz, BlockPool *p, char *pt)
		: device(d), stream(s), size(sz), requested(0), pool(p), ptr(pt), allocated(false),
		  prev(nullptr), next(nullptr), exp(nullptr)
	{
	}
};

/* The driver's VMM entry points, from dlopen("libcuda.so.1"). */
struct DriverAPI {
	CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
					unsigned long long);
	CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
				unsigned long long);
	CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			     unsigned long long);
	CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
	CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);

	static DriverAPI *get()
	{
		static DriverAPI api;
		static bool loaded = load(&api);
		return loaded ? &api : nullptr;
	}

private:
	static bool load(DriverAPI *api)
	{
		void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
		if (h == nullptr)
			return false;
		*(void **)&api->cuMemAddressReserve = dlsym(h, "cuMemAddressReserve");
		*(void **)&api->cuMemCreate = dlsym(h, "cuMemCreate");
		*(void **)&api->cuMemMap = dlsym(h, "cuMemMap");
		*(void **)&api->cuMemSetAccess = dlsym(h, "cuMemSetAccess");
		*(void **)&api->cuMemUnmap = dlsym(h, "cuMemUnmap");
		*(void **)&api->cuMemRelease = dlsym(h, "cuMemRelease");
		return api->cuMemAddressReserve && api->cuMemCreate && api->cuMemMap &&
		       api->cuMemSetAccess && api->cuMemUnmap && api->cuMemRelease;
	}
};

#define EXPANDABLE_FUNC(f) "c10::cuda::CUDACachingAllocator::Native::ExpandableSegment::" f

static void vmm_observe(const char *func, const char *api, CUresult ret, CUdeviceptr ptr,
			size_t size, CUmemGenericAllocationHandle handle, int device)
{
	if (observer && observer->vmm_call)
		observer->vmm_call(func, api, (int)ret, (unsigned long long)ptr, size,
				   (unsigned long long)handle, device);
}

/* ExpandableSegment: one reservation per (stream, pool), mapped from its
 * base up to base + mapped in pages of page bytes, one physical handle each. */
struct ExpandableSegment {
	int device;
	cudaStream_t stream;
	BlockPool *pool;
	size_t page;
	CUdeviceptr base = 0;
	size_t reserved = 0, mapped = 0;
	std::vector<CUmemGenericAllocationHandle> handles;
	Block *first = nullptr; // the segment's first block; nullptr while unmapped

	ExpandableSegment(int d, cudaStream_t s, BlockPool *p, size_t pg)
		: device(d), stream(s), pool(p), page(pg)
	{
	}

	/* reserve takes the address range: size bytes, a page multiple. */
	NOINLINE bool reserve(size_t size)
	{
		DriverAPI *api = DriverAPI::get();
		if (api == nullptr)
			return false;
		CUdeviceptr p = 0;
		CUresult r = api->cuMemAddressReserve(&p, size, 0, 0, 0);
		vmm_observe(EXPANDABLE_FUNC("reserve"), "cuMemAddressReserve", r, p, size, 0, -1);
		if (r != CUDA_SUCCESS)
			return false;
		base = p;
		reserved = size;
		return true;
	}

	/* map backs bytes (a page multiple) more at the top, a page at a
	 * time; all or nothing: on a failure what it mapped is undone. */
	NOINLINE bool map(size_t bytes)
	{
		DriverAPI *api = DriverAPI::get();
		size_t done = 0;

		if (api == nullptr || mapped + bytes > reserved)
			return false;
		CUmemAllocationProp prop = {};
		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		prop.location.id = device;
		CUmemAccessDesc access = {};
		access.location = prop.location;
		access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		for (; done < bytes; done += page) {
			CUmemGenericAllocationHandle h = 0;
			CUresult r = api->cuMemCreate(&h, page, &prop, 0);
			vmm_observe(EXPANDABLE_FUNC("map"), "cuMemCreate", r, 0, page,
				    r == CUDA_SUCCESS ? h : 0, device);
			if (r != CUDA_SUCCESS)
				break;
			CUdeviceptr at = base + mapped + done;
			r = api->cuMemMap(at, page, 0, h, 0);
			vmm_observe(EXPANDABLE_FUNC("map"), "cuMemMap", r, at, page, h, device);
			if (r != CUDA_SUCCESS) {
				r = api->cuMemRelease(h);
				vmm_observe(EXPANDABLE_FUNC("map"), "cuMemRelease", r, 0, 0, h,
					    device);
				break;
			}
			(void)api->cuMemSetAccess(at, page, &access, 1);
			handles.push_back(h);
		}
		if (done < bytes) {
			unmap_pages(done / page, EXPANDABLE_FUNC("map"));
			return false;
		}
		mapped += bytes;
		return true;
	}

	/* unmap gives back bytes (a page multiple) from the top. */
	NOINLINE void unmap(size_t bytes)
	{
		unmap_pages(bytes / page, EXPANDABLE_FUNC("unmap"));
		mapped -= bytes;
	}

private:
	/* unmap_pages unmaps and releases the top n handles (mapped from base
	 * + mapped upward, the last pushed on top). */
	void unmap_pages(size_t n, const char *func)
	{
		DriverAPI *api = DriverAPI::get();
		for (size_t i = 0; i < n; i++) {
			CUmemGenericAllocationHandle h = handles.back();
			CUdeviceptr at = base + page * (handles.size() - 1);
			CUresult r = api->cuMemUnmap(at, page);
			vmm_observe(func, "cuMemUnmap", r, at, page, h, device);
			r = api->cuMemRelease(h);
			vmm_observe(func, "cuMemRelease", r, 0, 0, h, device);
			handles.pop_back();
		}
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

/* expandable_config: PYTORCH_CUDA_ALLOC_CONF asks for expandable segments. */
static bool expandable_config()
{
	const char *conf = getenv("PYTORCH_CUDA_ALLOC_CONF");
	return conf != nullptr && strstr(conf, "expandable_segments:True") != nullptr;
}

class DeviceCachingAllocator {
public:
	explicit DeviceCachingAllocator(int device) : device_(device), expandable_(expandable_config())
	{
	}

	Block *malloc(int device, size_t orig_size, cudaStream_t stream);
	void free(Block *block);
	void emptyCache();
	void stats(struct c10_memory_stats *st);

private:
	Block *get_free_block(BlockPool &pool, size_t size, cudaStream_t stream);
	Block *alloc_block(BlockPool &pool, size_t alloc_size, cudaStream_t stream, bool retry);
	Block *grow_expandable(BlockPool &pool, size_t size, cudaStream_t stream, size_t *grown);
	void release_expandable(ExpandableSegment *seg);
	void release_block(Block *block);
	bool release_cached_blocks(size_t *bytes, size_t *segments);
	void fill_state(c10_pool_state *st);

	int device_;
	bool expandable_;
	std::vector<ExpandableSegment *> expandable_segments_;
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

/* grow_expandable maps enough pages at the top of the (stream, pool)
 * expandable segment for a block of size: the free block at the top grows,
 * or a new one is made there. Returns it, out of its pool, or nullptr when
 * the driver refused (*grown: the bytes it tried to map). */
NOINLINE Block *DeviceCachingAllocator::grow_expandable(BlockPool &pool, size_t size,
							 cudaStream_t stream, size_t *grown)
{
	size_t page = &pool == &small_blocks_ ? kSmallBuffer : kLargeBuffer;
	ExpandableSegment *seg = nullptr;

	for (ExpandableSegment *e : expandable_segments_)
		if (e->stream == stream && e->pool == &pool)
			seg = e;
	if (seg == nullptr) {
		size_t free_b = 0, total_b = 0;
		if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
			return nullptr;
		size_t want = total_b + total_b / 8;
		seg = new ExpandableSegment(device_, stream, &pool, page);
		if (!seg->reserve(page * ((want + page - 1) / page))) {
			delete seg;
			return nullptr;
		}
		expandable_segments_.push_back(seg);
	}
	Block *tail = seg->first;
	while (tail != nullptr && tail->next != nullptr)
		tail = tail->next;
	size_t have = tail != nullptr && !tail->allocated ? tail->size : 0;
	size_t need = page * ((size - have + page - 1) / page);
	*grown = need;
	char *top = (char *)(uintptr_t)(seg->base + seg->mapped);
	if (!seg->map(need))
		return nullptr;
	if (have > 0) {
		pool.erase(tail);
		tail->size += need;
		return tail;
	}
	Block *b = new Block(device_, stream, need, &pool, top);
	b->exp = seg;
	if (tail != nullptr) {
		tail->next = b;
		b->prev = tail;
	} else {
		seg->first = b;
		segments_.insert(b);
	}
	return b;
}

/* release_expandable unmaps the whole pages of the free block at the top
 * of seg (the block shrinks, or goes when nothing of it is left). */
NOINLINE void DeviceCachingAllocator::release_expandable(ExpandableSegment *seg)
{
	Block *tail = seg->first;
	while (tail != nullptr && tail->next != nullptr)
		tail = tail->next;
	if (tail == nullptr || tail->allocated)
		return;
	size_t off = (size_t)((uintptr_t)tail->ptr - seg->base);
	size_t keep = seg->page * ((off + seg->page - 1) / seg->page);
	size_t bytes = seg->mapped - keep;
	if (bytes == 0)
		return;
	tail->pool->erase(tail);
	seg->unmap(bytes);
	tail->size -= bytes;
	if (tail->size > 0) {
		tail->pool->insert(tail);
		return;
	}
	if (tail->prev != nullptr) {
		tail->prev->next = nullptr;
	} else {
		segments_.erase(tail);
		seg->first = nullptr;
	}
	delete tail;
}

NOINLINE bool DeviceCachingAllocator::release_cached_blocks(size_t *bytes, size_t *segments)
{
	size_t nbytes = 0, nsegs = 0;

	for (ExpandableSegment *seg : expandable_segments_) {
		size_t before = seg->mapped;
		release_expandable(seg);
		nbytes += before - seg->mapped;
	}
	for (BlockPool *pool : {&large_blocks_, &small_blocks_}) {
		for (auto it = pool->begin(); it != pool->end();) {
			Block *b = *it++;
			if (b->exp == nullptr && b->prev == nullptr && b->next == nullptr) {
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
		size_t grown = 0;
		block = expandable_ ? grow_expandable(pool, size, stream, &grown)
				    : alloc_block(pool, alloc_size, stream, false);
		if (block == nullptr) {
			c10_pool_state st = {};
			st.requested = orig_size;
			st.rounded = size;
			st.segment_size = expandable_ ? grown : alloc_size;
			fill_state(&st);
			counters_.alloc_retries++;
			release_cached_blocks(&st.released_bytes, &st.released_segments);
			block = expandable_ ? grow_expandable(pool, size, stream, &grown)
					    : alloc_block(pool, alloc_size, stream, true);
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
		rest->exp = block->exp;
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
