/*
 * many_libs DIR: a process with hundreds of mapped files, the shape of a
 * PyTorch trainer, for attach-latency measurement. It dlopen()s every
 * libmany_*.so in DIR (copies of one tiny library: distinct inodes, so each
 * is mapped on its own), prints "ready <pid> <libs>", then calls
 * cudaMalloc+cudaFree in `tick` every millisecond until SIGTERM. No truth
 * log: it is only a target to attach to.
 */
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

NOINLINE static int tick(void)
{
	void *p = NULL;
	if (cudaMalloc(&p, 4096) != cudaSuccess)
		return 1;
	return cudaFree(p) != cudaSuccess;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: many_libs DIR\n");
		return 2;
	}
	DIR *d = opendir(argv[1]);
	if (!d) {
		perror(argv[1]);
		return 2;
	}
	int n = 0;
	struct dirent *e;
	char path[4096];
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, "libmany_", 8) != 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
		if (!dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
			fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
			return 2;
		}
		n++;
	}
	closedir(d);
	signal(SIGTERM, on_term);
	printf("ready %d %d\n", (int)getpid(), n);
	fflush(stdout);
	struct timespec ms = {0, 1000000};
	while (!stop) {
		if (tick())
			return 1;
		nanosleep(&ms, NULL);
	}
	return 0;
}
