/*
 * dlopen_loop: no CUDA, a loader kept busy (beside a session or in its
 * tree). It dlopen()s and
 * dlclose()s a library (argv[2], default libanl.so.1, which it does not link)
 * argv[1] times (default 1000): each round maps and unmaps it, so the
 * loader calls its debugger rendezvous (_dl_debug_state) 4 times (before
 * and after each change). It prints "rounds=N ns_per_round=T cpu_ns_per_round=C"
 * (wall clock, CLOCK_MONOTONIC; CPU time, user and system, from getrusage:
 * a trap is system time, and CPU time does not count the waits for a CPU
 * on a busy host) and exits 0, or 1 when a dlopen fails. With argv[3]
 * "fork", a forked child (no exec) runs the loop and prints, and the parent
 * exits with its status: the rendezvous after the 2 of start-up are then
 * all the child's.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sys/resource.h>
#include <time.h>

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 1000;
	const char *lib = argc > 2 ? argv[2] : "libanl.so.1";
	struct timespec t0, t1;
	struct rusage r0, r1;

	if (argc > 3 && strcmp(argv[3], "fork") == 0) {
		int status;
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid > 0) {
			if (waitpid(pid, &status, 0) < 0) {
				perror("waitpid");
				return 1;
			}
			return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
		}
	}

	getrusage(RUSAGE_SELF, &r0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < rounds; i++) {
		void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
			return 1;
		}
		dlclose(h);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	getrusage(RUSAGE_SELF, &r1);
	double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
	double cpu = 0;
	cpu += (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) * 1e9 + (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) * 1e3;
	cpu += (double)(r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) * 1e9 + (double)(r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) * 1e3;
	double n = rounds > 0 ? (double)rounds : 1;
	printf("rounds=%ld ns_per_round=%.0f cpu_ns_per_round=%.0f\n", rounds, ns / n, cpu / n);
	return 0;
}
