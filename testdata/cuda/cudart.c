/*
 * cudart.c: a fake CUDA runtime with the real libcudart ABI for the
 * allocation API, for tests on machines without a GPU.
 *
 * As NVIDIA's runtime does, it owns no memory: at its first call it
 * dlopen()s the driver, libcuda.so.1 (the fake one in this folder, see
 * libcuda.c), resolves the entry points through the driver's
 * cuGetProcAddress_v2 (dlsym when the driver lacks it) and calls them: every
 * allocation is a nested driver call (cudaMalloc -> cuMemAlloc_v2, ...). It
 * is never linked against libcuda and never calls it by name through a PLT.
 * Several copies of the runtime in one process (a library with the runtime
 * linked in, beside libcudart.so) share the one driver, hence its devices.
 *
 * The driver is found as "libcuda.so.1" by the dynamic loader (the build
 * gives the runtime and the executables a RUNPATH to build/lib), else
 * $FAKECUDA_DRIVER, else next to this runtime's file or in ../lib from it.
 * Without a driver every call returns cudaErrorInsufficientDriver (35), as
 * NVIDIA's runtime does.
 *
 * Exceptions kept from the runtime before the driver existed: cudaMalloc(p, 0)
 * sets *p = NULL and returns 0 without calling the driver; cudaFree(NULL) and
 * cudaFreeHost(NULL) return 0 without calling it.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <cuda.h>

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))
#define NDEV_MAX 64

static struct {
	CUresult (*init)(unsigned);
	CUresult (*deviceGetCount)(int *);
	CUresult (*deviceGet)(CUdevice *, int);
	CUresult (*primaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*ctxSetCurrent)(CUcontext);
	CUresult (*ctxGetDevice)(CUdevice *);
	CUresult (*streamCreate)(CUstream *, unsigned);
	CUresult (*streamDestroy)(CUstream);
	CUresult (*memGetInfo)(size_t *, size_t *);
	CUresult (*memAlloc)(CUdeviceptr *, size_t);
	CUresult (*memFree)(CUdeviceptr);
	CUresult (*memAllocAsync)(CUdeviceptr *, size_t, CUstream);
	CUresult (*memFreeAsync)(CUdeviceptr, CUstream);
	CUresult (*memAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
	CUresult (*memAllocAsyncPtsz)(CUdeviceptr *, size_t, CUstream);
	CUresult (*memFreeAsyncPtsz)(CUdeviceptr, CUstream);
	CUresult (*memAllocFromPoolAsyncPtsz)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
	CUresult (*deviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
	CUresult (*memAllocManaged)(CUdeviceptr *, size_t, unsigned);
	CUresult (*memAllocPitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
	CUresult (*memAllocHost)(void **, size_t);
	CUresult (*memHostAlloc)(void **, size_t, unsigned);
	CUresult (*memFreeHost)(void *);
} drv;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int drv_ok;
static pthread_mutex_t retain_mu = PTHREAD_MUTEX_INITIALIZER;
static CUcontext retained[NDEV_MAX];

static __thread cudaError_t last_error;

static void *open_driver(void)
{
	const char *env = getenv("FAKECUDA_DRIVER");
	char self[PATH_MAX], path[PATH_MAX + 32];
	Dl_info info;
	void *h;

	if (env && *env && (h = dlopen(env, RTLD_NOW | RTLD_GLOBAL)) != NULL)
		return h;
	if ((h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) != NULL)
		return h;
	/* Next to this runtime (a shared runtime in build/lib), or in ../lib
	 * from the executable the runtime is linked into. */
	self[0] = '\0';
	if (dladdr((void *)open_driver, &info) && info.dli_fname && info.dli_fname[0] == '/')
		snprintf(self, sizeof(self), "%s", info.dli_fname);
	if (self[0] == '\0') {
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		self[n > 0 ? n : 0] = '\0';
	}
	if (self[0] == '\0')
		return NULL;
	dirname(self);
	snprintf(path, sizeof(path), "%s/libcuda.so.1", self);
	if ((h = dlopen(path, RTLD_NOW | RTLD_GLOBAL)) != NULL)
		return h;
	snprintf(path, sizeof(path), "%s/../lib/libcuda.so.1", self);
	return dlopen(path, RTLD_NOW | RTLD_GLOBAL);
}

static void load_driver(void)
{
	CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
	void *h = open_driver();
	int missing = 0;

	if (h == NULL)
		return;
	gpa = (CUresult(*)(const char *, void **, int, cuuint64_t,
			   CUdriverProcAddressQueryResult *))dlsym(h, "cuGetProcAddress_v2");

	/* base: the name cuGetProcAddress takes; exact: the exported symbol. */
#define RESOLVE(field, base, exact, flags)                                                   \
	do {                                                                                 \
		void *fn_ = NULL;                                                            \
		CUdriverProcAddressQueryResult st_;                                          \
		if (gpa == NULL || gpa(base, &fn_, 12040, flags, &st_) != CUDA_SUCCESS)      \
			fn_ = dlsym(h, exact);                                               \
		if (fn_ == NULL)                                                             \
			missing++;                                                           \
		*(void **)&drv.field = fn_;                                                  \
	} while (0)
#define PTDS CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM

	RESOLVE(init, "cuInit", "cuInit", 0);
	RESOLVE(deviceGetCount, "cuDeviceGetCount", "cuDeviceGetCount", 0);
	RESOLVE(deviceGet, "cuDeviceGet", "cuDeviceGet", 0);
	RESOLVE(primaryCtxRetain, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", 0);
	RESOLVE(ctxSetCurrent, "cuCtxSetCurrent", "cuCtxSetCurrent", 0);
	RESOLVE(ctxGetDevice, "cuCtxGetDevice", "cuCtxGetDevice", 0);
	RESOLVE(streamCreate, "cuStreamCreate", "cuStreamCreate", 0);
	RESOLVE(streamDestroy, "cuStreamDestroy", "cuStreamDestroy_v2", 0);
	RESOLVE(memGetInfo, "cuMemGetInfo", "cuMemGetInfo_v2", 0);
	RESOLVE(memAlloc, "cuMemAlloc", "cuMemAlloc_v2", 0);
	RESOLVE(memFree, "cuMemFree", "cuMemFree_v2", 0);
	RESOLVE(memAllocAsync, "cuMemAllocAsync", "cuMemAllocAsync", 0);
	RESOLVE(memFreeAsync, "cuMemFreeAsync", "cuMemFreeAsync", 0);
	RESOLVE(memAllocFromPoolAsync, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", 0);
	RESOLVE(memAllocAsyncPtsz, "cuMemAllocAsync", "cuMemAllocAsync_ptsz", PTDS);
	RESOLVE(memFreeAsyncPtsz, "cuMemFreeAsync", "cuMemFreeAsync_ptsz", PTDS);
	RESOLVE(memAllocFromPoolAsyncPtsz, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz", PTDS);
	RESOLVE(deviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", "cuDeviceGetDefaultMemPool", 0);
	RESOLVE(memAllocManaged, "cuMemAllocManaged", "cuMemAllocManaged", 0);
	RESOLVE(memAllocPitch, "cuMemAllocPitch", "cuMemAllocPitch_v2", 0);
	RESOLVE(memAllocHost, "cuMemAllocHost", "cuMemAllocHost_v2", 0);
	RESOLVE(memHostAlloc, "cuMemHostAlloc", "cuMemHostAlloc", 0);
	RESOLVE(memFreeHost, "cuMemFreeHost", "cuMemFreeHost", 0);
#undef RESOLVE
#undef PTDS
	if (missing == 0 && drv.init(0) == CUDA_SUCCESS)
		drv_ok = 1;
}

static cudaError_t set_error(cudaError_t e)
{
	if (e != cudaSuccess)
		last_error = e;
	return e;
}

/* driver returns 0 when the driver is loaded, else the error to return. */
static cudaError_t driver(void)
{
	pthread_once(&once, load_driver);
	return drv_ok ? cudaSuccess : set_error(cudaErrorInsufficientDriver);
}

static cudaError_t from_driver(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
		return cudaSuccess;
	case CUDA_ERROR_INVALID_VALUE:
		return set_error(cudaErrorInvalidValue);
	case CUDA_ERROR_OUT_OF_MEMORY:
		return set_error(cudaErrorMemoryAllocation);
	case CUDA_ERROR_INVALID_DEVICE:
		return set_error(cudaErrorInvalidDevice);
	case CUDA_ERROR_INVALID_HANDLE:
		return set_error(cudaErrorInvalidResourceHandle);
	default:
		return set_error(cudaErrorUnknown);
	}
}

#define NEED_DRIVER()                          \
	do {                                   \
		cudaError_t e_ = driver();     \
		if (e_ != cudaSuccess)         \
			return e_;             \
	} while (0)

/* ---- device memory ---- */

API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	CUdeviceptr d;
	CUresult r;

	if (devPtr == NULL)
		return set_error(cudaErrorInvalidValue);
	if (size == 0) {
		*devPtr = NULL;
		return cudaSuccess;
	}
	NEED_DRIVER();
	r = drv.memAlloc(&d, size);
	if (r == CUDA_SUCCESS)
		*devPtr = (void *)(uintptr_t)d;
	return from_driver(r);
}

/* Any device pointer: cudaMalloc, cudaMallocAsync, cudaMallocManaged... */
API cudaError_t cudaFree(void *devPtr)
{
	if (devPtr == NULL)
		return cudaSuccess;
	NEED_DRIVER();
	return from_driver(drv.memFree((CUdeviceptr)(uintptr_t)devPtr));
}

/* out_ptr takes &d: the driver call, an argument beside it, must run first. */
static cudaError_t out_ptr(CUresult r, const CUdeviceptr *d, void **p)
{
	if (r == CUDA_SUCCESS)
		*p = (void *)(uintptr_t)*d;
	return from_driver(r);
}

API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	CUdeviceptr d;

	if (devPtr == NULL)
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	return out_ptr(drv.memAllocAsync(&d, size, hStream), &d, devPtr);
}

API cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
	CUdeviceptr d;

	if (devPtr == NULL)
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	return out_ptr(drv.memAllocAsyncPtsz(&d, size, hStream), &d, devPtr);
}

API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	NEED_DRIVER();
	return from_driver(drv.memFreeAsync((CUdeviceptr)(uintptr_t)devPtr, hStream));
}

API cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
	NEED_DRIVER();
	return from_driver(drv.memFreeAsyncPtsz((CUdeviceptr)(uintptr_t)devPtr, hStream));
}

API cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
					cudaStream_t stream)
{
	CUdeviceptr d;

	if (ptr == NULL)
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	return out_ptr(drv.memAllocFromPoolAsync(&d, size, memPool, stream), &d, ptr);
}

API cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
					     cudaStream_t stream)
{
	CUdeviceptr d;

	if (ptr == NULL)
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	return out_ptr(drv.memAllocFromPoolAsyncPtsz(&d, size, memPool, stream), &d, ptr);
}

API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
	NEED_DRIVER();
	return from_driver(drv.deviceGetDefaultMemPool(memPool, device));
}

API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	CUdeviceptr d;

	if (devPtr == NULL)
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	return out_ptr(drv.memAllocManaged(&d, size, flags), &d, devPtr);
}

/* One driver call: cuMemAllocPitch_v2, pitch * height bytes. */
API cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
	CUdeviceptr d;

	if (devPtr == NULL || pitch == NULL)
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	return out_ptr(drv.memAllocPitch(&d, pitch, width, height, 16), &d, devPtr);
}

/* extent is passed by value (24 bytes: on the stack in the SysV ABI). One
 * pitched driver allocation of height * depth rows: pitch * height * depth. */
API cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
	CUdeviceptr d;
	size_t pitch;
	CUresult r;

	if (pitchedDevPtr == NULL || (extent.depth && extent.height > SIZE_MAX / extent.depth))
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	r = drv.memAllocPitch(&d, &pitch, extent.width, extent.height * extent.depth, 16);
	if (r == CUDA_SUCCESS) {
		pitchedDevPtr->ptr = (void *)(uintptr_t)d;
		pitchedDevPtr->pitch = pitch;
		pitchedDevPtr->xsize = extent.width;
		pitchedDevPtr->ysize = extent.height;
	}
	return from_driver(r);
}

/* ---- pinned host memory ---- */

API cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	NEED_DRIVER();
	return from_driver(drv.memAllocHost(ptr, size));
}

API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	NEED_DRIVER();
	return from_driver(drv.memHostAlloc(pHost, size, flags));
}

API cudaError_t cudaFreeHost(void *ptr)
{
	if (ptr == NULL)
		return cudaSuccess;
	NEED_DRIVER();
	return from_driver(drv.memFreeHost(ptr));
}

/* ---- devices and streams ---- */

API cudaError_t cudaSetDevice(int device)
{
	CUdevice dev;
	CUcontext ctx;
	CUresult r;

	NEED_DRIVER();
	r = drv.deviceGet(&dev, device);
	if (r != CUDA_SUCCESS || dev >= NDEV_MAX)
		return set_error(cudaErrorInvalidDevice);
	/* The runtime retains each primary context once. */
	pthread_mutex_lock(&retain_mu);
	if (retained[dev] == NULL && (r = drv.primaryCtxRetain(&retained[dev], dev)) != CUDA_SUCCESS) {
		pthread_mutex_unlock(&retain_mu);
		return from_driver(r);
	}
	ctx = retained[dev];
	pthread_mutex_unlock(&retain_mu);
	return from_driver(drv.ctxSetCurrent(ctx));
}

API cudaError_t cudaGetDevice(int *device)
{
	if (device == NULL)
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	return from_driver(drv.ctxGetDevice(device));
}

API cudaError_t cudaGetDeviceCount(int *count)
{
	if (count == NULL)
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	return from_driver(drv.deviceGetCount(count));
}

API cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
	if (free == NULL || total == NULL)
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	return from_driver(drv.memGetInfo(free, total));
}

API cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	if (pStream == NULL)
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	return from_driver(drv.streamCreate(pStream, 0));
}

API cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	NEED_DRIVER();
	return from_driver(drv.streamDestroy(stream));
}

/* Nothing runs on the fake device: every stream and event is complete. */
API cudaError_t cudaDeviceSynchronize(void)
{
	return cudaSuccess;
}

API cudaError_t cudaDriverGetVersion(int *driverVersion)
{
	if (driverVersion == NULL)
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	*driverVersion = 12040;
	return cudaSuccess;
}

/* Offsets in NVIDIA's struct cudaDeviceProp (CUDA 12, 1032 bytes): name[256]
 * at 0, uuid and luid up to 284, totalGlobalMem (size_t) at 288, major and
 * minor at 360 and 364, multiProcessorCount at 388. Only these are written.
 * totalGlobalMem is the driver's capacity (FAKECUDA_CAPACITY). */
API cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp *prop, int device)
{
	char *p = (char *)prop;
	size_t free, total;
	int n, cc[2] = {8, 0}, sms = 108;
	CUresult r;

	if (prop == NULL)
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	if ((r = drv.deviceGetCount(&n)) != CUDA_SUCCESS)
		return from_driver(r);
	if (device < 0 || device >= n)
		return set_error(cudaErrorInvalidDevice);
	if ((r = drv.memGetInfo(&free, &total)) != CUDA_SUCCESS)
		return from_driver(r);
	snprintf(p, 256, "Fake CUDA device %d", device);
	memcpy(p + 288, &total, sizeof(total));
	memcpy(p + 360, cc, sizeof(cc));
	memcpy(p + 388, &sms, sizeof(sms));
	return cudaSuccess;
}

API cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	return cudaGetDeviceProperties_v2(prop, device);
}

/* NVIDIA's range on current GPUs: 0 (least) to -5 (greatest). */
API cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
	NEED_DRIVER();
	if (leastPriority)
		*leastPriority = 0;
	if (greatestPriority)
		*greatestPriority = -5;
	return cudaSuccess;
}

/* No peer access, IPC, copies or stream-ordered pool attributes: each fails
 * with cudaErrorNotSupported (801), which callers report as an error. */
API cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
	(void)peerDevice, (void)flags;
	NEED_DRIVER();
	return set_error(cudaErrorNotSupported);
}

API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
	(void)priority;
	if (pStream == NULL)
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	return from_driver(drv.streamCreate(pStream, flags));
}

API cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority)
{
	(void)hStream;
	if (priority == NULL)
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	*priority = 0;
	return cudaSuccess;
}

API cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	(void)stream;
	NEED_DRIVER();
	return cudaSuccess;
}

API cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	(void)stream;
	NEED_DRIVER();
	return cudaSuccess;
}

API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	(void)stream, (void)flags;
	if (event == NULL)
		return set_error(cudaErrorInvalidResourceHandle);
	NEED_DRIVER();
	return cudaSuccess;
}

/* Nothing is ever captured into a graph. */
API cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
	(void)stream;
	if (pCaptureStatus == NULL)
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	*pCaptureStatus = cudaStreamCaptureStatusNone;
	return cudaSuccess;
}

static __thread enum cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;

API cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
	enum cudaStreamCaptureMode old = capture_mode;

	if (mode == NULL)
		return set_error(cudaErrorInvalidValue);
	capture_mode = *mode;
	*mode = old;
	return cudaSuccess;
}

/* Events: host objects, complete as soon as recorded. */
struct CUevent_st {
	unsigned flags;
};

API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	if (event == NULL || flags > 0x0f)
		return set_error(cudaErrorInvalidValue);
	NEED_DRIVER();
	if ((*event = malloc(sizeof(**event))) == NULL)
		return set_error(cudaErrorMemoryAllocation);
	(*event)->flags = flags;
	return cudaSuccess;
}

API cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	if (event == NULL)
		return set_error(cudaErrorInvalidResourceHandle);
	free(event);
	return cudaSuccess;
}

API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	(void)stream;
	if (event == NULL)
		return set_error(cudaErrorInvalidResourceHandle);
	NEED_DRIVER();
	return cudaSuccess;
}

API cudaError_t cudaEventQuery(cudaEvent_t event)
{
	if (event == NULL)
		return set_error(cudaErrorInvalidResourceHandle);
	return cudaSuccess;
}

API cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	if (event == NULL)
		return set_error(cudaErrorInvalidResourceHandle);
	return cudaSuccess;
}

API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	if (ms == NULL)
		return set_error(cudaErrorInvalidValue);
	if (start == NULL || end == NULL)
		return set_error(cudaErrorInvalidResourceHandle);
	*ms = 0;
	return cudaSuccess;
}

/* Device memory is never mapped in the process: no copies. */
API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	(void)dst, (void)src, (void)count, (void)kind;
	NEED_DRIVER();
	return set_error(cudaErrorNotSupported);
}

API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
				cudaStream_t stream)
{
	(void)dst, (void)src, (void)count, (void)kind, (void)stream;
	NEED_DRIVER();
	return set_error(cudaErrorNotSupported);
}

API cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
				    cudaStream_t stream)
{
	(void)dst, (void)dstDevice, (void)src, (void)srcDevice, (void)count, (void)stream;
	NEED_DRIVER();
	return set_error(cudaErrorNotSupported);
}

API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
	(void)handle, (void)devPtr;
	NEED_DRIVER();
	return set_error(cudaErrorNotSupported);
}

API cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
	(void)devPtr, (void)handle, (void)flags;
	NEED_DRIVER();
	return set_error(cudaErrorNotSupported);
}

API cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
	(void)devPtr;
	NEED_DRIVER();
	return set_error(cudaErrorNotSupported);
}

API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
	(void)memPool, (void)attr, (void)value;
	NEED_DRIVER();
	return set_error(cudaErrorNotSupported);
}

API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
	(void)memPool, (void)attr, (void)value;
	NEED_DRIVER();
	return set_error(cudaErrorNotSupported);
}

API cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const struct cudaMemAccessDesc *descList,
				     size_t count)
{
	(void)memPool, (void)descList, (void)count;
	NEED_DRIVER();
	return set_error(cudaErrorNotSupported);
}

API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
	(void)memPool, (void)minBytesToKeep;
	NEED_DRIVER();
	return set_error(cudaErrorNotSupported);
}

API cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
	if (runtimeVersion == NULL)
		return set_error(cudaErrorInvalidValue);
	*runtimeVersion = 12040;
	return cudaSuccess;
}

/* ---- errors ---- */

API const char *cudaGetErrorString(cudaError_t error)
{
	switch (error) {
	case cudaSuccess:
		return "no error";
	case cudaErrorInvalidValue:
		return "invalid argument";
	case cudaErrorMemoryAllocation:
		return "out of memory";
	case cudaErrorInsufficientDriver:
		return "CUDA driver version is insufficient for CUDA runtime version";
	case cudaErrorInvalidDevice:
		return "invalid device ordinal";
	case cudaErrorInvalidResourceHandle:
		return "invalid resource handle";
	case cudaErrorNotReady:
		return "device not ready";
	case cudaErrorNotSupported:
		return "operation not supported";
	case cudaErrorUnknown:
		return "unknown error";
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
	case cudaErrorInsufficientDriver:
		return "cudaErrorInsufficientDriver";
	case cudaErrorInvalidDevice:
		return "cudaErrorInvalidDevice";
	case cudaErrorInvalidResourceHandle:
		return "cudaErrorInvalidResourceHandle";
	case cudaErrorNotReady:
		return "cudaErrorNotReady";
	case cudaErrorNotSupported:
		return "cudaErrorNotSupported";
	case cudaErrorUnknown:
		return "cudaErrorUnknown";
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
