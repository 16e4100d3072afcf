/*
 * trainer.h: the training loop shared by steady, leak and spike. Each step
 * function calls cudaMalloc/cudaFree itself.
 *
 * Sizes (requested bytes; odd sizes on purpose, the runtime rounds to 512):
 *   load_model  weights      268435456 + 134217728 + 67108864 + 1000000 = 470762048
 *   forward     activations  8388608 + 4194304 + 2109497 + 1048576      =  15740985
 *   backward    gradients    16777216 + 8388608 + 3000000 + 777         =  28166601
 * optimizer_step frees activations and gradients; teardown frees weights.
 */
#ifndef TRAINER_H
#define TRAINER_H

#include "truth.h"

#define NTENSORS 4

struct model {
	void *weights[NTENSORS];
	void *activations[NTENSORS];
	void *gradients[NTENSORS];
};

void load_model(struct model *m);
void forward(struct model *m);
void backward(struct model *m);
void optimizer_step(struct model *m);
void teardown(struct model *m);

#endif
