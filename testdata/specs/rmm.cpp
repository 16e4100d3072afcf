/* rmm.cpp: see rmm.h. */
#include "rmm.h"

#include <mutex>
#include <vector>

#include "arena.h"

namespace rmm {
namespace mr {

void *cuda_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
	(void)stream;
	void *p = nullptr;
	cudaError_t ret = cudaMalloc(&p, bytes);
	if (obs_)
		obs_->seg_alloc("rmm::mr::cuda_memory_resource::do_allocate", ret,
				ret == cudaSuccess ? p : nullptr, bytes);
	if (ret == cudaErrorMemoryAllocation)
		throw rmm::out_of_memory("out_of_memory: CUDA error: cudaMalloc failed");
	if (ret != cudaSuccess)
		throw rmm::bad_alloc("CUDA error: cudaMalloc failed");
	return p;
}

void cuda_memory_resource::do_deallocate(void *ptr, std::size_t bytes, cuda_stream_view stream)
{
	(void)bytes;
	(void)stream;
	cudaError_t ret = cudaFree(ptr);
	if (obs_)
		obs_->seg_free("rmm::mr::cuda_memory_resource::do_deallocate", ret, ptr);
}

namespace detail {

struct coalescing_free_list {
	fake::Arena arena;
};

template <typename PoolResource, typename FreeListType>
class stream_ordered_memory_resource : public device_memory_resource {
protected:
	void *do_allocate(std::size_t bytes, cuda_stream_view stream) override;
	void do_deallocate(void *ptr, std::size_t bytes, cuda_stream_view stream) override;

	FreeListType blocks_;
	std::mutex mtx_;
};

template <typename PoolResource, typename FreeListType>
void *stream_ordered_memory_resource<PoolResource, FreeListType>::do_allocate(std::size_t bytes,
									     cuda_stream_view stream)
{
	if (bytes == 0)
		return nullptr;
	std::lock_guard<std::mutex> lock(mtx_);
	std::uintptr_t p = blocks_.arena.carve(bytes);
	if (p == 0) {
		/* Throws rmm::out_of_memory through here when upstream fails. */
		static_cast<PoolResource *>(this)->expand_pool(bytes, stream);
		p = blocks_.arena.carve(bytes);
	}
	return reinterpret_cast<void *>(p);
}

template <typename PoolResource, typename FreeListType>
void stream_ordered_memory_resource<PoolResource, FreeListType>::do_deallocate(void *ptr,
									       std::size_t bytes,
									       cuda_stream_view stream)
{
	(void)bytes;
	(void)stream;
	std::lock_guard<std::mutex> lock(mtx_);
	blocks_.arena.release(reinterpret_cast<std::uintptr_t>(ptr));
}

} // namespace detail

template <typename Upstream>
class pool_memory_resource final
	: public detail::stream_ordered_memory_resource<pool_memory_resource<Upstream>,
							detail::coalescing_free_list> {
public:
	pool_memory_resource(Upstream *upstream, std::size_t initial_pool_size)
		: upstream_{upstream}, initial_{fake::round_up(initial_pool_size, 2u << 20)}
	{
		add(initial_, cuda_stream_view{});
	}
	~pool_memory_resource() override
	{
		for (auto &r : this->blocks_.arena.regions())
			upstream_->deallocate(reinterpret_cast<void *>(r.first), r.second);
	}
	__attribute__((noinline)) void expand_pool(std::size_t bytes, cuda_stream_view stream)
	{
		std::size_t grow = fake::round_up(bytes, 2u << 20);
		add(grow > initial_ ? grow : initial_, stream);
	}

private:
	void add(std::size_t size, cuda_stream_view stream)
	{
		void *p = upstream_->allocate(size, stream);
		this->blocks_.arena.add_region(reinterpret_cast<std::uintptr_t>(p), size);
	}

	Upstream *upstream_;
	std::size_t initial_;
};

template class detail::stream_ordered_memory_resource<pool_memory_resource<cuda_memory_resource>,
						      detail::coalescing_free_list>;
template class pool_memory_resource<cuda_memory_resource>;

device_memory_resource *make_pool(cuda_memory_resource *upstream, std::size_t initial_pool_size)
{
	return new pool_memory_resource<cuda_memory_resource>(upstream, initial_pool_size);
}

} // namespace mr
} // namespace rmm
