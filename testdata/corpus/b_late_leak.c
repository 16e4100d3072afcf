/*
 * b_late_leak (broken: leak): a slow leak that starts late. 80 epochs of 2
 * steps; from epoch 60 on, log_metrics keeps a 1 MiB + 4096 tensor per step
 * (a metric buffer appended to a list once a scheduler switches on extra
 * logging). Leak at log_metrics: 20 epochs x 2 x (1 MiB + 4096).
 */
#include "corpus.h"

#define EPOCHS 80
#define LEAK_FROM 60
#define STEPS_PER_EPOCH 2
#define METRIC (1 * MiB + 4096)

static void *metrics[EPOCHS * STEPS_PER_EPOCH];
static size_t nmetrics, kept;

NOINLINE void log_metrics(int epoch)
{
	if (epoch < LEAK_FROM)
		return;
	metrics[nmetrics++] = C10_MUST_ALLOC(METRIC);
	kept += METRIC;
}

NOINLINE void train_step(int epoch)
{
	truth_step(__func__);
	forward(256);
	backward(256);
	optimizer_step();
	zero_grad();
	log_metrics(epoch);
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	pool_truth_init("corpus_b_late_leak");
	load_model();
	for (int e = 0; e < EPOCHS; e++)
		for (int s = 0; s < STEPS_PER_EPOCH; s++)
			train_step(e);
	corpus_check("metric bytes", kept,
		     (size_t)(EPOCHS - LEAK_FROM) * STEPS_PER_EPOCH * METRIC);
	truth_label_defect("leak", "log_metrics", kept);
	return 0;
}
