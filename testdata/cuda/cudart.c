/*
 * cudart.c: a fake CUDA runtime with the real libcudart ABI for the
 * allocation API, for tests on machines without a GPU.
 *
 * Device memory is simulated: cudaMalloc hands out addresses in a fake
 * device range [FAKE_BASE, FAKE_BASE + FAKE_SPAN) that is never mapped, so a
 * test can never mistake them for host memory. Allocations are first-fit over
 * that range, aligned to FAKE_ALIGN; freed ranges are reused, live ranges never
 * overlap.
 *
 * Capacity comes from FAKECUDA_CAPACITY (bytes, default 16 GiB), read lazily at
 * the first call, so a program may setenv() it in main before its first CUDA
 * call. An allocation fails with cudaErrorMemoryAllocation when the sum of live
 * requested sizes plus the new size would exceed capacity.
 *
 * Every entry point is safe for concurrent use (one pthread mutex). Nothing
 * sleeps or spins.
 */
#include <cuda_runtime_api.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define API __attribute__((visibility("default")))

/* Where fake device pointers live: CUDA's unified addressing puts real device
 * pointers in the 0x7fxx_xxxx_xxxx region too. */
#define FAKE_BASE ((uintptr_t)0x7f2000000000ULL)
#define FAKE_SPAN ((uintptr_t)1 << 40)
/* Real cudaMalloc aligns to at least 256 bytes; 512 matches what is observed. */
#define FAKE_ALIGN ((size_t)512)
#define DEFAULT_CAPACITY ((size_t)16 << 30)

struct block {
	uintptr_t addr;
	size_t requested;
	size_t reserved; /* requested rounded up to FAKE_ALIGN */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static size_t capacity;
/* This copy's device range. Several copies of the runtime in one process (a
 * library with the runtime linked in, beside libcudart.so) share one device
 * in real CUDA, so their pointers never coincide: each copy claims the next
 * range at its first call, counted process-wide in $FAKECUDA_COPIES. */
static uintptr_t base = FAKE_BASE;
static size_t used; /* sum of live requested sizes */
static struct block *blocks; /* live blocks, sorted by addr */
static size_t nblocks, cblocks;

static __thread cudaError_t last_error;

static void init_locked(void)
{
	const char *s;
	char *end;
	unsigned long long v;

	if (initialized)
		return;
	initialized = 1;
	s = getenv("FAKECUDA_COPIES");
	v = s && *s ? strtoull(s, NULL, 10) : 0;
	base = FAKE_BASE + (uintptr_t)v * FAKE_SPAN;
	char buf[32];
	snprintf(buf, sizeof buf, "%llu", v + 1);
	setenv("FAKECUDA_COPIES", buf, 1);
	capacity = DEFAULT_CAPACITY;
	s = getenv("FAKECUDA_CAPACITY");
	if (s && *s) {
		errno = 0;
		v = strtoull(s, &end, 10);
		if (errno == 0 && *end == '\0')
			capacity = (size_t)v;
	}
}

static cudaError_t set_error(cudaError_t e)
{
	if (e != cudaSuccess)
		last_error = e;
	return e;
}

/* find_block returns the index of the live block starting at addr, or -1. */
static long find_block(uintptr_t addr)
{
	size_t lo = 0, hi = nblocks;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (blocks[mid].addr == addr)
			return (long)mid;
		if (blocks[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	uintptr_t prev_end;
	size_t reserved, i;

	if (devPtr == NULL)
		return set_error(cudaErrorInvalidValue);
	if (size == 0) {
		*devPtr = NULL;
		return cudaSuccess;
	}
	pthread_mutex_lock(&mu);
	init_locked();
	prev_end = base;
	if (size > capacity || used > capacity - size) {
		pthread_mutex_unlock(&mu);
		return set_error(cudaErrorMemoryAllocation);
	}
	reserved = (size + FAKE_ALIGN - 1) & ~(FAKE_ALIGN - 1);
	/* First fit: the first gap between live blocks that holds the request. */
	for (i = 0; i < nblocks; i++) {
		if (blocks[i].addr - prev_end >= reserved)
			break;
		prev_end = blocks[i].addr + blocks[i].reserved;
	}
	if (i == nblocks && base + FAKE_SPAN - prev_end < reserved) {
		pthread_mutex_unlock(&mu);
		return set_error(cudaErrorMemoryAllocation);
	}
	if (nblocks == cblocks) {
		size_t n = cblocks ? 2 * cblocks : 256;
		struct block *nb = realloc(blocks, n * sizeof(*nb));
		if (nb == NULL) {
			pthread_mutex_unlock(&mu);
			return set_error(cudaErrorMemoryAllocation);
		}
		blocks = nb;
		cblocks = n;
	}
	memmove(&blocks[i + 1], &blocks[i], (nblocks - i) * sizeof(*blocks));
	blocks[i].addr = prev_end;
	blocks[i].requested = size;
	blocks[i].reserved = reserved;
	nblocks++;
	used += size;
	pthread_mutex_unlock(&mu);
	*devPtr = (void *)prev_end;
	return cudaSuccess;
}

API cudaError_t cudaFree(void *devPtr)
{
	long i;

	if (devPtr == NULL)
		return cudaSuccess;
	pthread_mutex_lock(&mu);
	init_locked();
	i = find_block((uintptr_t)devPtr);
	if (i < 0) {
		pthread_mutex_unlock(&mu);
		return set_error(cudaErrorInvalidValue);
	}
	used -= blocks[i].requested;
	memmove(&blocks[i], &blocks[i + 1],
		(nblocks - (size_t)i - 1) * sizeof(*blocks));
	nblocks--;
	pthread_mutex_unlock(&mu);
	return cudaSuccess;
}

API const char *cudaGetErrorString(cudaError_t error)
{
	switch (error) {
	case cudaSuccess:
		return "no error";
	case cudaErrorInvalidValue:
		return "invalid argument";
	case cudaErrorMemoryAllocation:
		return "out of memory";
	case cudaErrorInvalidDevice:
		return "invalid device ordinal";
	}
	return "unrecognized error code";
}

API const char *cudaGetErrorName(cudaError_t error)
{
	switch (error) {
	case cudaSuccess:
		return "cudaSuccess";
	case cudaErrorInvalidValue:
		return "cudaErrorInvalidValue";
	case cudaErrorMemoryAllocation:
		return "cudaErrorMemoryAllocation";
	case cudaErrorInvalidDevice:
		return "cudaErrorInvalidDevice";
	}
	return "cudaErrorUnknown";
}

API cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;

	last_error = cudaSuccess;
	return e;
}

API cudaError_t cudaPeekAtLastError(void)
{
	return last_error;
}

API cudaError_t cudaSetDevice(int device)
{
	return device == 0 ? cudaSuccess : set_error(cudaErrorInvalidDevice);
}

API cudaError_t cudaGetDevice(int *device)
{
	if (device == NULL)
		return set_error(cudaErrorInvalidValue);
	*device = 0;
	return cudaSuccess;
}

API cudaError_t cudaGetDeviceCount(int *count)
{
	if (count == NULL)
		return set_error(cudaErrorInvalidValue);
	*count = 1;
	return cudaSuccess;
}

API cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
	if (free == NULL || total == NULL)
		return set_error(cudaErrorInvalidValue);
	pthread_mutex_lock(&mu);
	init_locked();
	*free = capacity - used;
	*total = capacity;
	pthread_mutex_unlock(&mu);
	return cudaSuccess;
}

API cudaError_t cudaDeviceSynchronize(void)
{
	return cudaSuccess;
}

API cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
	if (runtimeVersion == NULL)
		return set_error(cudaErrorInvalidValue);
	*runtimeVersion = 12040;
	return cudaSuccess;
}
