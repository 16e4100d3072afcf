/*
 * tinypool.cpp: libtinypool.so, a project's own pool with a C API and no
 * spec built into vramprof: the scenario spec_tiny traces it with a user
 * spec (--allocators). One 16 MiB region from cudaMalloc at the first call,
 * carved as fake::Arena does; tiny_alloc7 takes its size as the seventh
 * argument (on the stack), as a spec's arg7 reads it.
 */
#include <cuda_runtime_api.h>

#include <mutex>

#include "arena.h"
#include "observer.h"

static std::mutex mu;
static fake::Arena arena;
static void *region;
static const fake_observer *obs;

extern "C" void tiny_set_observer(const fake_observer *o) { obs = o; }

extern "C" void *tiny_alloc(size_t size)
{
	std::lock_guard<std::mutex> lock(mu);
	if (region == nullptr) {
		cudaError_t ret = cudaMalloc(&region, 16u << 20);
		if (obs)
			obs->seg_alloc("tiny_alloc", ret, ret == cudaSuccess ? region : nullptr, 16u << 20);
		if (ret != cudaSuccess)
			return nullptr;
		arena.add_region(reinterpret_cast<std::uintptr_t>(region), 16u << 20);
	}
	return reinterpret_cast<void *>(arena.carve(size));
}

extern "C" void *tiny_alloc7(int a, int b, int c, int d, int e, int f, size_t size)
{
	if (a + b + c + d + e + f != 21)
		return nullptr;
	return tiny_alloc(size);
}

extern "C" void tiny_free(void *ptr)
{
	std::lock_guard<std::mutex> lock(mu);
	arena.release(reinterpret_cast<std::uintptr_t>(ptr));
}

extern "C" void tiny_shutdown(void)
{
	std::lock_guard<std::mutex> lock(mu);
	if (region != nullptr) {
		cudaError_t ret = cudaFree(region);
		if (obs)
			obs->seg_free("tiny_shutdown", ret, region);
		region = nullptr;
	}
}

/*
 * tiny_alloc_tail(size) tail-calls tiny_alloc (a jmp out of the function,
 * written in assembly so no compiler flag changes it): its return
 * instructions are tiny_alloc's, not its own. A spec naming it must leave
 * it unprobed and say why (probes' tests).
 */
__asm__(".globl tiny_alloc_tail\n"
	".type tiny_alloc_tail, @function\n"
	"tiny_alloc_tail:\n"
	"\tjmp tiny_alloc@PLT\n"
	".size tiny_alloc_tail, .-tiny_alloc_tail\n");
