/*
 * libcuda.c: a fake CUDA driver (libcuda.so.1) with the real driver ABI for
 * the memory API, for tests on machines without a GPU. The fake runtime
 * (cudart.c) dlopen()s it and calls it, as NVIDIA's libcudart does.
 *
 * Device memory lives here. Four devices; device d hands out addresses
 * first-fit in [DEV_BASE - d * SPAN, +SPAN) (SPAN = 256 GiB: device 0 at
 * 0x7f2000000000, 1 at 0x7ee000000000, 2 at 0x7ea000000000, 3 at
 * 0x7e6000000000: user-space addresses, as CUDA's unified addressing gives),
 * 512-byte aligned, reused after free, never overlapping, never mapped.
 * Virtual address reservations (cuMemAddressReserve) come from their own
 * range [VMM_BASE = 0x7e0000000000, +SPAN), 2 MiB granular. Each device has
 * FAKECUDA_CAPACITY bytes (default 16 GiB, read at the first call): live
 * requested bytes of allocations plus physical cuMemCreate bytes; reserved
 * address space costs nothing. Pinned host memory is real host memory,
 * tracked apart, never counted against a device.
 *
 * The current device is the device of the thread's current context
 * (cuCtxSetCurrent, cuCtxCreate_v2); with none it is device 0 (its primary
 * context). A thread has one current context, not a stack: cuCtxCreate_v2
 * makes the new context current, and cuCtxDestroy_v2 of the calling
 * thread's current context leaves it none. A destroyed context's handle is
 * never reused (it stays allocated, marked dead): cuCtxSetCurrent and
 * cuCtxDestroy_v2 refuse it with CUDA_ERROR_INVALID_CONTEXT.
 *
 * No exported function calls another exported function (each calls static
 * helpers), so a probe on one never fires inside another. One mutex; nothing
 * sleeps. After fork() the child starts with an empty driver, as a fresh
 * CUDA context would: its pointers may coincide with the parent's.
 *
 * NVML's view (the stand-in libnvidia-ml.so.1, ../nvml/nvml.c): when
 * FAKECUDA_NVML_DIR names a directory, the driver keeps the file DIR/PID
 * up to date, one line per device "DEV USED CONTEXT" (decimal bytes):
 * USED as above, CONTEXT the cost of the device's primary context,
 * FAKECUDA_CONTEXT_BYTES (default 300 MiB), charged when the context comes
 * to be (its first cuDevicePrimaryCtxRetain, or the first allocation on the
 * device, as CUDA creates the context at the first call that needs it)
 * until its last release, as a real context costs a few hundred MiB the
 * runtime never asked for. The context is NVML's
 * figure only: it is not counted against the capacity. The file is
 * rewritten (a temporary file renamed over it, so a reader sees one whole
 * state) under the lock at every change, before the call returns, and
 * removed at exit.
 */
#define _GNU_SOURCE
#include <cuda.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

#define NDEV 4
#define DEV_BASE ((uintptr_t)0x7f2000000000ULL)
#define VMM_BASE ((uintptr_t)0x7e0000000000ULL)
#define SPAN ((uintptr_t)1 << 38)
#define ALIGN ((size_t)512)
#define PITCH_ALIGN ((size_t)512)
#define GRANULARITY ((size_t)2 << 20)
#define DEFAULT_CAPACITY ((size_t)16 << 30)
#define DEFAULT_CONTEXT_BYTES ((size_t)300 << 20)
#define MAGIC_STREAM 0x57524d53u
#define MAGIC_POOL 0x504f4f4cu

struct range {
	uintptr_t addr;
	size_t requested;
	size_t reserved;
};

/* An arena is a sorted array of live ranges inside [base, base + SPAN). */
struct arena {
	uintptr_t base;
	struct range *r;
	size_t n, cap;
};

struct phys {
	CUmemGenericAllocationHandle h;
	size_t size;
	int dev, released, maps;
};

struct mapping {
	uintptr_t va;
	size_t size;
	CUmemGenericAllocationHandle h;
};

struct hostbuf {
	void *p;
	size_t size;
};

struct CUctx_st {
	int dev;
	int refs;
	int created, dead; /* cuCtxCreate_v2's; destroyed */
};

struct CUstream_st {
	unsigned magic;
	int dev;
	int dead;
};

struct CUmemPoolHandle_st {
	unsigned magic;
	int dev;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static size_t capacity;
static size_t used[NDEV];
static struct arena devs[NDEV];
static struct arena vas;
static struct phys *phys;
static size_t nphys, cphys;
static struct mapping *maps;
static size_t nmaps, cmaps;
static struct hostbuf *hosts;
static size_t nhosts, chosts;
static CUmemGenericAllocationHandle next_handle = 0xc0de00000001ULL;
static struct CUctx_st primary[NDEV];
static struct CUmemPoolHandle_st default_pools[NDEV];
static struct CUstream_st **streams;
static size_t nstreams, cstreams;
static struct CUctx_st **ctxs; /* made by cuCtxCreate_v2, dead ones too */
static size_t nctxs, cctxs;

static __thread CUcontext current;
static struct fakecuda_counters books;

/* NVML's view: see the top of the file. */
static const char *nvml_dir;
static size_t context_bytes;
static size_t context[NDEV];
static pid_t published;

static void *grow(void *p, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return p;
	*cap = *cap ? 2 * *cap : 64;
	p = realloc(p, *cap * elem);
	if (p == NULL) {
		fprintf(stderr, "libcuda: out of host memory\n");
		abort();
	}
	return p;
}

static void reset_memory(void)
{
	for (int d = 0; d < NDEV; d++) {
		devs[d].n = 0;
		used[d] = 0;
	}
	vas.n = 0;
	nphys = nmaps = nhosts = 0;
	memset(&books, 0, sizeof(books));
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&mu);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&mu);
}

static void fork_child(void)
{
	reset_memory();
	pthread_mutex_init(&mu, NULL);
}

__attribute__((constructor)) static void setup(void)
{
	for (int d = 0; d < NDEV; d++) {
		devs[d].base = DEV_BASE - (uintptr_t)d * SPAN;
		primary[d].dev = d;
		default_pools[d].magic = MAGIC_POOL;
		default_pools[d].dev = d;
	}
	vas.base = VMM_BASE;
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* env_bytes is the environment variable name as a byte count, else def. */
static size_t env_bytes(const char *name, size_t def)
{
	const char *s = getenv(name);
	char *end;
	unsigned long long v;

	if (s == NULL || *s == '\0')
		return def;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return def;
	return (size_t)v;
}

static void init_locked(void)
{
	const char *s;

	if (initialized)
		return;
	initialized = 1;
	capacity = env_bytes("FAKECUDA_CAPACITY", DEFAULT_CAPACITY);
	context_bytes = env_bytes("FAKECUDA_CONTEXT_BYTES", DEFAULT_CONTEXT_BYTES);
	s = getenv("FAKECUDA_NVML_DIR");
	if (s && *s)
		nvml_dir = strdup(s);
}

/* publish rewrites this process's file in FAKECUDA_NVML_DIR; under the lock. */
static void publish(void)
{
	char path[4096], tmp[4096];
	FILE *f;
	pid_t pid;

	if (nvml_dir == NULL)
		return;
	pid = getpid();
	snprintf(path, sizeof(path), "%s/%d", nvml_dir, (int)pid);
	snprintf(tmp, sizeof(tmp), "%s/.%d.tmp", nvml_dir, (int)pid);
	f = fopen(tmp, "w");
	if (f == NULL) {
		fprintf(stderr, "libcuda: %s: %s\n", tmp, strerror(errno));
		return;
	}
	for (int d = 0; d < NDEV; d++)
		fprintf(f, "%d %zu %zu\n", d, used[d], context[d]);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		fprintf(stderr, "libcuda: %s: %s\n", path, strerror(errno));
		unlink(tmp);
		return;
	}
	published = pid;
}

/* charge_context charges dev's context at its creation; under the lock. */
static void charge_context(int dev)
{
	if (context[dev] != 0 || context_bytes == 0)
		return;
	context[dev] = context_bytes;
	publish();
}

/* unpublish removes the file at exit: NVML lists running processes only. */
__attribute__((destructor)) static void unpublish(void)
{
	char path[4096];

	if (nvml_dir == NULL || published != getpid())
		return;
	snprintf(path, sizeof(path), "%s/%d", nvml_dir, (int)published);
	unlink(path);
}

static void lock(void)
{
	pthread_mutex_lock(&mu);
	init_locked();
}

static void unlock(void)
{
	pthread_mutex_unlock(&mu);
}

static int current_device(void)
{
	return current ? current->dev : 0;
}

#define MAX_TO(peak, v)              \
	do {                         \
		if ((v) > (peak))    \
			(peak) = (v); \
	} while (0)

/* count_device updates the device totals after a change; under the lock. */
static void count_device(void)
{
	books.device_bytes = books.live_bytes + books.physical_bytes;
	MAX_TO(books.peak_live_bytes, books.live_bytes);
	MAX_TO(books.peak_physical_bytes, books.physical_bytes);
	MAX_TO(books.peak_reserved_bytes, books.reserved_bytes);
	MAX_TO(books.peak_mapped_bytes, books.mapped_bytes);
	MAX_TO(books.peak_device_bytes, books.device_bytes);
	publish();
}

/* arena_alloc places reserved bytes first-fit at an align-aligned address
 * (at hint when that is free) and returns it, or 0 when nothing fits. */
static uintptr_t arena_alloc(struct arena *a, size_t requested, size_t reserved,
			     size_t align, uintptr_t hint)
{
	uintptr_t start = a->base, at = 0;
	size_t i;

	if (reserved > SPAN)
		return 0;

	if (hint && hint % align == 0 && hint >= a->base &&
	    hint - a->base <= SPAN - reserved) {
		for (i = 0; i < a->n; i++)
			if (a->r[i].addr + a->r[i].reserved > hint)
				break;
		if (i == a->n || a->r[i].addr >= hint + reserved)
			at = hint;
	}
	if (at == 0) {
		for (i = 0; i <= a->n; i++) {
			uintptr_t cand = (start + align - 1) & ~(uintptr_t)(align - 1);
			uintptr_t end = i < a->n ? a->r[i].addr : a->base + SPAN;
			if (cand <= end && end - cand >= reserved) {
				at = cand;
				break;
			}
			if (i < a->n)
				start = a->r[i].addr + a->r[i].reserved;
		}
		if (at == 0)
			return 0;
	}
	for (i = 0; i < a->n && a->r[i].addr < at; i++)
		;
	a->r = grow(a->r, &a->cap, a->n, sizeof(*a->r));
	memmove(&a->r[i + 1], &a->r[i], (a->n - i) * sizeof(*a->r));
	a->r[i] = (struct range){at, requested, reserved};
	a->n++;
	return at;
}

static long arena_find(struct arena *a, uintptr_t addr)
{
	size_t lo = 0, hi = a->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (a->r[mid].addr == addr)
			return (long)mid;
		if (a->r[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

static void arena_remove(struct arena *a, size_t i)
{
	memmove(&a->r[i], &a->r[i + 1], (a->n - i - 1) * sizeof(*a->r));
	a->n--;
}

/* dev_alloc allocates size bytes on device dev. */
static CUresult dev_alloc(CUdeviceptr *dptr, size_t size, int dev)
{
	uintptr_t at;

	if (dptr == NULL || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= NDEV)
		return CUDA_ERROR_INVALID_DEVICE;
	lock();
	charge_context(dev);
	if (size > capacity || used[dev] > capacity - size) {
		books.failed_allocs++;
		books.failed_alloc_bytes += size;
		unlock();
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	at = arena_alloc(&devs[dev], size, (size + ALIGN - 1) & ~(ALIGN - 1), ALIGN, 0);
	if (at == 0) {
		books.failed_allocs++;
		books.failed_alloc_bytes += size;
		unlock();
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	used[dev] += size;
	books.allocs++;
	books.alloc_bytes += size;
	books.live_bytes += size;
	count_device();
	unlock();
	*dptr = (CUdeviceptr)at;
	return CUDA_SUCCESS;
}

static CUresult dev_free(CUdeviceptr p)
{
	uintptr_t a = (uintptr_t)p;
	int dev;
	long i;

	if (p == 0)
		return CUDA_SUCCESS;
	for (dev = 0; dev < NDEV; dev++)
		if (a >= devs[dev].base && a - devs[dev].base < SPAN)
			break;
	if (dev == NDEV)
		return CUDA_ERROR_INVALID_VALUE;
	lock();
	i = arena_find(&devs[dev], a);
	if (i < 0) {
		unlock();
		return CUDA_ERROR_INVALID_VALUE;
	}
	used[dev] -= devs[dev].r[i].requested;
	books.frees++;
	books.freed_bytes += devs[dev].r[i].requested;
	books.live_bytes -= devs[dev].r[i].requested;
	count_device();
	arena_remove(&devs[dev], (size_t)i);
	unlock();
	return CUDA_SUCCESS;
}

/* stream_device resolves a stream to its device: -1 when the handle is not
 * a live stream. NULL and the special handles are the current device's. */
static int stream_device(CUstream s)
{
	int dev = -1;

	if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
		return current_device();
	lock();
	for (size_t i = 0; i < nstreams; i++)
		if (streams[i] == s && !s->dead)
			dev = s->dev;
	unlock();
	return dev;
}

static int pool_device(CUmemoryPool pool)
{
	if (pool == NULL || pool->magic != MAGIC_POOL)
		return -1;
	return pool->dev;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUstream s)
{
	int dev = stream_device(s);

	if (dev < 0)
		return CUDA_ERROR_INVALID_HANDLE;
	return dev_alloc(dptr, size, dev);
}

static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s)
{
	int dev = pool_device(pool);

	if (dev < 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (stream_device(s) < 0)
		return CUDA_ERROR_INVALID_HANDLE;
	return dev_alloc(dptr, size, dev);
}

static CUresult free_async(CUdeviceptr p, CUstream s)
{
	if (stream_device(s) < 0)
		return CUDA_ERROR_INVALID_HANDLE;
	if (p == 0)
		return CUDA_ERROR_INVALID_VALUE;
	return dev_free(p);
}

static CUresult host_alloc(void **pp, size_t size, unsigned flags)
{
	void *p;

	if (pp == NULL || size == 0 || (flags & ~7u) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	p = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
	if (p == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	lock();
	hosts = grow(hosts, &chosts, nhosts, sizeof(*hosts));
	hosts[nhosts++] = (struct hostbuf){p, size};
	unlock();
	*pp = p;
	return CUDA_SUCCESS;
}

/* ---- initialization, devices, contexts, streams ---- */

API CUresult cuInit(unsigned int flags)
{
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	lock();
	unlock();
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *count)
{
	if (count == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*count = NDEV;
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (ordinal < 0 || ordinal >= NDEV)
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= NDEV)
		return CUDA_ERROR_INVALID_DEVICE;
	lock();
	primary[dev].refs++;
	charge_context(dev);
	unlock();
	*pctx = &primary[dev];
	return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	CUresult r = CUDA_SUCCESS;

	if (dev < 0 || dev >= NDEV)
		return CUDA_ERROR_INVALID_DEVICE;
	lock();
	if (primary[dev].refs == 0)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (--primary[dev].refs == 0) {
		context[dev] = 0;
		publish();
	}
	unlock();
	return r;
}

/* created_ctx reports whether ctx is a live context of cuCtxCreate_v2's;
 * under the lock. */
static int created_ctx(CUcontext ctx)
{
	for (size_t i = 0; i < nctxs; i++)
		if (ctxs[i] == ctx)
			return !ctx->dead;
	return 0;
}

static int primary_ctx(CUcontext ctx)
{
	return ctx >= &primary[0] && ctx < &primary[NDEV];
}

API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	struct CUctx_st *c;

	if (pctx == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= NDEV)
		return CUDA_ERROR_INVALID_DEVICE;
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->dev = dev;
	c->refs = 1;
	c->created = 1;
	lock();
	ctxs = grow(ctxs, &cctxs, nctxs, sizeof(*ctxs));
	ctxs[nctxs++] = c;
	unlock();
	current = c;
	*pctx = c;
	return CUDA_SUCCESS;
}

/* Primary contexts are not destroyed here (cuDevicePrimaryCtxRelease_v2). */
API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	CUresult r = CUDA_ERROR_INVALID_CONTEXT;

	lock();
	if (created_ctx(ctx)) {
		ctx->dead = 1;
		r = CUDA_SUCCESS;
	}
	unlock();
	if (r == CUDA_SUCCESS && current == ctx)
		current = NULL;
	return r;
}

API CUresult cuCtxSetCurrent(CUcontext ctx)
{
	int ok;

	lock();
	ok = ctx == NULL || primary_ctx(ctx) || created_ctx(ctx);
	unlock();
	if (!ok)
		return CUDA_ERROR_INVALID_CONTEXT;
	current = ctx;
	return CUDA_SUCCESS;
}

API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = current ? current : &primary[0];
	return CUDA_SUCCESS;
}

API CUresult cuCtxGetDevice(CUdevice *device)
{
	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*device = current_device();
	return CUDA_SUCCESS;
}

API CUresult cuStreamCreate(CUstream *phStream, unsigned int flags)
{
	struct CUstream_st *s;

	if (phStream == NULL || flags > 1)
		return CUDA_ERROR_INVALID_VALUE;
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	s->magic = MAGIC_STREAM;
	s->dev = current_device();
	lock();
	streams = grow(streams, &cstreams, nstreams, sizeof(*streams));
	streams[nstreams++] = s;
	unlock();
	*phStream = s;
	return CUDA_SUCCESS;
}

/* Destroyed streams are kept (marked dead), so a handle is never reused. */
API CUresult cuStreamDestroy_v2(CUstream hStream)
{
	CUresult r = CUDA_ERROR_INVALID_HANDLE;

	lock();
	for (size_t i = 0; i < nstreams; i++)
		if (streams[i] == hStream && !hStream->dead) {
			hStream->dead = 1;
			r = CUDA_SUCCESS;
		}
	unlock();
	return r;
}

API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	int dev = current_device();

	if (free == NULL || total == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	lock();
	*free = capacity - used[dev];
	*total = capacity;
	unlock();
	return CUDA_SUCCESS;
}

/* ---- device memory ---- */

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	return dev_alloc(dptr, bytesize, current_device());
}

API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	return dev_free(dptr);
}

API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	return alloc_async(dptr, bytesize, hStream);
}

API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	return alloc_async(dptr, bytesize, hStream);
}

API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	return free_async(dptr, hStream);
}

API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	return free_async(dptr, hStream);
}

API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
				     CUstream hStream)
{
	return alloc_from_pool(dptr, bytesize, pool, hStream);
}

API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
					  CUstream hStream)
{
	return alloc_from_pool(dptr, bytesize, pool, hStream);
}

API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
	if (pool_out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= NDEV)
		return CUDA_ERROR_INVALID_DEVICE;
	*pool_out = &default_pools[dev];
	return CUDA_SUCCESS;
}

API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	return dev_alloc(dptr, bytesize, current_device());
}

/* The pitch is WidthInBytes rounded up to 512; the allocation is
 * pitch * Height bytes. */
API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
				size_t Height, unsigned int ElementSizeBytes)
{
	size_t pitch;
	CUresult r;

	if (pPitch == NULL || WidthInBytes == 0 || Height == 0 ||
	    (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
		return CUDA_ERROR_INVALID_VALUE;
	pitch = (WidthInBytes + PITCH_ALIGN - 1) & ~(PITCH_ALIGN - 1);
	if (Height > SIZE_MAX / pitch)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = dev_alloc(dptr, pitch * Height, current_device());
	if (r == CUDA_SUCCESS)
		*pPitch = pitch;
	return r;
}

/* ---- pinned host memory ---- */

API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	return host_alloc(pp, bytesize, 0);
}

API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	return host_alloc(pp, bytesize, Flags);
}

API CUresult cuMemFreeHost(void *p)
{
	size_t i;

	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	lock();
	for (i = 0; i < nhosts && hosts[i].p != p; i++)
		;
	if (i == nhosts) {
		unlock();
		return CUDA_ERROR_INVALID_VALUE;
	}
	hosts[i] = hosts[--nhosts];
	unlock();
	free(p);
	return CUDA_SUCCESS;
}

/* ---- virtual memory management ---- */

static int valid_prop(const CUmemAllocationProp *prop)
{
	return prop != NULL && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
	       prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
}

API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
					   CUmemAllocationGranularity_flags option)
{
	if (granularity == NULL || !valid_prop(prop) || option > 1)
		return CUDA_ERROR_INVALID_VALUE;
	*granularity = GRANULARITY;
	return CUDA_SUCCESS;
}

/* addr is a hint: used when free and aligned, else the range goes first-fit. */
API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
				 unsigned long long flags)
{
	uintptr_t at;

	if (ptr == NULL || size == 0 || size % GRANULARITY != 0 || flags != 0 ||
	    (alignment & (alignment - 1)) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (alignment < GRANULARITY)
		alignment = GRANULARITY;
	lock();
	at = arena_alloc(&vas, size, size, alignment, (uintptr_t)addr);
	if (at == 0) {
		books.failed_reserves++;
		unlock();
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	books.reserves++;
	books.reserved_bytes += size;
	count_device();
	unlock();
	*ptr = (CUdeviceptr)at;
	return CUDA_SUCCESS;
}

/* The range must be one whole reservation with nothing mapped in it. */
API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	long i;

	lock();
	i = arena_find(&vas, (uintptr_t)ptr);
	if (i < 0 || vas.r[i].requested != size) {
		unlock();
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (size_t m = 0; m < nmaps; m++)
		if (maps[m].va >= ptr && maps[m].va < ptr + size) {
			unlock();
			return CUDA_ERROR_INVALID_VALUE;
		}
	arena_remove(&vas, (size_t)i);
	books.address_frees++;
	books.reserved_bytes -= size;
	unlock();
	return CUDA_SUCCESS;
}

static long find_phys(CUmemGenericAllocationHandle h)
{
	for (size_t i = 0; i < nphys; i++)
		if (phys[i].h == h)
			return (long)i;
	return -1;
}

static void drop_phys_locked(size_t i)
{
	used[phys[i].dev] -= phys[i].size;
	phys[i] = phys[--nphys];
}

/* Physical memory on prop->location.id, counted against its capacity until
 * released and unmapped. */
API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			 const CUmemAllocationProp *prop, unsigned long long flags)
{
	int dev;

	if (handle == NULL || size == 0 || size % GRANULARITY != 0 || flags != 0 || !valid_prop(prop))
		return CUDA_ERROR_INVALID_VALUE;
	dev = prop->location.id;
	if (dev < 0 || dev >= NDEV)
		return CUDA_ERROR_INVALID_DEVICE;
	lock();
	charge_context(dev);
	if (size > capacity || used[dev] > capacity - size) {
		books.failed_creates++;
		books.failed_create_bytes += size;
		unlock();
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	phys = grow(phys, &cphys, nphys, sizeof(*phys));
	phys[nphys] = (struct phys){next_handle++, size, dev, 0, 0};
	used[dev] += size;
	books.creates++;
	books.created_bytes += size;
	books.physical_bytes += size;
	count_device();
	*handle = phys[nphys++].h;
	unlock();
	return CUDA_SUCCESS;
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	long i;

	lock();
	i = find_phys(handle);
	if (i < 0 || phys[i].released) {
		unlock();
		return CUDA_ERROR_INVALID_VALUE;
	}
	phys[i].released = 1;
	books.releases++;
	books.released_bytes += phys[i].size;
	books.physical_bytes -= phys[i].size;
	count_device();
	if (phys[i].maps == 0)
		drop_phys_locked((size_t)i);
	unlock();
	return CUDA_SUCCESS;
}

API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
		      unsigned long long flags)
{
	long i, r = -1;

	if (size == 0 || flags != 0 || ptr % GRANULARITY || size % GRANULARITY || offset % GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	lock();
	i = find_phys(handle);
	if (i < 0 || phys[i].released || offset > phys[i].size || size > phys[i].size - offset)
		goto invalid;
	/* Inside one reservation. */
	for (size_t k = 0; k < vas.n; k++)
		if (vas.r[k].addr <= ptr && ptr + size <= vas.r[k].addr + vas.r[k].requested)
			r = (long)k;
	if (r < 0)
		goto invalid;
	for (size_t m = 0; m < nmaps; m++)
		if (maps[m].va < ptr + size && ptr < maps[m].va + maps[m].size)
			goto invalid;
	maps = grow(maps, &cmaps, nmaps, sizeof(*maps));
	maps[nmaps++] = (struct mapping){(uintptr_t)ptr, size, handle};
	phys[i].maps++;
	books.maps++;
	books.mapped_bytes += size;
	count_device();
	unlock();
	return CUDA_SUCCESS;
invalid:
	unlock();
	return CUDA_ERROR_INVALID_VALUE;
}

/* Unmaps every mapping inside [ptr, ptr+size): none may straddle its edges,
 * and there must be at least one. */
API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	size_t m, found = 0;

	lock();
	for (m = 0; m < nmaps; m++) {
		uintptr_t a = maps[m].va, e = maps[m].va + maps[m].size;
		if (a < ptr + size && ptr < e) {
			if (a < ptr || e > ptr + size) {
				unlock();
				return CUDA_ERROR_INVALID_VALUE;
			}
			found++;
		}
	}
	if (found == 0) {
		unlock();
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (m = 0; m < nmaps;) {
		if (maps[m].va >= ptr && maps[m].va < ptr + size) {
			long i = find_phys(maps[m].h);
			if (i >= 0 && --phys[i].maps == 0 && phys[i].released)
				drop_phys_locked((size_t)i);
			books.unmaps++;
			books.mapped_bytes -= maps[m].size;
			maps[m] = maps[--nmaps];
		} else {
			m++;
		}
	}
	unlock();
	return CUDA_SUCCESS;
}

API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	(void)ptr;
	if (size == 0 || desc == NULL || count == 0)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

/* ---- what PyTorch's DriverAPI looks up besides the VMM calls ---- */

API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	if (pStr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	switch (error) {
	case CUDA_SUCCESS:
		*pStr = "no error";
		break;
	case CUDA_ERROR_INVALID_VALUE:
		*pStr = "invalid argument";
		break;
	case CUDA_ERROR_OUT_OF_MEMORY:
		*pStr = "out of memory";
		break;
	case CUDA_ERROR_INVALID_DEVICE:
		*pStr = "invalid device ordinal";
		break;
	case CUDA_ERROR_INVALID_CONTEXT:
		*pStr = "invalid device context";
		break;
	case CUDA_ERROR_INVALID_HANDLE:
		*pStr = "invalid resource handle";
		break;
	case CUDA_ERROR_NOT_FOUND:
		*pStr = "named symbol not found";
		break;
	case CUDA_ERROR_NOT_SUPPORTED:
		*pStr = "operation not supported";
		break;
	default:
		*pStr = NULL;
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	(void)attrib;
	if (pi == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= NDEV)
		return CUDA_ERROR_INVALID_DEVICE;
	*pi = 0;
	return CUDA_SUCCESS;
}

API CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
					  CUmemAllocationHandleType handleType, unsigned long long flags)
{
	(void)shareableHandle, (void)handle, (void)handleType, (void)flags;
	return CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
					    CUmemAllocationHandleType shHandleType)
{
	(void)handle, (void)osHandle, (void)shHandleType;
	return CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
	(void)dstDevice, (void)ui, (void)N, (void)hStream;
	return CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
	(void)stream, (void)addr, (void)value, (void)flags;
	return CUDA_ERROR_NOT_SUPPORTED;
}

API void fakecuda_counters(struct fakecuda_counters *out)
{
	if (out == NULL)
		return;
	lock();
	*out = books;
	unlock();
}

/* ---- cuGetProcAddress: how NVIDIA's runtime finds the driver ---- */

struct proc {
	const char *name; /* the base name, as cuGetProcAddress takes it */
	void *fn, *ptsz;  /* ptsz: the per-thread default stream build, if any */
};

#define P(n, f) {n, (void *)(f), NULL}
#define PS(n, f, s) {n, (void *)(f), (void *)(s)}

static const struct proc procs[] = {
	P("cuInit", cuInit),
	P("cuDeviceGetCount", cuDeviceGetCount),
	P("cuDeviceGet", cuDeviceGet),
	P("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain),
	P("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2),
	P("cuCtxCreate", cuCtxCreate_v2),
	P("cuCtxDestroy", cuCtxDestroy_v2),
	P("cuCtxSetCurrent", cuCtxSetCurrent),
	P("cuCtxGetCurrent", cuCtxGetCurrent),
	P("cuCtxGetDevice", cuCtxGetDevice),
	P("cuStreamCreate", cuStreamCreate),
	P("cuStreamDestroy", cuStreamDestroy_v2),
	P("cuMemGetInfo", cuMemGetInfo_v2),
	P("cuMemAlloc", cuMemAlloc_v2),
	P("cuMemFree", cuMemFree_v2),
	PS("cuMemAllocAsync", cuMemAllocAsync, cuMemAllocAsync_ptsz),
	PS("cuMemFreeAsync", cuMemFreeAsync, cuMemFreeAsync_ptsz),
	PS("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz),
	P("cuDeviceGetDefaultMemPool", cuDeviceGetDefaultMemPool),
	P("cuMemAllocManaged", cuMemAllocManaged),
	P("cuMemAllocPitch", cuMemAllocPitch_v2),
	P("cuMemAllocHost", cuMemAllocHost_v2),
	P("cuMemHostAlloc", cuMemHostAlloc),
	P("cuMemFreeHost", cuMemFreeHost),
	P("cuMemGetAllocationGranularity", cuMemGetAllocationGranularity),
	P("cuMemAddressReserve", cuMemAddressReserve),
	P("cuMemAddressFree", cuMemAddressFree),
	P("cuMemCreate", cuMemCreate),
	P("cuMemRelease", cuMemRelease),
	P("cuMemMap", cuMemMap),
	P("cuMemUnmap", cuMemUnmap),
	P("cuMemSetAccess", cuMemSetAccess),
};

static CUresult get_proc(const char *symbol, void **pfn, cuuint64_t flags,
			 CUdriverProcAddressQueryResult *status)
{
	if (symbol == NULL || pfn == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
		if (strcmp(procs[i].name, symbol) != 0)
			continue;
		*pfn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && procs[i].ptsz
			       ? procs[i].ptsz
			       : procs[i].fn;
		if (status)
			*status = CU_GET_PROC_ADDRESS_SUCCESS;
		return CUDA_SUCCESS;
	}
	*pfn = NULL;
	if (status)
		*status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return CUDA_ERROR_NOT_FOUND;
}

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	(void)cudaVersion;
	return get_proc(symbol, pfn, flags, NULL);
}

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
				 CUdriverProcAddressQueryResult *symbolStatus)
{
	(void)cudaVersion;
	return get_proc(symbol, pfn, flags, symbolStatus);
}
