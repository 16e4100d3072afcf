/*
 * h_expandable (healthy): the common trainer under expandable segments
 * (main sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when unset):
 * the cache maps pages while new sizes appear (batches of 256 to 1280
 * tokens, the longest first at step 4) and then stays flat (checked).
 */
#include "corpus.h"

#define STEPS 70

NOINLINE void train_step(int step)
{
	truth_step(__func__);
	size_t tokens = 256 * (size_t)(1 + step % 5);

	forward(tokens);
	backward(tokens);
	optimizer_step();
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	size_t warm = 0;

	setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", 0);
	pool_truth_init("corpus_h_expandable");
	load_model();
	for (int step = 0; step < STEPS; step++) {
		train_step(step);
		if (step == 9)
			warm = corpus_stats().reserved_bytes;
	}
	corpus_check("reserved after two rounds of lengths", warm, corpus_stats().reserved_bytes);
	teardown();
	truth_label_healthy();
	return 0;
}
