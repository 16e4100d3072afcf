/*
 * h_mixed_precision (healthy): autocast and a GradScaler. Each of 60 steps
 * casts the weights to fp16 (cast_weights: half their sizes, freed after
 * backward); init_scaler makes the scaler's state (scale and growth
 * tracker, 4 bytes each) at the first step and keeps it.
 */
#include "corpus.h"

#define STEPS 60

static void *half[NW];
static void *scale, *growth_tracker;

NOINLINE void init_scaler(void)
{
	if (scale != NULL)
		return;
	scale = C10_MUST_ALLOC(4);
	growth_tracker = C10_MUST_ALLOC(4);
}

NOINLINE void cast_weights(void)
{
	for (int i = 0; i < NW; i++)
		half[i] = C10_MUST_ALLOC(weight_sizes[i] / 2);
}

NOINLINE void free_casts(void)
{
	for (int i = 0; i < NW; i++)
		C10_FREE(half[i]);
}

NOINLINE void train_step(void)
{
	truth_step(__func__);
	init_scaler();
	cast_weights();
	forward(512);
	backward(512);
	free_casts();
	optimizer_step();
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	size_t warm = 0;

	pool_truth_init("corpus_h_mixed_precision");
	load_model();
	for (int step = 0; step < STEPS; step++) {
		train_step();
		if (step == WARMUP)
			warm = corpus_stats().reserved_bytes;
	}
	corpus_check("reserved after the warm-up steps", warm, corpus_stats().reserved_bytes);
	C10_FREE(scale);
	C10_FREE(growth_tracker);
	teardown();
	truth_label_healthy();
	return 0;
}
