/*
 * h_workspace (healthy): library workspaces, one per stream. Training
 * alternates two streams (compute and a side stream); the first matmul on
 * each stream makes its cuBLAS-like workspace (cublas_workspace: 8 MiB + 4 MiB
 * on that stream) that lives as long as the handle, i.e. the run. 60 steps:
 * the workspaces appear at steps 0 and 1, then nothing grows.
 */
#include "corpus.h"

#define STEPS 60

static cudaStream_t streams[2];
static void *workspace[2][2];

NOINLINE void create_streams(void)
{
	for (int s = 0; s < 2; s++)
		check_cuda(TRUTH_STREAM_CREATE(&streams[s]), __func__);
}

NOINLINE void cublas_workspace(int s)
{
	if (workspace[s][0] != NULL)
		return;
	workspace[s][0] = C10_ALLOC_ON(8 * MiB, streams[s]);
	workspace[s][1] = C10_ALLOC_ON(4 * MiB, streams[s]);
	if (workspace[s][0] == NULL || workspace[s][1] == NULL)
		pool_fail(__func__, 8 * MiB);
}

NOINLINE void matmul(int s)
{
	void *out;

	cublas_workspace(s);
	out = C10_ALLOC_ON(6 * MiB, streams[s]);
	if (out == NULL)
		pool_fail(__func__, 6 * MiB);
	C10_FREE(out);
}

NOINLINE void train_step(int step)
{
	truth_step(__func__);
	forward(512);
	matmul(step % 2);
	backward(512);
	optimizer_step();
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	size_t warm = 0;

	pool_truth_init("corpus_h_workspace");
	create_streams();
	load_model();
	for (int step = 0; step < STEPS; step++) {
		train_step(step);
		if (step == 1)
			warm = corpus_stats().reserved_bytes;
	}
	corpus_check("reserved after both workspaces", warm, corpus_stats().reserved_bytes);
	truth_label_healthy();
	return 0;
}
