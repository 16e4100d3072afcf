/*
 * truth.c: the ground-truth log (see truth.h). Accounting is incremental, in
 * the order calls are recorded: each record is made just after the call
 * returned, under one mutex, so scenarios must not race an allocation against
 * a free of the same address (the threads scenario separates them by
 * barriers).
 */
#define _GNU_SOURCE
#include "truth.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_CAPACITY ((uint64_t)16 << 30)

enum api { API_MALLOC, API_FREE };

struct call {
	enum api api;
	const char *func;
	const char *outcome;
	pid_t tid;
	uint64_t size, ptr, t_ns;
	int ret;
};

struct func {
	const char *name;
	uint64_t allocations, allocated_bytes, live, live_at_peak, failed;
};

struct live {
	uint64_t ptr, size;
	size_t func; /* index in funcs, or SIZE_MAX when preexisting */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const char *scenario = "unknown";
static int tracing, untraced_mode;
static int dirty = 1, written;

static struct call *calls;
static size_t ncalls, ccalls;
static struct func *funcs;
static size_t nfuncs, cfuncs;
static struct live *lives;
static size_t nlives, clives;

static struct {
	uint64_t allocations, frees, failed_allocations, unknown_frees,
		null_frees, zero_size_allocations, allocated_bytes, peak_bytes,
		live_bytes;
} tot;
static uint64_t pre_allocations, pre_bytes;

static void *grow(void *p, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return p;
	*cap = *cap ? 2 * *cap : 64;
	p = realloc(p, *cap * elem);
	if (p == NULL) {
		fprintf(stderr, "truth: out of host memory\n");
		abort();
	}
	return p;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void at_exit(void)
{
	pthread_mutex_lock(&mu);
	int again = dirty || !written;
	pthread_mutex_unlock(&mu);
	if (again)
		truth_write();
}

void truth_init(const char *name)
{
	scenario = name;
	tracing = 1;
	atexit(at_exit);
}

void truth_init_untraced(const char *name)
{
	scenario = name;
	untraced_mode = 1;
	atexit(at_exit);
}

void truth_start_tracing(void)
{
	pthread_mutex_lock(&mu);
	tracing = 1;
	pthread_mutex_unlock(&mu);
}

uint64_t truth_capacity(void)
{
	const char *s = getenv("FAKECUDA_CAPACITY");
	char *end;
	unsigned long long v;

	if (s && *s) {
		errno = 0;
		v = strtoull(s, &end, 10);
		if (errno == 0 && *end == '\0')
			return v;
	}
	return DEFAULT_CAPACITY;
}

void truth_sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

void check_cuda(cudaError_t ret, const char *what)
{
	if (ret != cudaSuccess) {
		fprintf(stderr, "%s: CUDA error %d\n", what, (int)ret);
		exit(3);
	}
}

static size_t func_index(const char *name)
{
	size_t i;

	for (i = 0; i < nfuncs; i++)
		if (strcmp(funcs[i].name, name) == 0)
			return i;
	funcs = grow(funcs, &cfuncs, nfuncs, sizeof(*funcs));
	memset(&funcs[nfuncs], 0, sizeof(*funcs));
	funcs[nfuncs].name = name;
	return nfuncs++;
}

static long find_live(uint64_t ptr)
{
	size_t i;

	for (i = 0; i < nlives; i++)
		if (lives[i].ptr == ptr)
			return (long)i;
	return -1;
}

static void add_call(enum api api, const char *func, const char *outcome,
		     int ret, uint64_t ptr, uint64_t size, uint64_t t)
{
	struct call *c;

	calls = grow(calls, &ccalls, ncalls, sizeof(*calls));
	c = &calls[ncalls++];
	c->api = api;
	c->func = func;
	c->outcome = outcome;
	c->tid = gettid();
	c->size = size;
	c->ptr = ptr;
	c->ret = ret;
	c->t_ns = t;
	dirty = 1;
}

void truth_malloc(const char *func, cudaError_t ret, void *ptr, size_t size)
{
	uint64_t t = now_ns();
	uint64_t p = ret == cudaSuccess ? (uint64_t)(uintptr_t)ptr : 0;
	size_t fi, i;

	pthread_mutex_lock(&mu);
	if (!tracing) {
		if (ret == cudaSuccess && size > 0) {
			lives = grow(lives, &clives, nlives, sizeof(*lives));
			lives[nlives++] = (struct live){p, size, SIZE_MAX};
			pre_allocations++;
			pre_bytes += size;
		}
		pthread_mutex_unlock(&mu);
		return;
	}
	fi = func_index(func);
	if (ret != cudaSuccess) {
		tot.failed_allocations++;
		funcs[fi].failed++;
		add_call(API_MALLOC, func, "failed", ret, 0, size, t);
	} else if (size == 0) {
		tot.zero_size_allocations++;
		add_call(API_MALLOC, func, "zero", ret, p, size, t);
	} else {
		if (find_live(p) >= 0) {
			fprintf(stderr, "truth: %s got live address %#llx again: "
				"scenario races alloc against free\n",
				func, (unsigned long long)p);
			abort();
		}
		lives = grow(lives, &clives, nlives, sizeof(*lives));
		lives[nlives++] = (struct live){p, size, fi};
		tot.allocations++;
		tot.allocated_bytes += size;
		tot.live_bytes += size;
		funcs[fi].allocations++;
		funcs[fi].allocated_bytes += size;
		funcs[fi].live += size;
		/* Strictly greater: the first time a peak level is reached wins. */
		if (tot.live_bytes > tot.peak_bytes) {
			tot.peak_bytes = tot.live_bytes;
			for (i = 0; i < nfuncs; i++)
				funcs[i].live_at_peak = funcs[i].live;
		}
		add_call(API_MALLOC, func, "ok", ret, p, size, t);
	}
	pthread_mutex_unlock(&mu);
}

void truth_free(const char *func, cudaError_t ret, void *ptr)
{
	uint64_t t = now_ns();
	uint64_t p = (uint64_t)(uintptr_t)ptr;
	uint64_t size = 0;
	const char *outcome;
	long li;

	pthread_mutex_lock(&mu);
	li = p ? find_live(p) : -1;
	if (li >= 0)
		size = lives[li].size;
	if (!tracing) {
		if (ret == cudaSuccess && li >= 0) {
			pre_allocations--;
			pre_bytes -= size;
			lives[li] = lives[--nlives];
		}
		pthread_mutex_unlock(&mu);
		return;
	}
	if (ret != cudaSuccess) {
		outcome = "failed";
	} else if (p == 0) {
		outcome = "null";
		tot.null_frees++;
	} else if (li < 0) {
		fprintf(stderr, "truth: %s freed %#llx, never allocated\n",
			func, (unsigned long long)p);
		abort();
	} else if (lives[li].func == SIZE_MAX) {
		outcome = "unknown";
		tot.unknown_frees++;
		lives[li] = lives[--nlives];
	} else {
		outcome = "ok";
		tot.frees++;
		tot.live_bytes -= size;
		funcs[lives[li].func].live -= size;
		lives[li] = lives[--nlives];
	}
	add_call(API_FREE, func, outcome, ret, p, size, t);
	pthread_mutex_unlock(&mu);
}

static void write_json(FILE *f)
{
	size_t i;
	const char *sep;

	fprintf(f, "{\n  \"scenario\": \"%s\",\n  \"pid\": %d,\n", scenario,
		(int)getpid());
	fprintf(f, "  \"capacity_bytes\": %llu,\n",
		(unsigned long long)truth_capacity());
	fprintf(f,
		"  \"totals\": {\"allocations\": %llu, \"frees\": %llu, "
		"\"failed_allocations\": %llu, \"unknown_frees\": %llu, "
		"\"null_frees\": %llu, \"zero_size_allocations\": %llu, "
		"\"allocated_bytes\": %llu, \"peak_bytes\": %llu, "
		"\"live_bytes_at_end\": %llu},\n",
		(unsigned long long)tot.allocations,
		(unsigned long long)tot.frees,
		(unsigned long long)tot.failed_allocations,
		(unsigned long long)tot.unknown_frees,
		(unsigned long long)tot.null_frees,
		(unsigned long long)tot.zero_size_allocations,
		(unsigned long long)tot.allocated_bytes,
		(unsigned long long)tot.peak_bytes,
		(unsigned long long)tot.live_bytes);
	fprintf(f, "  \"by_function\": {");
	sep = "\n";
	for (i = 0; i < nfuncs; i++) {
		struct func *fn = &funcs[i];
		if (fn->allocations == 0 && fn->failed == 0)
			continue;
		fprintf(f,
			"%s    \"%s\": {\"allocations\": %llu, "
			"\"allocated_bytes\": %llu, \"live_bytes_at_end\": %llu, "
			"\"live_bytes_at_peak\": %llu, "
			"\"failed_allocations\": %llu}",
			sep, fn->name, (unsigned long long)fn->allocations,
			(unsigned long long)fn->allocated_bytes,
			(unsigned long long)fn->live,
			(unsigned long long)fn->live_at_peak,
			(unsigned long long)fn->failed);
		sep = ",\n";
	}
	fprintf(f, "\n  },\n");
	if (untraced_mode) {
		fprintf(f,
			"  \"preexisting\": {\"allocations\": %llu, "
			"\"bytes\": %llu},\n",
			(unsigned long long)pre_allocations,
			(unsigned long long)pre_bytes);
	}
	fprintf(f, "  \"calls\": [");
	sep = "\n";
	for (i = 0; i < ncalls; i++) {
		struct call *c = &calls[i];
		fprintf(f,
			"%s    {\"api\": \"%s\", \"func\": \"%s\", \"tid\": %d, "
			"\"size\": %llu, \"ptr\": %llu, \"ret\": %d, "
			"\"t_ns\": %llu, \"outcome\": \"%s\"}",
			sep, c->api == API_MALLOC ? "cudaMalloc" : "cudaFree",
			c->func, (int)c->tid, (unsigned long long)c->size,
			(unsigned long long)c->ptr, c->ret,
			(unsigned long long)c->t_ns, c->outcome);
		sep = ",\n";
	}
	fprintf(f, "\n  ]\n}\n");
}

int truth_write(void)
{
	const char *path = getenv("VRAMPROF_TRUTH");
	char tmp[4096];
	FILE *f;
	int err;

	if (path == NULL || *path == '\0')
		return 0;
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	pthread_mutex_lock(&mu);
	f = fopen(tmp, "w");
	if (f == NULL) {
		pthread_mutex_unlock(&mu);
		fprintf(stderr, "truth: create %s: %s\n", tmp, strerror(errno));
		return -1;
	}
	write_json(f);
	err = ferror(f);
	if (fclose(f) != 0 || err || rename(tmp, path) != 0) {
		pthread_mutex_unlock(&mu);
		fprintf(stderr, "truth: write %s: %s\n", path, strerror(errno));
		unlink(tmp);
		return -1;
	}
	dirty = 0;
	written = 1;
	pthread_mutex_unlock(&mu);
	return 0;
}
