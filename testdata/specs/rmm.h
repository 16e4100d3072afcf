/*
 * rmm.h: a fake of RAPIDS RMM's pool (include/rmm/mr/device/
 * pool_memory_resource.hpp and detail/stream_ordered_memory_resource.hpp)
 * with the real namespaces, class templates and the exact signatures of the
 * functions vramprof's built-in spec names, so the mangled names are those
 * of a library that instantiates RMM's pool over cuda_memory_resource:
 *   rmm::mr::detail::stream_ordered_memory_resource<rmm::mr::pool_memory_resource<rmm::mr::cuda_memory_resource>, rmm::mr::detail::coalescing_free_list>::do_allocate(unsigned long, rmm::cuda_stream_view)
 *   ...::do_deallocate(void*, unsigned long, rmm::cuda_stream_view)
 * The templates are defined and instantiated in librmm.so alone (callers
 * see declarations and get a pool from make_pool), so every call runs the
 * library's copy. The pool takes initial_pool_size from cuda_memory_resource
 * (cudaMalloc) when made, and grows by max(request rounded up to 2 MiB,
 * initial_pool_size) when no free range fits; cuda_memory_resource throws
 * rmm::out_of_memory when cudaMalloc fails, and it propagates out of
 * do_allocate and allocate, as in RMM.
 */
#ifndef FAKE_RMM_H
#define FAKE_RMM_H

#include <cstddef>
#include <new>

#include <cuda_runtime_api.h>

#include "observer.h"

namespace rmm {

class cuda_stream_view {
public:
	constexpr cuda_stream_view() = default;
	constexpr cuda_stream_view(cudaStream_t stream) : stream_{stream} {}
	constexpr cudaStream_t value() const { return stream_; }

private:
	cudaStream_t stream_{};
};

class bad_alloc : public std::bad_alloc {
public:
	explicit bad_alloc(const char *msg) : msg_{msg} {}
	const char *what() const noexcept override { return msg_; }

private:
	const char *msg_;
};

class out_of_memory : public bad_alloc {
public:
	using bad_alloc::bad_alloc;
};

namespace mr {

class device_memory_resource {
public:
	virtual ~device_memory_resource() = default;
	void *allocate(std::size_t bytes, cuda_stream_view stream = cuda_stream_view{})
	{
		return do_allocate(bytes, stream);
	}
	void deallocate(void *ptr, std::size_t bytes, cuda_stream_view stream = cuda_stream_view{})
	{
		do_deallocate(ptr, bytes, stream);
	}

private:
	virtual void *do_allocate(std::size_t bytes, cuda_stream_view stream) = 0;
	virtual void do_deallocate(void *ptr, std::size_t bytes, cuda_stream_view stream) = 0;
};

class cuda_memory_resource final : public device_memory_resource {
public:
	explicit cuda_memory_resource(const fake_observer *obs) : obs_{obs} {}

private:
	void *do_allocate(std::size_t bytes, cuda_stream_view stream) override;
	void do_deallocate(void *ptr, std::size_t bytes, cuda_stream_view stream) override;
	const fake_observer *obs_;
};

/* make_pool returns a pool_memory_resource<cuda_memory_resource> over
 * upstream, with initial_pool_size taken at once (throws
 * rmm::out_of_memory when that fails). delete it to give its regions back. */
device_memory_resource *make_pool(cuda_memory_resource *upstream, std::size_t initial_pool_size);

} // namespace mr
} // namespace rmm

#endif
