/*
 * steady: a training loop that returns to the same level every iteration.
 * 50 iterations of forward, backward, optimizer_step between load_model and
 * teardown. Live at end: 0. Peak: weights + activations + gradients
 * (514669634 bytes), first reached in backward of iteration 0.
 */
#include "trainer.h"

int main(void)
{
	struct model m = {0};

	truth_init("steady");
	load_model(&m);
	for (int i = 0; i < 50; i++) {
		forward(&m);
		backward(&m);
		optimizer_step(&m);
	}
	teardown(&m);
	return 0;
}
