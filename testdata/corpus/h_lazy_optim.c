/*
 * h_lazy_optim (healthy): a large optimizer state made lazily. The weights
 * are loaded, then the first optimizer_step makes Adam's exp_avg and
 * exp_avg_sq (twice the weights: 230 MiB) and keeps them for the run, as
 * torch.optim.Adam does. Memory jumps at step 0 and, once the cache has
 * settled (WARMUP steps), stays flat (checked): state, not a leak.
 */
#include "corpus.h"

#define STEPS 60

NOINLINE void train_step(void)
{
	truth_step(__func__);
	forward(512);
	backward(512);
	optimizer_step();
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	size_t warm = 0;

	pool_truth_init("corpus_h_lazy_optim");
	load_model();
	for (int step = 0; step < STEPS; step++) {
		train_step();
		if (step == WARMUP)
			warm = corpus_stats().reserved_bytes;
	}
	corpus_check("reserved after the warm-up steps", warm, corpus_stats().reserved_bytes);
	teardown();
	truth_label_healthy();
	return 0;
}
