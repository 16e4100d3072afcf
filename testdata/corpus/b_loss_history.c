/*
 * b_loss_history (broken: leak): losses kept on the GPU. record_loss
 * appends each step's per-token loss (32768 tokens x 4 bytes = 128 KiB)
 * to a history that is never moved to the CPU nor cleared between epochs:
 * 6 epochs x 20 steps. Leak at record_loss: 120 x 128 KiB.
 */
#include "corpus.h"

#define EPOCHS 6
#define STEPS_PER_EPOCH 20
#define LOSS_BYTES ((size_t)32768 * 4)

static void *history[EPOCHS * STEPS_PER_EPOCH];
static size_t nhistory, kept;

NOINLINE void record_loss(void)
{
	history[nhistory++] = C10_MUST_ALLOC(LOSS_BYTES);
	kept += LOSS_BYTES;
}

NOINLINE void train_step(void)
{
	truth_step(__func__);
	forward(512);
	backward(512);
	optimizer_step();
	zero_grad();
	record_loss();
	truth_sleep_ms(STEP_MS);
}

NOINLINE void train_epoch(void)
{
	for (int s = 0; s < STEPS_PER_EPOCH; s++)
		train_step();
}

int main(void)
{
	pool_truth_init("corpus_b_loss_history");
	load_model();
	for (int e = 0; e < EPOCHS; e++)
		train_epoch();
	corpus_check("history bytes", kept, nhistory * LOSS_BYTES);
	truth_label_defect("leak", "record_loss", kept);
	return 0;
}
