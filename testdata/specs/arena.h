/*
 * arena.h: the block bookkeeping the fake allocators share. Regions come
 * from an upstream callback (cudaMalloc, through the fake runtime); blocks
 * are carved best fit (smallest free range, then lowest address) at 256-byte
 * granularity, and a freed block merges with its free neighbours in its
 * region. Regions are never given back while the arena lives. Not
 * thread-safe: callers lock.
 */
#ifndef FAKE_ARENA_H
#define FAKE_ARENA_H

#include <cstddef>
#include <cstdint>
#include <map>

namespace fake {

constexpr std::size_t kGranule = 256;

inline std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

class Arena {
public:
	/* carve returns a block of at least bytes (rounded to kGranule) from
	 * the free ranges, or 0 when none fits. */
	std::uintptr_t carve(std::size_t bytes)
	{
		std::size_t want = round_up(bytes, kGranule);
		auto best = free_.end();
		for (auto it = free_.begin(); it != free_.end(); ++it)
			if (it->second >= want && (best == free_.end() || it->second < best->second))
				best = it;
		if (best == free_.end())
			return 0;
		std::uintptr_t p = best->first;
		std::size_t rest = best->second - want;
		std::uintptr_t region = region_of_.at(p);
		free_.erase(best);
		if (rest > 0) {
			free_[p + want] = rest;
			region_of_[p + want] = region;
		}
		used_[p] = want;
		return p;
	}
	/* add_region makes [base, base+size) free space. */
	void add_region(std::uintptr_t base, std::size_t size)
	{
		free_[base] = size;
		region_of_[base] = base;
		regions_[base] = size;
	}
	/* release gives a block back: false for a pointer carve did not return. */
	bool release(std::uintptr_t p)
	{
		auto it = used_.find(p);
		if (it == used_.end())
			return false;
		std::size_t size = it->second;
		used_.erase(it);
		std::uintptr_t region = region_of_.at(p);
		auto next = free_.find(p + size);
		if (next != free_.end() && region_of_.at(next->first) == region) {
			size += next->second;
			region_of_.erase(next->first);
			free_.erase(next);
		}
		auto prev = free_.lower_bound(p);
		if (prev != free_.begin()) {
			--prev;
			if (prev->first + prev->second == p && region_of_.at(prev->first) == region) {
				prev->second += size;
				region_of_.erase(p);
				return true;
			}
		}
		free_[p] = size;
		return true;
	}
	const std::map<std::uintptr_t, std::size_t> &regions() const { return regions_; }

private:
	std::map<std::uintptr_t, std::size_t> free_;      /* free ranges: start -> size */
	std::map<std::uintptr_t, std::size_t> used_;      /* blocks: start -> rounded size */
	std::map<std::uintptr_t, std::uintptr_t> region_of_; /* block or range start -> region */
	std::map<std::uintptr_t, std::size_t> regions_;
};

} // namespace fake

#endif
