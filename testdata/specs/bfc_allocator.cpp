/* bfc_allocator.cpp: see bfc_allocator.h. */
#include "bfc_allocator.h"

#include <cuda_runtime_api.h>

namespace tsl {

Allocator::~Allocator() {}

BFCAllocator::BFCAllocator(size_t total_memory, const fake_observer *obs)
	: total_memory_(total_memory), obs_(obs)
{
}

BFCAllocator::~BFCAllocator()
{
	for (auto &r : arena_.regions()) {
		cudaError_t ret = cudaFree(reinterpret_cast<void *>(r.first));
		if (obs_)
			obs_->seg_free("tsl::BFCAllocator::~BFCAllocator", ret, reinterpret_cast<void *>(r.first));
	}
}

__attribute__((noinline)) bool BFCAllocator::Extend(size_t rounded_bytes)
{
	size_t size = next_region_;
	if (size < rounded_bytes)
		size = fake::round_up(rounded_bytes, 2u << 20);
	if (region_bytes_ + size > total_memory_)
		return false;
	void *p = nullptr;
	cudaError_t ret = cudaMalloc(&p, size);
	if (obs_)
		obs_->seg_alloc("tsl::BFCAllocator::Extend", ret, ret == cudaSuccess ? p : nullptr, size);
	if (ret != cudaSuccess)
		return false;
	arena_.add_region(reinterpret_cast<std::uintptr_t>(p), size);
	region_bytes_ += size;
	next_region_ *= 2;
	return true;
}

void *BFCAllocator::AllocateRaw(size_t alignment, size_t num_bytes,
				const AllocationAttributes &allocation_attr)
{
	(void)alignment;
	(void)allocation_attr;
	if (num_bytes == 0)
		return nullptr;
	std::lock_guard<std::mutex> lock(mutex_);
	std::uintptr_t p = arena_.carve(num_bytes);
	if (p == 0 && Extend(fake::round_up(num_bytes, fake::kGranule)))
		p = arena_.carve(num_bytes);
	return reinterpret_cast<void *>(p);
}

void BFCAllocator::DeallocateRaw(void *ptr)
{
	if (ptr == nullptr)
		return;
	std::lock_guard<std::mutex> lock(mutex_);
	arena_.release(reinterpret_cast<std::uintptr_t>(ptr));
}

} // namespace tsl
