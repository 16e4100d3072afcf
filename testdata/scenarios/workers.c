/*
 * workers: a DataLoader-like process tree. The parent's parent_setup
 * allocates 64 MiB and 1 MiB, then it fork()s 4 workers and waits for them;
 * parent_teardown frees both. Worker w (its own process: its own truth file,
 * and an empty driver, as a fresh CUDA context) runs worker_load: allocates
 * a batch of (w+1) * 4 MiB and a scratch of 512 KiB + w, frees the batch in
 * worker_drop and exits with the scratch still live.
 * Parent: 2 allocations, 2 frees, 68157440 bytes = peak, live 0,
 * "children": the 4 pids. Worker w: 2 allocations, 1 free,
 * (w+1)*4194304 + 524288 + w bytes = peak, live at end 524288 + w.
 */
#include "truth.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define NWORKERS 4

static void *weights, *buffer;

NOINLINE void parent_setup(void)
{
	check_cuda(TRUTH_MALLOC(&weights, 64 * MiB), __func__);
	check_cuda(TRUTH_MALLOC(&buffer, 1 * MiB), __func__);
}

NOINLINE void parent_teardown(void)
{
	check_cuda(TRUTH_FREE(buffer), __func__);
	check_cuda(TRUTH_FREE(weights), __func__);
}

NOINLINE void worker_load(int w, void **batch, void **scratch)
{
	check_cuda(TRUTH_MALLOC(batch, (size_t)(w + 1) * 4 * MiB), __func__);
	check_cuda(TRUTH_MALLOC(scratch, 512 * 1024 + (size_t)w), __func__);
}

NOINLINE void worker_drop(void *batch)
{
	check_cuda(TRUTH_FREE(batch), __func__);
}

static void worker(int w)
{
	void *batch = NULL, *scratch = NULL;

	worker_load(w, &batch, &scratch);
	truth_sleep_ms(20);
	worker_drop(batch);
	exit(0); /* atexit writes $VRAMPROF_TRUTH.<pid> */
}

int main(void)
{
	pid_t pids[NWORKERS];
	int status, failed = 0;

	truth_init("workers");
	parent_setup();
	fflush(NULL);
	for (int w = 0; w < NWORKERS; w++) {
		pids[w] = fork();
		if (pids[w] < 0) {
			perror("fork");
			return 3;
		}
		if (pids[w] == 0)
			worker(w);
		truth_add_child(pids[w]);
	}
	for (int w = 0; w < NWORKERS; w++)
		if (waitpid(pids[w], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed = 1;
	parent_teardown();
	return failed ? 3 : 0;
}
