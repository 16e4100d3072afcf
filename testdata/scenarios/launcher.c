/*
 * launcher: a torchrun-like launcher that makes no CUDA call. It fork()s and
 * exec()s 2 ranks (build/bin/rank beside it) with RANK=0 and RANK=1, waits
 * for both and exits 0 when both did. Its truth: all zeros, "children": the
 * two rank pids; each rank writes its own (see rank.c).
 */
#define _GNU_SOURCE
#include "truth.h"

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NRANKS 2

int main(void)
{
	char exe[PATH_MAX], rank[PATH_MAX + 16];
	pid_t pids[NRANKS];
	int status, failed = 0;
	ssize_t n;

	truth_init("launcher");
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n < 0) {
		perror("readlink /proc/self/exe");
		return 3;
	}
	exe[n] = '\0';
	snprintf(rank, sizeof(rank), "%s/rank", dirname(exe));
	fflush(NULL);
	for (int r = 0; r < NRANKS; r++) {
		pids[r] = fork();
		if (pids[r] < 0) {
			perror("fork");
			return 3;
		}
		if (pids[r] == 0) {
			char v[16];
			snprintf(v, sizeof(v), "%d", r);
			setenv("RANK", v, 1);
			execl(rank, rank, (char *)NULL);
			perror(rank);
			_exit(127);
		}
		truth_add_child(pids[r]);
	}
	for (int r = 0; r < NRANKS; r++)
		if (waitpid(pids[r], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed = 1;
	return failed ? 3 : 0;
}
