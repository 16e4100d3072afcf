/*
 * h_checkpoint (healthy): checkpoint saves done right. open_checkpoint_file
 * pins one 64 MiB staging buffer (cudaHostAlloc) at the start; every 20 of
 * 80 steps save_checkpoint copies each weight to the host through it, in
 * chunks of at most 4 MiB cast to bf16 on the GPU first (a 2 MiB temporary
 * per chunk, freed before the next). The checkpoint costs a 2 MiB
 * temporary, not a copy of the model; the staging buffer is freed at the end.
 */
#include "corpus.h"

#define STEPS 80
#define SAVE_EVERY 20
#define CHUNK (4 * MiB)

static void *staging;

NOINLINE void open_checkpoint_file(void)
{
	check_cuda(TRUTH_HOST_ALLOC(&staging, 64 * MiB, cudaHostAllocDefault), __func__);
}

NOINLINE void cast_chunk(size_t n)
{
	void *bf16 = C10_MUST_ALLOC(n / 2);

	C10_FREE(bf16);
}

NOINLINE void save_checkpoint(void)
{
	for (int i = 0; i < NW; i++)
		for (size_t off = 0; off < weight_sizes[i]; off += CHUNK)
			cast_chunk(weight_sizes[i] - off < CHUNK ? weight_sizes[i] - off : CHUNK);
}

NOINLINE void close_checkpoint_file(void)
{
	check_cuda(TRUTH_FREE_HOST(staging), __func__);
}

NOINLINE void train_step(void)
{
	truth_step(__func__);
	forward(512);
	backward(512);
	optimizer_step();
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	size_t warm = 0;

	pool_truth_init("corpus_h_checkpoint");
	open_checkpoint_file();
	load_model();
	for (int step = 0; step < STEPS; step++) {
		train_step();
		if (step % SAVE_EVERY == SAVE_EVERY - 1)
			save_checkpoint();
		if (step == SAVE_EVERY - 1)
			warm = corpus_stats().reserved_bytes;
	}
	corpus_check("reserved after the first save", warm, corpus_stats().reserved_bytes);
	teardown();
	close_checkpoint_file();
	truth_label_healthy();
	return 0;
}
