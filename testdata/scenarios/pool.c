/* pool.c: see pool.h. */
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>

static void seg_alloc(const char *func, int ret, void *ptr, size_t size, int device, int retry)
{
	truth_segment_alloc(func, ret, TRUTH_U64_(ptr), size, device, retry);
}

static void seg_free(const char *func, int ret, void *ptr, int device)
{
	(void)device;
	truth_free(func, (cudaError_t)ret, ptr);
}

static void to_truth(const struct c10_pool_state *s, struct truth_pool_state *t)
{
	*t = (struct truth_pool_state){
		.device = s->device,
		.requested = s->requested,
		.rounded = s->rounded,
		.segment_size = s->segment_size,
		.reserved_bytes = s->reserved_bytes,
		.allocated_bytes = s->allocated_bytes,
		.requested_bytes = s->requested_bytes,
		.cached_free_bytes = s->cached_free_bytes,
		.largest_free_range = s->largest_free_range,
		.segments = s->segments,
		.device_free_bytes = s->device_free_bytes,
		.device_total_bytes = s->device_total_bytes,
		.released_bytes = s->released_bytes,
		.released_segments = s->released_segments,
		.retry_succeeded = s->retry_succeeded,
	};
}

static void retry(const struct c10_pool_state *s)
{
	struct truth_pool_state t;

	to_truth(s, &t);
	truth_pool_retry(&t);
}

static void vmm_reserve(const char *func, int ret, unsigned long long ptr, size_t size)
{
	truth_reserve(func, ret, ptr, size);
}

static void vmm_unreserve(const char *func, int ret, unsigned long long ptr, size_t size)
{
	truth_unreserve(func, ret, ptr, size);
}

static void vmm_create(const char *func, int ret, unsigned long long handle, size_t size,
		       int device)
{
	truth_create(func, ret, handle, size, device);
}

static void vmm_release(const char *func, int ret, unsigned long long handle)
{
	truth_release(func, ret, handle);
}

static void vmm_map(const char *func, int ret, unsigned long long ptr, size_t size,
		    unsigned long long handle)
{
	truth_map(func, ret, ptr, size, handle);
}

static void vmm_unmap(const char *func, int ret, unsigned long long ptr, size_t size)
{
	truth_unmap(func, ret, ptr, size);
}

static const struct c10_observer observer = {seg_alloc,	  seg_free,    retry,	vmm_reserve,
					     vmm_unreserve, vmm_create, vmm_release, vmm_map,
					     vmm_unmap};

void pool_truth_init(const char *scenario)
{
	truth_init(scenario);
	c10_set_observer(&observer);
}

void pool_record_oom(const char *func)
{
	struct c10_pool_state s;
	struct truth_pool_state t;

	if (c10_last_oom(&s) != 0)
		return;
	to_truth(&s, &t);
	truth_block_oom(func, &t);
}

void pool_print_stats(const char *when)
{
	struct c10_memory_stats st;

	if (c10_memory_stats(0, &st) != 0)
		return;
	fprintf(stderr,
		"%s: reserved %zu allocated %zu requested %zu cached_free %zu largest_free %zu "
		"segments %zu cudaMalloc %zu (failed %zu) cudaFree %zu retries %zu ooms %zu\n",
		when, st.reserved_bytes, st.allocated_bytes, st.requested_bytes,
		st.cached_free_bytes, st.largest_free_range, st.segments, st.cuda_malloc_calls,
		st.cuda_malloc_failures, st.cuda_free_calls, st.alloc_retries, st.ooms);
}

void pool_write_stats(const char *when)
{
	const char *truth = getenv("VRAMPROF_TRUTH");
	struct c10_memory_stats st;
	char path[4096];
	FILE *f;

	if (truth == NULL || c10_memory_stats(0, &st) != 0)
		return;
	snprintf(path, sizeof(path), "%s-allocator.json", truth);
	f = fopen(path, "w");
	if (f == NULL) {
		perror(path);
		exit(3);
	}
	fprintf(f,
		"{\"when\": \"%s\", \"reserved_bytes\": %zu, \"allocated_bytes\": %zu, "
		"\"requested_bytes\": %zu, \"cached_free_bytes\": %zu, "
		"\"largest_free_range\": %zu, \"segments\": %zu, \"active_blocks\": %zu, "
		"\"free_blocks\": %zu, \"cuda_malloc_calls\": %zu}\n",
		when, st.reserved_bytes, st.allocated_bytes, st.requested_bytes,
		st.cached_free_bytes, st.largest_free_range, st.segments, st.active_blocks,
		st.free_blocks, st.cuda_malloc_calls);
	if (fclose(f) != 0) {
		perror(path);
		exit(3);
	}
}

void pool_fail(const char *func, size_t size)
{
	fprintf(stderr, "%s: c10_alloc(%zu) failed\n", func, size);
	exit(3);
}
