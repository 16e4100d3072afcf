/*
 * b_rank_leak (broken: leak in a second process): two data-parallel
 * ranks fork()ed by a parent that allocates nothing. Rank r selects device
 * r and trains 50 steps; rank 1 alone gathers its statistics each step in
 * gather_stats and keeps them (512 KiB per step). Rank 0 is healthy; rank 1
 * labels the leak at gather_stats: 50 x 512 KiB.
 */
#include "corpus.h"

#include <sys/wait.h>
#include <unistd.h>

#define NRANKS 2
#define STEPS 50
#define STATS (512 * KiB)

static void *stats[STEPS];
static size_t kept;

NOINLINE void gather_stats(int step)
{
	stats[step] = C10_MUST_ALLOC(STATS);
	kept += STATS;
}

NOINLINE void train_step(int rank, int step)
{
	truth_step(__func__);
	forward(512);
	backward(512);
	if (rank == 1)
		gather_stats(step);
	optimizer_step();
	zero_grad();
	truth_sleep_ms(STEP_MS);
}

NOINLINE void run_rank(int rank)
{
	check_cuda(TRUTH_SET_DEVICE(rank), "cudaSetDevice");
	load_model();
	for (int step = 0; step < STEPS; step++)
		train_step(rank, step);
	if (rank == 1) {
		corpus_check("stats bytes", kept, (size_t)STEPS * STATS);
		truth_label_defect("leak", "gather_stats", kept);
	} else {
		truth_label_healthy();
	}
	truth_sleep_ms(200); /* see h_two_ranks.c */
	exit(0);
}

int main(void)
{
	pid_t pids[NRANKS];
	int status, n = 0, failed = 0;

	pool_truth_init("corpus_b_rank_leak");
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
	return failed ? 3 : 0;
}
