/*
 * spike: the steady loop for 50 iterations; after optimizer_step of
 * iterations 10 and 30, save_checkpoint allocates a 512 MiB staging buffer
 * and frees it at once. Peak: weights + 512 MiB (1007632960 bytes), first
 * reached inside save_checkpoint at iteration 10. $SPIKE_ITERATIONS runs
 * more iterations (the flight recorder's tests: a peak long before the
 * end).
 */
#include "trainer.h"

#include <stdlib.h>

NOINLINE void save_checkpoint(void)
{
	void *staging = NULL;

	check_cuda(TRUTH_MALLOC(&staging, 512 * MiB), __func__);
	check_cuda(TRUTH_FREE(staging), __func__);
}

int main(void)
{
	struct model m = {0};
	const char *env = getenv("SPIKE_ITERATIONS");
	int iterations = env ? atoi(env) : 50;

	truth_init("spike");
	load_model(&m);
	for (int i = 0; i < iterations; i++) {
		forward(&m);
		backward(&m);
		optimizer_step(&m);
		if (i == 10 || i == 30)
			save_checkpoint();
	}
	teardown(&m);
	return 0;
}
