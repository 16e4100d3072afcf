/*
 * bfc_allocator.h: a fake of XLA's BFC allocator (xla/tsl/framework/
 * bfc_allocator.h), with its namespace, class and the exact signatures of
 * the functions vramprof's built-in spec names, so the mangled names are
 * the real library's:
 *   tsl::BFCAllocator::AllocateRaw(unsigned long, unsigned long, tsl::AllocationAttributes const&)
 *   tsl::BFCAllocator::DeallocateRaw(void*)
 * The two-argument AllocateRaw is the real header's inline wrapper. Regions
 * come from cudaMalloc (through the fake runtime): the first region is
 * 32 MiB, each later one doubles, or is the request rounded up to 2 MiB if
 * larger, and no region is allocated past total_memory. A request that no
 * region can hold returns nullptr, as BFCAllocator does.
 */
#ifndef FAKE_BFC_ALLOCATOR_H
#define FAKE_BFC_ALLOCATOR_H

#include <cstddef>
#include <mutex>

#include "arena.h"
#include "observer.h"

namespace tsl {

struct AllocationAttributes {
	bool retry_on_failure = true;
};

class Allocator {
public:
	virtual ~Allocator();
	virtual void *AllocateRaw(size_t alignment, size_t num_bytes) = 0;
	virtual void *AllocateRaw(size_t alignment, size_t num_bytes,
				  const AllocationAttributes &allocation_attr)
	{
		(void)allocation_attr;
		return AllocateRaw(alignment, num_bytes);
	}
	virtual void DeallocateRaw(void *ptr) = 0;
};

class BFCAllocator : public Allocator {
public:
	BFCAllocator(size_t total_memory, const fake_observer *obs);
	~BFCAllocator() override;

	void *AllocateRaw(size_t alignment, size_t num_bytes) override
	{
		return AllocateRaw(alignment, num_bytes, AllocationAttributes());
	}
	void *AllocateRaw(size_t alignment, size_t num_bytes,
			  const AllocationAttributes &allocation_attr) override;
	void DeallocateRaw(void *ptr) override;

private:
	bool Extend(size_t rounded_bytes);

	std::mutex mutex_;
	fake::Arena arena_;
	size_t total_memory_, region_bytes_ = 0, next_region_ = 32u << 20;
	const fake_observer *obs_;
};

} // namespace tsl

#endif
