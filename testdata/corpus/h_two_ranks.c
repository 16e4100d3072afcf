/*
 * h_two_ranks (healthy): data parallel on two devices. The parent (no
 * allocation) forks rank 0 and rank 1; rank r selects device r, loads the
 * model, makes its gradient bucket (ddp_bucket: 25 MiB, once, as DDP's
 * reducer does) and trains 50 steps. Each rank labels itself healthy.
 */
#include "corpus.h"

#include <sys/wait.h>
#include <unistd.h>

#define NRANKS 2
#define STEPS 50

static void *bucket;

NOINLINE void ddp_bucket(void)
{
	bucket = C10_MUST_ALLOC(25 * MiB);
}

NOINLINE void allreduce(void)
{
	truth_sleep_ms(1);
}

NOINLINE void train_step(void)
{
	truth_step(__func__);
	forward(512);
	backward(512);
	allreduce();
	optimizer_step();
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

NOINLINE void run_rank(int rank)
{
	size_t warm = 0;

	check_cuda(TRUTH_SET_DEVICE(rank), "cudaSetDevice");
	load_model();
	ddp_bucket();
	for (int step = 0; step < STEPS; step++) {
		train_step();
		if (step == WARMUP)
			warm = corpus_stats_on(rank).reserved_bytes;
	}
	corpus_check("reserved after the warm-up steps", warm, corpus_stats_on(rank).reserved_bytes);
	truth_label_healthy();
	/* Linger: a child gone right after its last call may be gone before a
	 * profiler reads its mappings (scenarios/imbalance.c). */
	truth_sleep_ms(200);
	exit(0);
}

int main(void)
{
	pid_t pids[NRANKS];
	int status, n = 0, failed = 0;

	pool_truth_init("corpus_h_two_ranks");
	check_cuda(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
	fflush(NULL);
	for (int r = 0; r < NRANKS; r++) {
		pids[r] = fork();
		if (pids[r] < 0) {
			perror("fork");
			return 3;
		}
		if (pids[r] == 0)
			run_rank(r);
		truth_add_child(pids[r]);
	}
	for (int r = 0; r < NRANKS; r++)
		if (waitpid(pids[r], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed = 1;
	truth_label_healthy();
	return failed ? 3 : 0;
}
