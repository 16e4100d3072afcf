/*
 * corpus.h: the shared shape of the labelled corpus (see ../README.md,
 * "The labelled corpus"). Every corpus program is a short PyTorch-like
 * trainer over the fake caching allocator (libc10_cuda.so, ../scenarios/pool.h):
 * each allocating function calls C10_ALLOC itself, so it is the site a
 * profiler names. Each program labels itself (truth_label_healthy, or
 * truth_label_defect per problem) with bytes computed from what it did.
 *
 * The model here is the common part: weights made once, a forward that
 * makes activations sized by the batch's tokens, a backward that makes the
 * gradients (freed by zero_grad, set_to_none as PyTorch 2 does), and Adam
 * whose state (exp_avg, exp_avg_sq) is made lazily at the first step. A
 * program uses what it needs; its own functions are its sites.
 */
#ifndef CORPUS_H
#define CORPUS_H

#include "pool.h"

#include <stdio.h>
#include <stdlib.h>

#define KiB ((size_t)1 << 10)
#define UNUSED __attribute__((unused))

/* A step's GPU time: kernels run, nothing allocates. */
#define STEP_MS 2

/* WARMUP: the step after which a healthy trainer's cache holds every size
 * it needs: Adam's state (made in step 0) moves step 1's gradients to new
 * places, and the cache settles within the next steps, as PyTorch's does.
 * Healthy programs check that reserved memory stays flat after it. */
#define WARMUP 3

#define NW 5
static const size_t weight_sizes[NW] UNUSED = {64 * MiB, 32 * MiB, 16 * MiB + 4096, 3 * MiB,
					       256 * KiB};
static void *weights[NW] UNUSED, *grads[NW] UNUSED, *exp_avg[NW] UNUSED,
	*exp_avg_sq[NW] UNUSED;

#define NA 4
static void *acts[NA] UNUSED;

/* act_size: activation i for a batch of tokens tokens. */
static inline size_t act_size(int i, size_t tokens)
{
	static const size_t per_token[NA] = {16 * KiB, 8 * KiB, 2 * KiB, 0};
	return i == NA - 1 ? 64 * KiB : tokens * per_token[i] + (i == 2 ? 100 : 0);
}

static UNUSED NOINLINE void load_model(void)
{
	for (int i = 0; i < NW; i++)
		weights[i] = C10_MUST_ALLOC(weight_sizes[i]);
}

static UNUSED NOINLINE void forward(size_t tokens)
{
	for (int i = 0; i < NA; i++)
		acts[i] = C10_MUST_ALLOC(act_size(i, tokens));
}

/* backward: the gradients, and a temporary input gradient; the graph's
 * activations are freed as it goes. */
static UNUSED NOINLINE void backward(size_t tokens)
{
	void *grad_input = C10_MUST_ALLOC(tokens * 8 * KiB);

	for (int i = 0; i < NW; i++)
		if (grads[i] == NULL)
			grads[i] = C10_MUST_ALLOC(weight_sizes[i]);
	C10_FREE(grad_input);
	for (int i = 0; i < NA; i++)
		C10_FREE(acts[i]);
}

/* optimizer_step: Adam; its state is made at the first step. */
static UNUSED NOINLINE void optimizer_step(void)
{
	for (int i = 0; i < NW; i++) {
		if (exp_avg[i] == NULL) {
			exp_avg[i] = C10_MUST_ALLOC(weight_sizes[i]);
			exp_avg_sq[i] = C10_MUST_ALLOC(weight_sizes[i]);
		}
	}
}

static UNUSED NOINLINE void zero_grad(void)
{
	for (int i = 0; i < NW; i++) {
		if (grads[i] != NULL)
			C10_FREE(grads[i]);
		grads[i] = NULL;
	}
}

/* teardown: the end of the script (Python's exit frees every tensor). */
static UNUSED NOINLINE void teardown(void)
{
	for (int i = 0; i < NW; i++) {
		if (exp_avg[i] != NULL) {
			C10_FREE(exp_avg[i]);
			C10_FREE(exp_avg_sq[i]);
		}
		C10_FREE(weights[i]);
	}
}

/* corpus_check exits 3 when the program's own arithmetic disagrees with
 * the allocator's statistics: the label would be wrong. */
static UNUSED void corpus_check(const char *what, size_t want, size_t got)
{
	if (want != got) {
		fprintf(stderr, "corpus: %s: computed %zu, allocator says %zu\n", what, want, got);
		exit(3);
	}
}

static UNUSED struct c10_memory_stats corpus_stats_on(int device)
{
	struct c10_memory_stats st;

	if (c10_memory_stats(device, &st) != 0) {
		fprintf(stderr, "corpus: c10_memory_stats failed\n");
		exit(3);
	}
	return st;
}

static UNUSED struct c10_memory_stats corpus_stats(void)
{
	return corpus_stats_on(0);
}

#endif
