/*
 * b_hidden_in_cache (broken: leak): a leak the segments never show. A
 * first evaluate pass makes 64 small tensors of 256 KiB (8 small-pool
 * segments of 2 MiB) and frees them: they stay cached. Then each of 60
 * steps, cache_mask keeps a 192 KiB attention mask; every mask fits in the
 * cached small segments, so reserved memory never grows after the warm-up
 * (checked): only the blocks do. Leak at cache_mask: 60 x 192 KiB.
 */
#include "corpus.h"

#define STEPS 60
#define MASK (192 * KiB)
#define NEVAL 64

static void *masks[STEPS];
static size_t kept;

NOINLINE void evaluate(void)
{
	void *p[NEVAL];

	for (int i = 0; i < NEVAL; i++)
		p[i] = C10_MUST_ALLOC(256 * KiB);
	for (int i = 0; i < NEVAL; i++)
		C10_FREE(p[i]);
}

NOINLINE void cache_mask(int step)
{
	masks[step] = C10_MUST_ALLOC(MASK);
	kept += MASK;
}

NOINLINE void train_step(int step)
{
	truth_step(__func__);
	forward(512);
	cache_mask(step);
	backward(512);
	optimizer_step();
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	size_t warm = 0;

	pool_truth_init("corpus_b_hidden_in_cache");
	load_model();
	evaluate();
	for (int step = 0; step < STEPS; step++) {
		train_step(step);
		if (step == WARMUP)
			warm = corpus_stats().reserved_bytes;
	}
	corpus_check("reserved after the warm-up (the leak is hidden)", warm,
		     corpus_stats().reserved_bytes);
	corpus_check("mask bytes", kept, (size_t)STEPS * MASK);
	truth_label_defect("leak", "cache_mask", kept);
	return 0;
}
