// realstatic: NVIDIA's real CUDA runtime linked in statically
// (libcudart_static.a, as nvcc links every CUDA C++ program), called through
// cuda_runtime.h: the C API, and its inline C++ template wrapper
// cudaMalloc<T>(T**, size_t). Built with the host compiler alone (no nvcc)
// by the tests: see testdata/nvidia/README.md.
//
// Without a driver every call fails (35, cudaErrorInsufficientDriver). The
// program writes down each call on stdout, one line each:
//
//	call <api> <caller> <bytes> <return code>
//
// which the tests compare with what vramprof recorded, and with the sites
// it named (the callers, never the runtime).
//
// With the argument "hold" it first prints "ready" and waits for its stdin
// to close, for a profiler to attach before the calls.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#define NOINLINE __attribute__((noinline))

static void log_call(const char *api, const char *caller, size_t bytes, cudaError_t rc)
{
	std::printf("call %s %s %zu %d\n", api, caller, bytes, (int)rc);
}

// The C API: cudaMalloc(void**, size_t).
NOINLINE void alloc_plain(size_t n)
{
	void *p = nullptr;
	cudaError_t rc = cudaMalloc(&p, n);
	log_call("cudaMalloc", __func__, n, rc);
	if (rc == cudaSuccess)
		log_call("cudaFree", __func__, 0, cudaFree(p));
}

// cuda_runtime.h's template: cudaMalloc<float>(float**, size_t), a frame of
// its own at -O0, between this function and the runtime's cudaMalloc.
NOINLINE void alloc_template(size_t count)
{
	float *p = nullptr;
	cudaError_t rc = cudaMalloc(&p, count * sizeof(float));
	log_call("cudaMalloc", __func__, count * sizeof(float), rc);
	if (rc == cudaSuccess)
		log_call("cudaFree", __func__, 0, cudaFree(p));
}

NOINLINE void free_null()
{
	log_call("cudaFree", __func__, 0, cudaFree(nullptr));
}

int main(int argc, char **argv)
{
	if (argc > 1 && std::strcmp(argv[1], "hold") == 0) {
		std::printf("ready\n");
		std::fflush(stdout);
		while (std::getchar() != EOF)
			;
	}
	alloc_plain(1 << 20);
	alloc_template(1 << 18);
	alloc_plain(12345);
	alloc_template(1000);
	free_null();
	return 0;
}
