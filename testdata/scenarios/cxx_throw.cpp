/*
 * cxx_throw: a C++ program over libcudart_throw.so (../throw), whose
 * cudaMalloc throws std::bad_alloc for a request above THROW_LIMIT.
 * before_throw allocates 4 buffers (8, 16, 24, 32 MiB); request_too_much
 * asks for 2 GiB and catches the std::bad_alloc; after_throw allocates 3 more
 * (4, 12, 20 MiB) and frees one of them (12 MiB); release_before frees the 4
 * buffers of before_throw. Live at the end: 24 MiB of after_throw's. The
 * process exits with 3 when the exception was caught (1 when it was not
 * thrown; a process killed by std::terminate dies of SIGABRT).
 */
extern "C" {
#include "truth.h"
}

#include <cstdio>
#include <new>

#include "cudart_throw.h"

static void *before[4];
static void *after[3];

NOINLINE void before_throw(void)
{
	for (int i = 0; i < 4; i++)
		check_cuda(TRUTH_MALLOC(&before[i], (size_t)(i + 1) * 8 * MiB), __func__);
}

/* request_too_much returns whether cudaMalloc threw. */
NOINLINE bool request_too_much(void)
{
	void *p = nullptr;
	try {
		cudaError_t ret = cudaMalloc(&p, 2 * GiB);
		fprintf(stderr, "cudaMalloc(2 GiB) returned %d instead of throwing\n", (int)ret);
		return false;
	} catch (const std::bad_alloc &) {
		return true;
	}
}

NOINLINE void after_throw(void)
{
	for (int i = 0; i < 3; i++)
		check_cuda(TRUTH_MALLOC(&after[i], (size_t)(4 + 8 * i) * MiB), __func__);
	check_cuda(TRUTH_FREE(after[1]), __func__);
}

NOINLINE void release_before(void)
{
	for (int i = 0; i < 4; i++)
		check_cuda(TRUTH_FREE(before[i]), __func__);
}

int main(void)
{
	truth_init("cxx_throw");
	before_throw();
	bool caught = request_too_much();
	after_throw();
	release_before();
	if (truth_write() != 0)
		return 2;
	return caught ? 3 : 1;
}
