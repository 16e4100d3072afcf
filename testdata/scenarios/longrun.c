/*
 * longrun: a process to attach to.
 *
 * Phase 1: preload allocates 3 buffers (32, 16, 8 MiB: the memory an attached
 * profiler never saw allocated), prints "ready <pid>" and waits for SIGUSR1.
 * Phase 2: 20 iterations ($LONGRUN_ITERATIONS) of train_step (allocates 4 MiB
 * and 1 MiB + 7, frees both) and leaky_step (keeps 64 KiB), 20 ms
 * ($LONGRUN_PAUSE_MS) apart; then drop_preloaded frees
 * the 16 MiB preloaded buffer (an unknown free to the profiler); the truth is
 * written, "done" is printed, and the process waits for SIGTERM (or
 * $LONGRUN_MAX_SECONDS, default 30) and exits 0.
 *
 * The truth describes phase 2 only, plus "preexisting" {allocations, bytes}
 * for what phase 1 left live when phase 2 began.
 */
#include "truth.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define ITERATIONS 20
#define MAX_ITERATIONS 100000

static void *preloaded[3];
static void *kept[MAX_ITERATIONS];

NOINLINE void preload(void)
{
	static const size_t sizes[3] = {32 * MiB, 16 * MiB, 8 * MiB};

	for (int i = 0; i < 3; i++)
		check_cuda(TRUTH_MALLOC(&preloaded[i], sizes[i]), __func__);
}

NOINLINE void train_step(void)
{
	void *act = NULL, *grad = NULL;

	check_cuda(TRUTH_MALLOC(&act, 4 * MiB), __func__);
	check_cuda(TRUTH_MALLOC(&grad, 1 * MiB + 7), __func__);
	check_cuda(TRUTH_FREE(grad), __func__);
	check_cuda(TRUTH_FREE(act), __func__);
}

NOINLINE void leaky_step(int i)
{
	check_cuda(TRUTH_MALLOC(&kept[i], 64 * 1024), __func__);
}

NOINLINE void drop_preloaded(void)
{
	check_cuda(TRUTH_FREE(preloaded[1]), __func__);
	preloaded[1] = NULL;
}

int main(void)
{
	sigset_t usr1, term;
	struct timespec limit = {30, 0};
	const char *s = getenv("LONGRUN_MAX_SECONDS");
	const char *n = getenv("LONGRUN_ITERATIONS");
	const char *p = getenv("LONGRUN_PAUSE_MS");
	int iterations = ITERATIONS, pause_ms = 20;
	int sig;

	if (s && *s)
		limit.tv_sec = atol(s);
	if (n && *n)
		iterations = atoi(n);
	if (iterations < 0 || iterations > MAX_ITERATIONS)
		return 2;
	if (p && *p)
		pause_ms = atoi(p);
	/* Block before anything else, so an early signal stays pending. */
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &usr1, NULL);
	sigprocmask(SIG_BLOCK, &term, NULL);

	truth_init_untraced("longrun");
	preload();
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	if (sigwait(&usr1, &sig) != 0)
		return 3;

	truth_start_tracing();
	for (int i = 0; i < iterations; i++) {
		train_step();
		leaky_step(i);
		if (pause_ms > 0)
			truth_sleep_ms(pause_ms);
	}
	drop_preloaded();
	if (truth_write() != 0)
		return 3;
	printf("done\n");
	fflush(stdout);

	sigtimedwait(&term, NULL, &limit);
	return 0;
}
