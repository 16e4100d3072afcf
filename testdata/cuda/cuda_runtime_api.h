/*
 * cuda_runtime_api.h: the subset of the CUDA runtime API that the fake
 * libcudart in this folder implements. Types and values match NVIDIA's
 * header (cudaError_t is an int-sized enum), so binaries built against it
 * call the real ABI.
 */
#ifndef FAKE_CUDA_RUNTIME_API_H
#define FAKE_CUDA_RUNTIME_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInvalidDevice = 101,
} cudaError_t;

cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaRuntimeGetVersion(int *runtimeVersion);

#ifdef __cplusplus
}
#endif

#endif
