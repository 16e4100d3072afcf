/*
 * b_frag_oom (broken: oom, fragmentation): a feature bank that fragments
 * the cache. FAKECUDA_CAPACITY defaults to 210 MiB here (main sets it when
 * unset). load_model: one 40 MiB weight (its own segment). 8 steps, each
 * bank_features: 3 x 6 MiB (one 20 MiB segment per step: 6 + 6 + 6 and a
 * free 2 MiB tail). prune_bank frees the first and last of every three: per
 * segment a 6 MiB hole and an 8 MiB one (the last merges with the tail).
 * Reserved 200 MiB, allocated 40 + 8 x 6 = 88 MiB: 8 x 14 = 112 MiB cached
 * free, the largest range 8 MiB. grow_batch asks 16 MiB: no hole fits,
 * cudaMalloc(16 MiB) fails (200 + 16 > 210), the free-all finds no free
 * segment, the retry fails: an OOM with 112 MiB free in the cache
 * (fragmentation). Exits 1, as an uncaught OutOfMemoryError does.
 */
#include "corpus.h"

#define STEPS 8
#define FEATURE (6 * MiB)
#define BATCH (16 * MiB)

static void *weight, *bank[STEPS][3];

NOINLINE void load_big_model(void)
{
	weight = C10_MUST_ALLOC(40 * MiB);
}

NOINLINE void bank_features(int step)
{
	truth_step(__func__);
	for (int j = 0; j < 3; j++)
		bank[step][j] = C10_MUST_ALLOC(FEATURE);
	truth_sleep_ms(STEP_MS);
}

NOINLINE void prune_bank(void)
{
	for (int s = 0; s < STEPS; s++) {
		C10_FREE(bank[s][0]);
		C10_FREE(bank[s][2]);
	}
}

NOINLINE void *grow_batch(void)
{
	return C10_ALLOC(BATCH);
}

int main(void)
{
	struct c10_pool_state st;
	size_t cached_free = (size_t)STEPS * (20 * MiB - FEATURE);

	setenv("FAKECUDA_CAPACITY", "220200960", 0); /* 210 MiB */
	pool_truth_init("corpus_b_frag_oom");
	load_big_model();
	for (int s = 0; s < STEPS; s++)
		bank_features(s);
	prune_bank();
	if (grow_batch() != NULL) {
		fprintf(stderr, "corpus_b_frag_oom: grow_batch did not fail\n");
		return 3;
	}
	if (c10_last_oom(&st) != 0)
		return 3;
	corpus_check("cached free bytes at the failure", cached_free, st.cached_free_bytes);
	corpus_check("largest free range", 8 * MiB, st.largest_free_range);
	truth_label_defect("oom", "grow_batch", BATCH);
	truth_label_defect("fragmentation", "grow_batch", cached_free);
	return 1;
}
