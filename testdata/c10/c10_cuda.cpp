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
 * With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (parsed as
 * CUDAAllocatorConfig does: comma-separated key:value pairs, True or False)
 * there is no cudaMalloc: each pool has per stream an ExpandableSegment, an
 * address range reserved once (cuMemAddressReserve, 1 1/8 of the device's
 * memory) that grows by pages (cuMemCreate on the device, cuMemMap,
 * cuMemSetAccess) of 2 MiB in the small pool and 20 MiB in the large
 * (kSmallBuffer, kLargeBuffer), through the driver entry points dlopened
 * from libcuda.so.1 as c10/cuda/driver_api.cpp does:
 * - blocks tile the range, mapped (free or allocated) or not; a request no
 *   free mapped block fits takes the lowest unmapped block of its pool and
 *   stream (with the free block before it) and maps the pages it lacks
 *   (try_allocate_expandable_block, find_expandable_block, map_block);
 *   a cuMemCreate that fails releases the pages created for that request;
 * - best fit prefers, among blocks of one size, the one that cannot grow
 *   into unmapped space; a block is split whenever the rest is >= 512;
 * - release_cached_blocks (and empty_cache) unmaps and releases every page
 *   that lies wholly in a free block (unmap_block), and frees the range
 *   once it is all unmapped;
 * - reserved memory is mapped memory; a segment (c10_memory_stats) is a
 *   run of mapped pages.
 *
 * C++ with exceptions inside: a uretprobe on DeviceCachingAllocator::malloc
 * would kill the process when the OOM unwinds through the trampoline. Never
 * put uretprobes on this library.
 */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#include "c10_cuda.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>
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

/* expandable_segments is PYTORCH_CUDA_ALLOC_CONF's expandable_segments
 * (CUDAAllocatorConfig::parseArgs): read once; a value other than True or
 * False is an error, reported on stderr, and leaves the default (off). */
static bool expandable_segments()
{
	static const bool on = [] {
		const char *env = getenv("PYTORCH_CUDA_ALLOC_CONF");
		bool v = false;
		if (env == nullptr)
			return false;
		std::string conf(env);
		size_t pos = 0;
		while (pos <= conf.size()) {
			size_t comma = conf.find(',', pos);
			std::string kv = conf.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
			size_t colon = kv.find(':');
			if (colon != std::string::npos && kv.substr(0, colon) == "expandable_segments") {
				std::string val = kv.substr(colon + 1);
				if (val == "True")
					v = true;
				else if (val == "False")
					v = false;
				else
					fprintf(stderr, "libc10_cuda: PYTORCH_CUDA_ALLOC_CONF: expected a single True/False argument for expandable_segments, got %s\n", val.c_str());
			}
			if (comma == std::string::npos)
				break;
			pos = comma + 1;
		}
		return v;
	}();
	return on;
}

/* DriverAPI: the driver's VMM entry points, dlopened from libcuda.so.1 (found
 * through this library's RUNPATH, or the one the runtime loaded). */
struct DriverAPI {
	CUresult (*cuMemAddressReserve_)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*cuMemAddressFree_)(CUdeviceptr, size_t);
	CUresult (*cuMemCreate_)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
				 unsigned long long);
	CUresult (*cuMemRelease_)(CUmemGenericAllocationHandle);
	CUresult (*cuMemMap_)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*cuMemUnmap_)(CUdeviceptr, size_t);
	CUresult (*cuMemSetAccess_)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);

	static DriverAPI *get()
	{
		static DriverAPI *api = [] {
			void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_GLOBAL);
			if (h == nullptr)
				throw std::runtime_error("expandable segments: cannot dlopen libcuda.so.1");
			DriverAPI *d = new DriverAPI;
#define C10_DRIVER_SYM(name) *(void **)&d->name##_ = dlsym(h, #name)
			C10_DRIVER_SYM(cuMemAddressReserve);
			C10_DRIVER_SYM(cuMemAddressFree);
			C10_DRIVER_SYM(cuMemCreate);
			C10_DRIVER_SYM(cuMemRelease);
			C10_DRIVER_SYM(cuMemMap);
			C10_DRIVER_SYM(cuMemUnmap);
			C10_DRIVER_SYM(cuMemSetAccess);
#undef C10_DRIVER_SYM
			if (!d->cuMemAddressReserve_ || !d->cuMemAddressFree_ || !d->cuMemCreate_ ||
			    !d->cuMemRelease_ || !d->cuMemMap_ || !d->cuMemUnmap_ || !d->cuMemSetAccess_)
				throw std::runtime_error("expandable segments: libcuda.so.1 lacks the VMM API");
			return d;
		}();
		return api;
	}
};

class OutOfMemoryError : public std::runtime_error {
public:
	explicit OutOfMemoryError(const std::string &msg) : std::runtime_error(msg) {}
};

namespace Native {

#define C10_NATIVE "c10::cuda::CUDACachingAllocator::Native::"

/* ExpandableSegment: one reserved range that grows and shrinks by pages
 * (PyTorch's, without peers). Handles are per page; 0 = unmapped. */
struct ExpandableSegment {
	ExpandableSegment(int device, cudaStream_t stream, size_t page, size_t address_space);
	~ExpandableSegment();
	/* map maps the pages that cover [off, off+size) (off page-aligned):
	 * the bytes mapped, or 0 when a cuMemCreate failed (failed_size is then
	 * the pages created for the call and the one that failed, which are
	 * released). */
	size_t map(size_t off, size_t size);
	/* unmapHandles unmaps and releases pages [begin, end). */
	void unmapHandles(size_t begin, size_t end);

	int device;
	cudaStream_t stream;
	char *ptr;
	size_t page, max_pages;
	std::vector<CUmemGenericAllocationHandle> handles;
	size_t failed_size = 0;

	size_t size() const { return page * max_pages; }
};

NOINLINE ExpandableSegment::ExpandableSegment(int d, cudaStream_t s, size_t pg, size_t address_space)
	: device(d), stream(s), ptr(nullptr), page(pg), max_pages((address_space + pg - 1) / pg),
	  handles(max_pages, 0)
{
	CUdeviceptr p = 0;
	CUresult r = DriverAPI::get()->cuMemAddressReserve_(&p, page * max_pages, 0, 0, 0);
	if (observer && observer->vmm_reserve)
		observer->vmm_reserve(C10_NATIVE "ExpandableSegment::ExpandableSegment", (int)r,
				      r == CUDA_SUCCESS ? p : 0, page * max_pages);
	if (r != CUDA_SUCCESS)
		throw std::runtime_error("cuMemAddressReserve failed");
	ptr = (char *)p;
}

NOINLINE ExpandableSegment::~ExpandableSegment()
{
	CUresult r = DriverAPI::get()->cuMemAddressFree_((CUdeviceptr)ptr, size());
	if (observer && observer->vmm_unreserve)
		observer->vmm_unreserve(C10_NATIVE "ExpandableSegment::~ExpandableSegment", (int)r,
					(CUdeviceptr)ptr, size());
}

NOINLINE size_t ExpandableSegment::map(size_t off, size_t sz)
{
	DriverAPI *api = DriverAPI::get();
	size_t begin = off / page, end = (off + sz + page - 1) / page;
	CUmemAllocationProp prop;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = device;
	for (size_t i = begin; i < end; i++) {
		CUmemGenericAllocationHandle h = 0;
		CUresult r = api->cuMemCreate_(&h, page, &prop, 0);
		if (observer && observer->vmm_create)
			observer->vmm_create(C10_NATIVE "ExpandableSegment::map", (int)r,
					     r == CUDA_SUCCESS ? h : 0, page, device);
		if (r != CUDA_SUCCESS) {
			// What this call asked the driver for: the pages created
			// for it and the one that failed.
			failed_size = (i - begin + 1) * page;
			for (size_t j = begin; j < i; j++) {
				CUresult rr = api->cuMemRelease_(handles[j]);
				if (observer && observer->vmm_release)
					observer->vmm_release(C10_NATIVE "ExpandableSegment::map", (int)rr,
							      handles[j]);
				handles[j] = 0;
			}
			return 0;
		}
		handles[i] = h;
	}
	for (size_t i = begin; i < end; i++) {
		CUdeviceptr at = (CUdeviceptr)(ptr + i * page);
		CUresult r = api->cuMemMap_(at, page, 0, handles[i], 0);
		if (observer && observer->vmm_map)
			observer->vmm_map(C10_NATIVE "ExpandableSegment::map", (int)r, at, page, handles[i]);
		if (r != CUDA_SUCCESS)
			throw std::runtime_error("cuMemMap failed");
	}
	CUmemAccessDesc desc = {{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	if (api->cuMemSetAccess_((CUdeviceptr)(ptr + begin * page), (end - begin) * page, &desc, 1) !=
	    CUDA_SUCCESS)
		throw std::runtime_error("cuMemSetAccess failed");
	return (end - begin) * page;
}

NOINLINE void ExpandableSegment::unmapHandles(size_t begin, size_t end)
{
	DriverAPI *api = DriverAPI::get();

	for (size_t i = begin; i < end; i++) {
		CUdeviceptr at = (CUdeviceptr)(ptr + i * page);
		CUresult r = api->cuMemUnmap_(at, page);
		if (observer && observer->vmm_unmap)
			observer->vmm_unmap(C10_NATIVE "ExpandableSegment::unmapHandles", (int)r, at, page);
		CUresult rr = api->cuMemRelease_(handles[i]);
		if (observer && observer->vmm_release)
			observer->vmm_release(C10_NATIVE "ExpandableSegment::unmapHandles", (int)rr, handles[i]);
		if (r != CUDA_SUCCESS || rr != CUDA_SUCCESS)
			throw std::runtime_error("cuMemUnmap/cuMemRelease failed");
		handles[i] = 0;
	}
}

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
	bool mapped;          // false: unmapped pages of an expandable segment
	ExpandableSegment *es; // the expandable segment it lies in, or null
	Block(int d, cudaStream_t s, size_t sz, BlockPool *p, char *pt, ExpandableSegment *e = nullptr)
		: device(d), stream(s), size(sz), requested(0), pool(p), ptr(pt), allocated(false),
		  prev(nullptr), next(nullptr), mapped(true), es(e)
	{
	}
};

/* Unmapped blocks, by stream then address (BlockComparatorAddress). */
struct BlockAddrComparator {
	bool operator()(const Block *a, const Block *b) const
	{
		if (a->stream != b->stream)
			return (uintptr_t)a->stream < (uintptr_t)b->stream;
		return (uintptr_t)a->ptr < (uintptr_t)b->ptr;
	}
};
typedef std::set<Block *, BlockAddrComparator> UnmappedPool;

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
	Block *alloc_block(BlockPool &pool, size_t alloc_size, size_t size, cudaStream_t stream,
			   bool retry);
	void release_block(Block *block);
	bool release_cached_blocks(size_t *bytes, size_t *segments);
	void fill_state(c10_pool_state *st);
	// Expandable segments.
	UnmappedPool &unmapped_of(BlockPool &pool)
	{
		return &pool == &small_blocks_ ? small_unmapped_ : large_unmapped_;
	}
	Block *try_allocate_expandable_block(BlockPool &pool, size_t size, cudaStream_t stream);
	Block *find_expandable_block(BlockPool &pool, size_t size, cudaStream_t stream);
	bool map_block(Block *to_map, size_t size);
	size_t unmap_block(Block *block, size_t *pages);
	void try_merge_blocks(Block *dst, Block *src);

	int device_;
	std::recursive_mutex mutex_;
	BlockPool large_blocks_, small_blocks_;
	UnmappedPool large_unmapped_, small_unmapped_;
	std::set<Block *> segments_; // the first block of every segment
	struct c10_memory_stats counters_ = {};
	size_t failed_create_ = 0; // ExpandableSegment::failed_size at the last failure
};

Block *DeviceCachingAllocator::get_free_block(BlockPool &pool, size_t size,
					      cudaStream_t stream)
{
	Block key(device_, stream, size, &pool, nullptr);
	auto it = pool.lower_bound(&key);
	if (it == pool.end() || (*it)->stream != stream)
		return nullptr;
	if ((*it)->es) {
		// Best fit counts what a block can grow into: among blocks that
		// fit, one that cannot expand is taken before one that can.
		auto expandable_size = [](Block *b) {
			return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
		};
		auto next = it;
		++next;
		while ((*it)->es && next != pool.end() && (*next)->stream == stream &&
		       expandable_size(*next) < expandable_size(*it))
			it = next++;
	}
	Block *b = *it;
	pool.erase(it);
	return b;
}

/* alloc_block makes the segment (cudaMalloc): its one block, or NULL; with
 * expandable segments, a free mapped block of at least size, or NULL. */
NOINLINE Block *DeviceCachingAllocator::alloc_block(BlockPool &pool, size_t alloc_size,
						     size_t size, cudaStream_t stream, bool retry)
{
	if (expandable_segments())
		return try_allocate_expandable_block(pool, size, stream);
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
		std::vector<Block *> to_unmap;
		for (auto it = pool->begin(); it != pool->end();) {
			Block *b = *it++;
			if (b->es) {
				to_unmap.push_back(b); // unmapping changes the pool
			} else if (b->prev == nullptr && b->next == nullptr) {
				nbytes += b->size;
				nsegs++;
				release_block(b);
			}
		}
		for (Block *b : to_unmap) {
			size_t pages = 0;
			nbytes += unmap_block(b, &pages);
			nsegs += pages;
			if (!b->mapped && b->prev == nullptr && b->next == nullptr) {
				// The whole range is unmapped: free it.
				ExpandableSegment *es = b->es;
				unmapped_of(*b->pool).erase(b);
				segments_.erase(b);
				delete b;
				delete es;
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
		bool run = false;
		if (seg->es == nullptr)
			st->segments++;
		for (Block *b = seg; b != nullptr; b = b->next) {
			if (seg->es) {
				// A segment is a run of mapped pages.
				if (!b->mapped) {
					run = false;
					continue;
				}
				if (!run)
					st->segments++;
				run = true;
			}
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
	st->expandable = expandable_segments();
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
		block = alloc_block(pool, alloc_size, size, stream, false);
		if (block == nullptr) {
			c10_pool_state st = {};
			st.requested = orig_size;
			st.rounded = size;
			st.segment_size = expandable_segments() ? failed_create_ : alloc_size;
			fill_state(&st);
			counters_.alloc_retries++;
			release_cached_blocks(&st.released_bytes, &st.released_segments);
			block = alloc_block(pool, alloc_size, size, stream, true);
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
	bool split = &pool == &small_blocks_ || expandable_segments() ? remaining >= kMinBlockSize
								      : remaining > kSmallSize;
	if (split) {
		Block *rest = new Block(device_, stream, remaining, &pool, block->ptr + size, block->es);
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
	if (block->prev && !block->prev->allocated && block->prev->mapped) {
		Block *p = block->prev;
		pool.erase(p);
		p->size += block->size;
		p->next = block->next;
		if (p->next)
			p->next->prev = p;
		delete block;
		block = p;
	}
	if (block->next && !block->next->allocated && block->next->mapped) {
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

/* try_merge_blocks merges src, a neighbour of dst in the same state
 * (free, mapped or not), into dst; dst is in no pool set while it runs. */
void DeviceCachingAllocator::try_merge_blocks(Block *dst, Block *src)
{
	if (src == nullptr || src->allocated || src->mapped != dst->mapped)
		return;
	if (dst->prev == src) {
		dst->ptr = src->ptr;
		dst->prev = src->prev;
		if (dst->prev)
			dst->prev->next = dst;
		if (segments_.erase(src))
			segments_.insert(dst);
	} else {
		dst->next = src->next;
		if (dst->next)
			dst->next->prev = dst;
	}
	dst->size += src->size;
	if (src->mapped)
		src->pool->erase(src);
	else
		unmapped_of(*src->pool).erase(src);
	delete src;
}

/* find_expandable_block returns the lowest unmapped block of the pool and
 * stream (with the free block before it) that has size bytes of room, or the
 * one block of a new expandable segment. */
Block *DeviceCachingAllocator::find_expandable_block(BlockPool &pool, size_t size,
						      cudaStream_t stream)
{
	UnmappedPool &unmapped = unmapped_of(pool);
	auto allocatable = [](Block *b) { return b != nullptr && !b->allocated; };
	auto has_room = [&](Block *b) {
		size_t bytes = 0;
		while (bytes < size && allocatable(b)) {
			bytes += b->size;
			b = b->next;
		}
		return bytes >= size;
	};
	Block key(device_, stream, 0, &pool, nullptr);
	for (auto it = unmapped.lower_bound(&key); it != unmapped.end() && (*it)->stream == stream;
	     ++it) {
		Block *c = *it;
		if (allocatable(c->prev))
			c = c->prev;
		if (has_room(c))
			return c;
	}
	size_t free_b = 0, total_b = 0;
	if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
		throw std::runtime_error("cudaMemGetInfo failed");
	// 1 1/8 of the device's memory: room to unmap pages early in the range
	// and map them again at its end.
	size_t page = &pool == &small_blocks_ ? kSmallBuffer : kLargeBuffer;
	ExpandableSegment *es = new ExpandableSegment(device_, stream, page, total_b + total_b / 8);
	Block *b = new Block(device_, stream, es->size(), &pool, es->ptr, es);
	b->mapped = false;
	unmapped.insert(b);
	segments_.insert(b);
	return b;
}

/* map_block maps the pages under the first size bytes of an unmapped block
 * and merges them with free mapped neighbours. */
bool DeviceCachingAllocator::map_block(Block *to_map, size_t size)
{
	ExpandableSegment *es = to_map->es;
	size_t mapped = es->map((size_t)(to_map->ptr - es->ptr), size);
	if (mapped == 0) {
		failed_create_ = es->failed_size;
		return false;
	}
	BlockPool &pool = *to_map->pool;
	unmapped_of(pool).erase(to_map);
	to_map->mapped = true;
	if (mapped < to_map->size) {
		Block *rest = new Block(device_, to_map->stream, to_map->size - mapped, &pool,
					to_map->ptr + mapped, es);
		rest->mapped = false;
		rest->prev = to_map;
		rest->next = to_map->next;
		if (rest->next)
			rest->next->prev = rest;
		to_map->next = rest;
		unmapped_of(pool).insert(rest);
		to_map->size = mapped;
	}
	try_merge_blocks(to_map, to_map->prev);
	try_merge_blocks(to_map, to_map->next);
	pool.insert(to_map);
	return true;
}

/* try_allocate_expandable_block maps what a request lacks: a free mapped
 * block of at least size, out of its pool, or NULL. */
NOINLINE Block *DeviceCachingAllocator::try_allocate_expandable_block(BlockPool &pool, size_t size,
								      cudaStream_t stream)
{
	Block *c = find_expandable_block(pool, size, stream);
	if (!c->mapped && !map_block(c, std::min(c->size, size)))
		return nullptr;
	while (c->size < size) {
		// c is free and mapped, its next unmapped: map the rest there.
		Block *n = c->next;
		if (!map_block(n, std::min(size - c->size, n->size)))
			return nullptr;
		c = n; // map_block merged c into n
	}
	pool.erase(c);
	return c;
}

/* unmap_block unmaps and releases the pages wholly inside a free mapped
 * block: the bytes unmapped (*pages: how many pages). */
size_t DeviceCachingAllocator::unmap_block(Block *block, size_t *pages)
{
	ExpandableSegment *es = block->es;
	size_t off = (size_t)(block->ptr - es->ptr);
	size_t begin = (off + es->page - 1) / es->page, end = (off + block->size) / es->page;
	if (begin >= end)
		return 0;
	es->unmapHandles(begin, end);
	BlockPool &pool = *block->pool;
	pool.erase(block);
	char *uptr = es->ptr + begin * es->page;
	size_t usize = (end - begin) * es->page;
	size_t before = (size_t)(uptr - block->ptr);
	if (before > 0) {
		Block *b = new Block(device_, block->stream, before, &pool, block->ptr, es);
		b->prev = block->prev;
		b->next = block;
		if (b->prev)
			b->prev->next = b;
		block->prev = b;
		if (segments_.erase(block))
			segments_.insert(b);
		pool.insert(b);
	}
	size_t after = block->size - before - usize;
	if (after > 0) {
		Block *a = new Block(device_, block->stream, after, &pool, uptr + usize, es);
		a->prev = block;
		a->next = block->next;
		if (a->next)
			a->next->prev = a;
		block->next = a;
		pool.insert(a);
	}
	block->ptr = uptr;
	block->size = usize;
	block->mapped = false;
	try_merge_blocks(block, block->prev);
	try_merge_blocks(block, block->next);
	unmapped_of(pool).insert(block);
	*pages = end - begin;
	return usize;
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
