/*
 * libcudart_throw.so: a C++ library that exports the CUDA runtime's
 * cudaMalloc and cudaFree (extern "C", the fake runtime's ABI) over the fake
 * driver, and throws std::bad_alloc from cudaMalloc for a request above
 * THROW_LIMIT instead of returning an error, as some C++ wrappers do. The
 * exception leaves cudaMalloc through its caller's frames: a uretprobe on
 * cudaMalloc would have replaced the return address the unwinder needs, and
 * the process would die in std::terminate (SIGABRT).
 *
 * Each call that does not throw is exactly one nested driver call, as the
 * fake runtime's: cudaMalloc -> cuMemAlloc_v2, cudaFree -> cuMemFree_v2
 * (through a tail call to free_device). A request that throws makes no
 * driver call.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <new>

#include "cudart_throw.h"

static cudaError_t from_driver(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_OUT_OF_MEMORY:
		return (cudaError_t)r;
	default:
		return (cudaError_t)999;
	}
}

extern "C" __attribute__((visibility("default"))) cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	if (size > THROW_LIMIT)
		throw std::bad_alloc();
	CUdeviceptr p = 0;
	CUresult r = cuMemAlloc_v2(&p, size);
	if (r == CUDA_SUCCESS)
		*devPtr = (void *)p;
	return from_driver(r);
}

/* free_device is cudaFree's work. cudaFree reaches it by a tail call (a
 * jmp, not a call: the return instruction that ends cudaFree's call is
 * free_device's), so a profiler that reads cudaFree's result at its return
 * must follow the jump. */
__attribute__((noinline)) static cudaError_t free_device(void *devPtr)
{
	return from_driver(cuMemFree_v2((CUdeviceptr)devPtr));
}

extern "C" __attribute__((visibility("default"), optimize("optimize-sibling-calls"))) cudaError_t
cudaFree(void *devPtr)
{
	return free_device(devPtr);
}
