/*
 * b_churn (broken: churn): torch.cuda.empty_cache() after every step. 40
 * steps of SGD (no optimizer state); release_cache empties the cache after
 * each, and the next step cudaMallocs the same segments again. The bytes
 * at stake: every segment released by one release_cache and allocated
 * again by the next step, from the allocator's own reserved figures (the
 * program checks that every step takes back exactly what the last release
 * gave up). Churn at release_cache.
 */
#include "corpus.h"

#define STEPS 40

NOINLINE void train_step(void)
{
	truth_step(__func__);
	forward(512);
	backward(512);
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

NOINLINE void release_cache(void)
{
	C10_EMPTY_CACHE();
}

int main(void)
{
	size_t released = 0, cycled = 0;

	pool_truth_init("corpus_b_churn");
	load_model();
	for (int step = 0; step < STEPS; step++) {
		size_t before = corpus_stats().reserved_bytes, grown, after;

		train_step();
		grown = corpus_stats().reserved_bytes - before;
		if (step > 0) {
			corpus_check("a step takes back what the last release gave up", released,
				     grown);
			cycled += grown;
		}
		after = corpus_stats().reserved_bytes;
		release_cache();
		released = after - corpus_stats().reserved_bytes;
	}
	teardown();
	truth_label_defect("churn", "release_cache", cycled);
	return 0;
}
