/*
 * dlopen_runtime: not linked against libcudart. Sleeps 300 ms, then dlopen()s
 * the runtime ($FAKECUDA_LIB, or ../lib/libcudart.so.12 next to this
 * executable), looks up cudaMalloc/cudaFree with dlsym and, in loaded_alloc,
 * allocates 10 buffers of (i+1) MiB and frees the even-numbered ones: 5 stay
 * live (2+4+6+8+10 MiB = 31457280 bytes).
 */
#define _GNU_SOURCE
#include "truth.h"

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NBUFS 10

typedef cudaError_t (*malloc_fn)(void **, size_t);
typedef cudaError_t (*free_fn)(void *);

static malloc_fn p_cudaMalloc;
static free_fn p_cudaFree;
static void *bufs[NBUFS];

NOINLINE void loaded_alloc(void)
{
	for (int i = 0; i < NBUFS; i++)
		check_cuda(TRUTH_MALLOC_VIA(p_cudaMalloc, &bufs[i], (size_t)(i + 1) * MiB), __func__);
	for (int i = 0; i < NBUFS; i += 2) {
		check_cuda(TRUTH_FREE_VIA(p_cudaFree, bufs[i]), __func__);
		bufs[i] = NULL;
	}
}

int main(void)
{
	char exe[PATH_MAX], path[PATH_MAX + 32];
	const char *lib = getenv("FAKECUDA_LIB");
	void *h;
	ssize_t n;

	truth_init("dlopen_runtime");
	if (lib == NULL || *lib == '\0') {
		n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (n < 0) {
			perror("readlink /proc/self/exe");
			return 3;
		}
		exe[n] = '\0';
		snprintf(path, sizeof(path), "%s/../lib/libcudart.so.12", dirname(exe));
		lib = path;
	}
	truth_sleep_ms(300);
	h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 3;
	}
	p_cudaMalloc = (malloc_fn)dlsym(h, "cudaMalloc");
	p_cudaFree = (free_fn)dlsym(h, "cudaFree");
	if (p_cudaMalloc == NULL || p_cudaFree == NULL) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return 3;
	}
	loaded_alloc();
	return 0;
}
