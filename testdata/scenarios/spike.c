/*
 * spike: the steady loop for 50 iterations; after optimizer_step of
 * iterations 10 and 30, save_checkpoint allocates a 512 MiB staging buffer
 * and frees it at once. Peak: weights + 512 MiB (1007632960 bytes), first
 * reached inside save_checkpoint at iteration 10.
 */
#include "trainer.h"

NOINLINE void save_checkpoint(void)
{
	void *staging = NULL;

	check_cuda(TRUTH_MALLOC(&staging, 512 * MiB), __func__);
	check_cuda(TRUTH_FREE(staging), __func__);
}

int main(void)
{
	struct model m = {0};

	truth_init("spike");
	load_model(&m);
	for (int i = 0; i < 50; i++) {
		forward(&m);
		backward(&m);
		optimizer_step(&m);
		if (i == 10 || i == 30)
			save_checkpoint();
	}
	teardown(&m);
	return 0;
}
