/*
 * dlopen_quiet: does the target notice a dlopen stop? A SIGCONT handler
 * counts its calls and a second thread waits in epoll_wait(..., 3000) in a
 * loop, counting the waits that return EINTR (the kernel ends such a wait
 * with EINTR after any stop and continue, handler or not). Meanwhile the
 * main thread sleeps $DLOPEN_QUIET_DELAY_MS (default 300), dlopen()s the
 * runtime by name ("libcudart.so.12", found through this executable's
 * RUNPATH, as a trainer finds pip's runtime), whose first cudaMalloc
 * dlopen()s the driver, and in loaded_alloc allocates 10 buffers of (i+1) MiB
 * and frees the even-numbered ones: 5 stay live (2+4+6+8+10 MiB =
 * 31457280 bytes). Then it wakes the waiter (an eventfd: a return of 1,
 * not EINTR) and prints "eintr=N sigcont=M" on stdout. Natively both are 0.
 */
#define _GNU_SOURCE
#include "truth.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define NBUFS 10

typedef cudaError_t (*malloc_fn)(void **, size_t);
typedef cudaError_t (*free_fn)(void *);

static malloc_fn p_cudaMalloc;
static free_fn p_cudaFree;
static void *bufs[NBUFS];
static volatile sig_atomic_t sigconts;
static int eintrs, wake, ep;

static void on_cont(int sig)
{
	(void)sig;
	sigconts++;
}

static void *waiter(void *arg)
{
	(void)arg;
	for (;;) {
		struct epoll_event ev;
		int n = epoll_wait(ep, &ev, 1, 3000);
		if (n < 0 && errno == EINTR) {
			eintrs++;
			continue;
		}
		if (n < 0) {
			perror("epoll_wait");
			exit(3);
		}
		if (n == 1)
			return NULL;
	}
}

NOINLINE void loaded_alloc(void)
{
	for (int i = 0; i < NBUFS; i++)
		check_cuda(TRUTH_MALLOC_VIA(p_cudaMalloc, &bufs[i], (size_t)(i + 1) * MiB), __func__);
	for (int i = 0; i < NBUFS; i += 2) {
		check_cuda(TRUTH_FREE_VIA(p_cudaFree, bufs[i]), __func__);
		bufs[i] = NULL;
	}
}

int main(void)
{
	const char *delay = getenv("DLOPEN_QUIET_DELAY_MS");
	struct sigaction sa;
	struct epoll_event ev = {.events = EPOLLIN};
	pthread_t th;
	uint64_t one = 1;
	void *h;

	truth_init("dlopen_quiet");
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_cont;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	if (sigaction(SIGCONT, &sa, NULL) != 0) {
		perror("sigaction");
		return 3;
	}
	wake = eventfd(0, 0);
	ep = epoll_create1(0);
	if (wake < 0 || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, wake, &ev) != 0) {
		perror("eventfd/epoll");
		return 3;
	}
	if (pthread_create(&th, NULL, waiter, NULL) != 0) {
		fprintf(stderr, "pthread_create failed\n");
		return 3;
	}
	truth_sleep_ms(delay != NULL && *delay != '\0' ? atol(delay) : 300);
	h = dlopen("libcudart.so.12", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 3;
	}
	p_cudaMalloc = (malloc_fn)dlsym(h, "cudaMalloc");
	p_cudaFree = (free_fn)dlsym(h, "cudaFree");
	if (p_cudaMalloc == NULL || p_cudaFree == NULL) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return 3;
	}
	loaded_alloc();
	if (write(wake, &one, sizeof(one)) != sizeof(one)) {
		perror("write eventfd");
		return 3;
	}
	pthread_join(th, NULL);
	printf("eintr=%d sigcont=%d\n", eintrs, (int)sigconts);
	return 0;
}
