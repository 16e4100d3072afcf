/*
 * h_kv_cache (healthy): inference with a KV cache preallocated once.
 * load_model loads the weights, alloc_kv_cache makes 8 layers x (K, V) of
 * 32 MiB (512 MiB) once; then 20 requests: prefill (activations sized by
 * the prompt: 256 to 1280 tokens) and 6 decode_steps (logits 4 MiB and a
 * 256 KiB attention score each, freed). The server exits with the model and
 * the cache still live, as a process does.
 */
#include "corpus.h"

#define LAYERS 8
#define REQUESTS 20
#define DECODE 6

static void *kv[LAYERS][2];

NOINLINE void alloc_kv_cache(void)
{
	for (int l = 0; l < LAYERS; l++)
		for (int j = 0; j < 2; j++)
			kv[l][j] = C10_MUST_ALLOC(32 * MiB);
}

NOINLINE void prefill(size_t tokens)
{
	void *h = C10_MUST_ALLOC(tokens * 16 * KiB);
	void *scores = C10_MUST_ALLOC(tokens * 4 * KiB);

	C10_FREE(scores);
	C10_FREE(h);
}

NOINLINE void decode_step(void)
{
	void *logits = C10_MUST_ALLOC(4 * MiB);
	void *scores = C10_MUST_ALLOC(256 * KiB);

	C10_FREE(scores);
	C10_FREE(logits);
}

NOINLINE void serve_request(int r)
{
	truth_step(__func__);
	prefill(256 * (size_t)(1 + r % 5));
	for (int d = 0; d < DECODE; d++)
		decode_step();
	truth_sleep_ms(STEP_MS);
}

int main(void)
{
	size_t warm = 0;

	pool_truth_init("corpus_h_kv_cache");
	load_model();
	alloc_kv_cache();
	for (int r = 0; r < REQUESTS; r++) {
		serve_request(r);
		if (r == 4)
			warm = corpus_stats().reserved_bytes;
	}
	corpus_check("reserved after the longest prompt", warm, corpus_stats().reserved_bytes);
	truth_label_healthy();
	return 0;
}
