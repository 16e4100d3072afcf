/* trainer.c: see trainer.h. */
#include "trainer.h"

static const size_t weight_sizes[NTENSORS] = {256 * MiB, 128 * MiB, 64 * MiB, 1000000};
static const size_t activation_sizes[NTENSORS] = {8 * MiB, 4 * MiB, 2 * MiB + 12345, 1 * MiB};
static const size_t gradient_sizes[NTENSORS] = {16 * MiB, 8 * MiB, 3000000, 777};

NOINLINE void load_model(struct model *m)
{
	for (int i = 0; i < NTENSORS; i++)
		check_cuda(TRUTH_MALLOC(&m->weights[i], weight_sizes[i]), __func__);
}

NOINLINE void forward(struct model *m)
{
	for (int i = 0; i < NTENSORS; i++)
		check_cuda(TRUTH_MALLOC(&m->activations[i], activation_sizes[i]), __func__);
}

NOINLINE void backward(struct model *m)
{
	for (int i = 0; i < NTENSORS; i++)
		check_cuda(TRUTH_MALLOC(&m->gradients[i], gradient_sizes[i]), __func__);
}

NOINLINE void optimizer_step(struct model *m)
{
	for (int i = 0; i < NTENSORS; i++) {
		check_cuda(TRUTH_FREE(m->activations[i]), __func__);
		check_cuda(TRUTH_FREE(m->gradients[i]), __func__);
		m->activations[i] = m->gradients[i] = NULL;
	}
}

NOINLINE void teardown(struct model *m)
{
	for (int i = 0; i < NTENSORS; i++) {
		check_cuda(TRUTH_FREE(m->weights[i]), __func__);
		m->weights[i] = NULL;
	}
}
