/*
 * b_step_leak (broken: leak): the trainer. Every one of 60 steps,
 * leak_step keeps a 1 MiB tensor (a small-pool block: it lands in cached
 * 2 MiB segments). Leak at leak_step: 60 x 1 MiB.
 */
#include "corpus.h"

#define STEPS 60
#define LEAK (1 * MiB)

static void *kept[STEPS];
static size_t leaked;

NOINLINE void leak_step(int step)
{
	kept[step] = C10_MUST_ALLOC(LEAK);
	leaked += LEAK;
}

NOINLINE void train_step(int step)
{
	truth_step(__func__);
	forward(512);
	backward(512);
	leak_step(step);
	optimizer_step();
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	pool_truth_init("corpus_b_step_leak");
	load_model();
	for (int step = 0; step < STEPS; step++)
		train_step(step);
	corpus_check("bytes leak_step kept", leaked, (size_t)STEPS * LEAK);
	truth_label_defect("leak", "leak_step", leaked);
	return 0;
}
