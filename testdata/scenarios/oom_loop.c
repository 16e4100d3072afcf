/*
 * oom_loop: a training loop that catches out-of-memory and retries, for the
 * rate limit of vramprof's out-of-memory moment reports. FAKECUDA_CAPACITY
 * defaults to 1 GiB here. hold_weights allocates 512 MiB and keeps it;
 * retry_loop asks for 1 GiB OOM_LOOP_COUNT times (default 300), OOM_LOOP_SLEEP_MS
 * apart (default 5): every request fails (cudaErrorMemoryAllocation);
 * release frees the 512 MiB; the truth is written and the process exits 0.
 * Totals: 1 allocation (536870912 bytes, the peak), OOM_LOOP_COUNT failed,
 * 1 free, live at end 0.
 */
#include "truth.h"

#include <stdio.h>
#include <stdlib.h>

static void *weights;

NOINLINE void hold_weights(void)
{
	check_cuda(TRUTH_MALLOC(&weights, 512 * MiB), __func__);
}

NOINLINE void retry_loop(int count, long sleep_ms)
{
	for (int i = 0; i < count; i++) {
		void *p = NULL;

		if (TRUTH_MALLOC(&p, 1024 * MiB) != cudaErrorMemoryAllocation) {
			fprintf(stderr, "retry_loop: 1 GiB did not fail with out-of-memory\n");
			exit(3);
		}
		truth_sleep_ms(sleep_ms);
	}
}

NOINLINE void release(void)
{
	check_cuda(TRUTH_FREE(weights), __func__);
}

static long env_long(const char *name, long def)
{
	const char *v = getenv(name);

	return v != NULL && *v != '\0' ? strtol(v, NULL, 10) : def;
}

int main(void)
{
	setenv("FAKECUDA_CAPACITY", "1073741824", 0);
	truth_init("oom_loop");
	hold_weights();
	retry_loop((int)env_long("OOM_LOOP_COUNT", 300), env_long("OOM_LOOP_SLEEP_MS", 5));
	release();
	if (truth_write() != 0)
		return 3;
	return 0;
}
