/*
 * imbalance: two data-parallel ranks, fork()ed by one parent, where rank 0
 * holds extra state. The parent initializes the runtime (cudaGetDeviceCount,
 * no allocation), forks rank 0 and rank 1 and waits for them. Rank r
 * (its own process and truth file) calls cudaSetDevice(r); load_params
 * allocates 256 MiB and init_optimizer 512 MiB (kept); then 4 steps of
 * forward 64 MiB, backward 64 MiB and optimizer_step freeing both, 2 ms
 * apart, then 200 ms idle before exiting. Rank 0 alone, in step 2 between
 * backward and optimizer_step, gather_checkpoint allocates the full state,
 * 768 MiB + 123 bytes, and frees it (a checkpoint gathered on rank 0).
 * Rank 0 (device 0): peak 256 + 512 + 64 + 64 MiB + 805306491 =
 * 1744830587; rank 1 (device 1): peak 939524096. Both end with 805306368
 * live (params and optimizer state).
 */
#include "truth.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define NRANKS 2
#define STEPS 4

static void *params, *optim, *acts, *grads;

NOINLINE void load_params(void)
{
	check_cuda(TRUTH_MALLOC(&params, 256 * MiB), __func__);
}

NOINLINE void init_optimizer(void)
{
	check_cuda(TRUTH_MALLOC(&optim, 512 * MiB), __func__);
}

NOINLINE void forward(void)
{
	check_cuda(TRUTH_MALLOC(&acts, 64 * MiB), __func__);
}

NOINLINE void backward(void)
{
	check_cuda(TRUTH_MALLOC(&grads, 64 * MiB), __func__);
}

NOINLINE void gather_checkpoint(void)
{
	void *full = NULL;

	check_cuda(TRUTH_MALLOC(&full, 768 * MiB + 123), __func__);
	check_cuda(TRUTH_FREE(full), __func__);
}

NOINLINE void optimizer_step(void)
{
	check_cuda(TRUTH_FREE(grads), __func__);
	check_cuda(TRUTH_FREE(acts), __func__);
}

NOINLINE void run_rank(int rank)
{
	check_cuda(TRUTH_SET_DEVICE(rank), "cudaSetDevice");
	load_params();
	init_optimizer();
	for (int step = 0; step < STEPS; step++) {
		forward();
		backward();
		if (rank == 0 && step == 2)
			gather_checkpoint();
		optimizer_step();
		truth_sleep_ms(2);
	}
	/* Linger: a child that exits right after its last call may be gone
	 * before a profiler reads its mappings to symbolize its stacks. */
	truth_sleep_ms(200);
	exit(0); /* atexit writes $VRAMPROF_TRUTH.<pid> */
}

int main(void)
{
	pid_t pids[NRANKS];
	int status, n = 0, failed = 0;

	truth_init("imbalance");
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
