/*
 * reload: a runtime unloaded and loaded again. Not linked against libcudart:
 * dlopen()s it ($FAKECUDA_LIB, or ../lib/libcudart.so.12 next to this
 * executable) and, in first_load, allocates 1 MiB and 2 MiB + 1 and frees the
 * first; dlclose()s it and checks that it is no longer mapped (exit 4 if it
 * still is: then this would test nothing); reserves the address range it was
 * mapped at, so the second dlopen() maps it elsewhere; dlopen()s it again and,
 * in second_load, allocates 3 MiB and 4 MiB + 5, frees the 2 MiB + 1 buffer of
 * the first load, then the 3 MiB one. The driver (dlopen()ed by the runtime,
 * never closed) keeps its state across the reload.
 * Totals: 4 allocations, 3 frees, 10485766 bytes; peak 9437190 (after the
 * 4 MiB + 5 allocation), live at end 4194309.
 */
#define _GNU_SOURCE
#include "truth.h"

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef cudaError_t (*malloc_fn)(void **, size_t);
typedef cudaError_t (*free_fn)(void *);

static malloc_fn p_cudaMalloc;
static free_fn p_cudaFree;
static void *kept;

/* load dlopen()s lib and looks up the two entry points; exits 3 on failure. */
static void *load(const char *lib)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		fprintf(stderr, "reload: dlopen: %s\n", dlerror());
		exit(3);
	}
	p_cudaMalloc = (malloc_fn)dlsym(h, "cudaMalloc");
	p_cudaFree = (free_fn)dlsym(h, "cudaFree");
	if (p_cudaMalloc == NULL || p_cudaFree == NULL) {
		fprintf(stderr, "reload: dlsym: %s\n", dlerror());
		exit(3);
	}
	return h;
}

/* mapped_range finds the lowest and highest address at which a file whose
 * name contains needle is mapped; 0 when none is. */
static int mapped_range(const char *needle, unsigned long *lo, unsigned long *hi)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[PATH_MAX + 128];
	int found = 0;

	if (f == NULL) {
		perror("reload: /proc/self/maps");
		exit(3);
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		unsigned long a, b;
		if (strstr(line, needle) == NULL || sscanf(line, "%lx-%lx", &a, &b) != 2)
			continue;
		if (!found || a < *lo)
			*lo = a;
		if (!found || b > *hi)
			*hi = b;
		found = 1;
	}
	fclose(f);
	return found;
}

NOINLINE void first_load(void)
{
	void *a;
	check_cuda(TRUTH_MALLOC_VIA(p_cudaMalloc, &a, 1 * MiB), __func__);
	check_cuda(TRUTH_MALLOC_VIA(p_cudaMalloc, &kept, 2 * MiB + 1), __func__);
	check_cuda(TRUTH_FREE_VIA(p_cudaFree, a), __func__);
}

NOINLINE void second_load(void)
{
	void *c, *d;
	check_cuda(TRUTH_MALLOC_VIA(p_cudaMalloc, &c, 3 * MiB), __func__);
	check_cuda(TRUTH_MALLOC_VIA(p_cudaMalloc, &d, 4 * MiB + 5), __func__);
	check_cuda(TRUTH_FREE_VIA(p_cudaFree, kept), __func__);
	kept = NULL;
	check_cuda(TRUTH_FREE_VIA(p_cudaFree, c), __func__);
}

int main(void)
{
	char exe[PATH_MAX], path[PATH_MAX + 32];
	const char *lib = getenv("FAKECUDA_LIB");
	const char *base;
	unsigned long lo = 0, hi = 0, lo2 = 0, hi2 = 0;
	void *h, *hole;
	ssize_t n;

	truth_init("reload");
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
	base = strrchr(lib, '/') ? strrchr(lib, '/') + 1 : lib;

	h = load(lib);
	if (!mapped_range(base, &lo, &hi)) {
		fprintf(stderr, "reload: %s is not mapped after dlopen\n", base);
		return 3;
	}
	first_load();
	if (dlclose(h) != 0) {
		fprintf(stderr, "reload: dlclose: %s\n", dlerror());
		return 3;
	}
	if (mapped_range(base, &lo2, &hi2)) {
		fprintf(stderr, "reload: %s is still mapped after dlclose\n", base);
		return 4;
	}
	/* Keep the old range taken: the second load must land elsewhere. */
	hole = mmap((void *)lo, hi - lo, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (hole == MAP_FAILED) {
		perror("reload: mmap the old range");
		return 3;
	}

	h = load(lib);
	if (!mapped_range(base, &lo2, &hi2) || lo2 == lo) {
		fprintf(stderr, "reload: second load not mapped elsewhere (%lx, was %lx)\n", lo2, lo);
		return 4;
	}
	second_load();
	printf("reload: first load at %#lx, second at %#lx\n", lo, lo2);
	return 0;
}
