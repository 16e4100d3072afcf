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
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_CAPACITY ((uint64_t)16 << 30)
#define MAX_DEVICES 64
#define NO_DEVICE (-1)

/* What a live entry or a call is about. */
enum space { SP_DEVICE, SP_HOST, SP_RESERVE, SP_PHYS, SP_MAP, SP_BLOCK, SP_NONE };

struct call {
	const char *api;
	const char *func;
	const char *outcome;
	pid_t tid;
	uint64_t size, ptr, t_ns, stream, handle;
	int ret, device, has_handle, retry;
};

struct func {
	const char *name;
	uint64_t allocations, allocated_bytes, live, live_at_peak, failed;
};

/* A live allocation: key is the pointer, or the handle (SP_PHYS), or the
 * mapped address (SP_MAP, with handle). */
struct live {
	enum space space;
	uint64_t key, size, handle;
	size_t func; /* index in funcs, or SIZE_MAX when preexisting */
	int device;
};

struct book {
	uint64_t allocations, frees, allocated_bytes;
};

struct devstat {
	int used;
	uint64_t allocations, allocated_bytes, peak_bytes, live;
};

struct owner {
	uint64_t handle;
	int device;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const char *scenario = "unknown";
static int tracing, untraced_mode;
static int dirty = 1, written;
static int child_mode; /* writes $VRAMPROF_TRUTH.<pid> */
static pid_t parent_pid;
static int atfork_registered;

static struct call *calls;
static size_t ncalls, ccalls;
static struct func *funcs;
static size_t nfuncs, cfuncs;
static struct live *lives;
static size_t nlives, clives;
static pid_t *children;
static size_t nchildren, cchildren;
static struct owner *streams, *pools;
static size_t nstreams, cstreams, npools, cpools;

static __thread int cur_device;

static struct {
	uint64_t allocations, frees, failed_allocations, unknown_frees,
		null_frees, zero_size_allocations, allocated_bytes, peak_bytes,
		live_bytes;
} tot;
static uint64_t pre_allocations, pre_bytes;

/* The block layer (a caching allocator's blocks): only logs that record
 * blocks (pool_mode) write it. Block lives are SP_BLOCK entries whose func
 * indexes bfuncs. */
struct block_call {
	const char *api, *func, *outcome;
	pid_t tid;
	uint64_t size, ptr, t_ns, stream;
	int device;
};
struct pool_event {
	const char *func;
	struct truth_pool_state st;
	uint64_t t_ns;
};
static int pool_mode;
static struct func *bfuncs;
static size_t nbfuncs, cbfuncs;
static struct block_call *bcalls;
static size_t nbcalls, cbcalls;
static struct pool_event *retries, *frags;
static size_t nretries, cretries, nfrags, cfrags;
static struct {
	uint64_t allocations, frees, failed_allocations, allocated_bytes, peak, live,
		empty_cache_calls;
} blk;
static __thread const char *block_func;
static struct book books[2]; /* TRUTH_RUNTIME, TRUTH_DRIVER */
static struct devstat devs[MAX_DEVICES];
static struct {
	uint64_t allocations, frees, allocated_bytes, peak_bytes, live;
} host;
static struct {
	uint64_t reserves, unreserves, reserved_peak, reserved, creates, releases,
		physical_peak, physical, maps, unmaps, mapped;
} vmm;

/* The program's own verdict on itself (truth_label_*): written as "label"
 * only when the program gave one. */
struct defect {
	const char *kind, *site;
	uint64_t bytes;
};
static int label_healthy;
static struct defect *defects;
static size_t ndefects, cdefects;
/* The program's loop (truth_step): its step function, how many steps began,
 * the last start, and the gaps between starts. */
static const char *step_func;
static uint64_t step_count, step_last_ns;
static uint64_t *step_gaps; /* the time between consecutive starts */
static size_t cstep_gaps;

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

/* exit_gate holds the process at its end, its truth written, while
 * $VRAMPROF_TRUTH_EXIT_GATE names a FIFO: it opens it for reading and reads
 * to end of file, so it exits only once a writer has opened the FIFO and
 * closed it again. A parent that must see the process alive at its end
 * (wait(2) forgets that a child was stopped and continued once it exits)
 * opens the FIFO: when that open returns, the process is at its end. */
static void exit_gate(void)
{
	const char *gate = getenv("VRAMPROF_TRUTH_EXIT_GATE");
	char buf[64];
	int fd;

	if (gate == NULL || *gate == '\0')
		return;
	while ((fd = open(gate, O_RDONLY)) < 0 && errno == EINTR)
		;
	if (fd < 0) {
		fprintf(stderr, "truth: open exit gate %s: %s\n", gate, strerror(errno));
		return;
	}
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n == 0 || (n < 0 && errno != EINTR))
			break;
	}
	close(fd);
}

static void at_exit(void)
{
	pthread_mutex_lock(&mu);
	int again = dirty || !written;
	pthread_mutex_unlock(&mu);
	if (again)
		truth_write();
	exit_gate();
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&mu);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&mu);
}

/* A fork()ed child starts its own, empty log (streams and pools stay known:
 * their handles are still valid) and writes $VRAMPROF_TRUTH.<pid>. */
static void fork_child(void)
{
	pthread_mutex_init(&mu, NULL);
	ncalls = nfuncs = nlives = nchildren = 0;
	memset(&tot, 0, sizeof(tot));
	memset(books, 0, sizeof(books));
	memset(devs, 0, sizeof(devs));
	memset(&host, 0, sizeof(host));
	memset(&vmm, 0, sizeof(vmm));
	pre_allocations = pre_bytes = 0;
	nbfuncs = nbcalls = nretries = nfrags = 0;
	memset(&blk, 0, sizeof(blk));
	label_healthy = 0;
	ndefects = 0;
	step_func = NULL;
	step_count = step_last_ns = 0;
	child_mode = 1;
	parent_pid = getppid();
	dirty = 1;
	written = 0;
}

static void start(const char *name)
{
	scenario = name;
	if (!atfork_registered) {
		atfork_registered = 1;
		pthread_atfork(fork_prepare, fork_parent, fork_child);
	}
	atexit(at_exit);
}

void truth_init(const char *name)
{
	tracing = 1;
	start(name);
}

void truth_init_untraced(const char *name)
{
	untraced_mode = 1;
	start(name);
}

void truth_init_child(const char *name)
{
	tracing = 1;
	child_mode = 1;
	parent_pid = getppid();
	start(name);
}

void truth_start_tracing(void)
{
	pthread_mutex_lock(&mu);
	tracing = 1;
	pthread_mutex_unlock(&mu);
}

void truth_add_child(pid_t pid)
{
	pthread_mutex_lock(&mu);
	children = grow(children, &cchildren, nchildren, sizeof(*children));
	children[nchildren++] = pid;
	dirty = 1;
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

void check_cu(int ret, const char *what)
{
	if (ret != 0) {
		fprintf(stderr, "%s: CUDA driver error %d\n", what, ret);
		exit(3);
	}
}

/* ---- devices, streams, pools ---- */

int truth_current_device(void)
{
	return cur_device;
}

static void own(struct owner **tab, size_t *n, size_t *cap, uint64_t h, int dev)
{
	pthread_mutex_lock(&mu);
	*tab = grow(*tab, cap, *n, sizeof(**tab));
	(*tab)[(*n)++] = (struct owner){h, dev};
	pthread_mutex_unlock(&mu);
}

static int owner_of(struct owner *tab, size_t n, uint64_t h)
{
	int dev = NO_DEVICE;

	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < n; i++)
		if (tab[i].handle == h)
			dev = tab[i].device;
	pthread_mutex_unlock(&mu);
	return dev;
}

void truth_stream(uint64_t stream, int device)
{
	own(&streams, &nstreams, &cstreams, stream, device);
}

/* The default streams (0, legacy 1, per-thread 2) are the current device's. */
int truth_stream_device(uint64_t stream)
{
	if (stream <= 2)
		return cur_device;
	return owner_of(streams, nstreams, stream);
}

void truth_pool(uint64_t pool, int device)
{
	own(&pools, &npools, &cpools, pool, device);
}

int truth_pool_device(uint64_t pool)
{
	return owner_of(pools, npools, pool);
}

/* ---- bookkeeping (callers hold mu) ---- */

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

static long find_live(enum space sp, uint64_t key)
{
	size_t i;

	for (i = 0; i < nlives; i++)
		if (lives[i].space == sp && lives[i].key == key)
			return (long)i;
	return -1;
}

static struct call *add_call(const char *api, const char *func, const char *outcome,
			     int ret, uint64_t ptr, uint64_t size, uint64_t t, int device,
			     uint64_t stream)
{
	struct call *c;

	calls = grow(calls, &ccalls, ncalls, sizeof(*calls));
	c = &calls[ncalls++];
	memset(c, 0, sizeof(*c));
	c->api = api;
	c->func = func;
	c->outcome = outcome;
	c->tid = gettid();
	c->size = size;
	c->ptr = ptr;
	c->ret = ret;
	c->t_ns = t;
	c->device = device;
	c->stream = stream;
	dirty = 1;
	return c;
}

static struct devstat *dev_stat(int device)
{
	if (device < 0 || device >= MAX_DEVICES) {
		fprintf(stderr, "truth: device %d out of range\n", device);
		abort();
	}
	devs[device].used = 1;
	return &devs[device];
}

static void add_live(enum space sp, uint64_t key, uint64_t size, uint64_t handle, size_t fi,
		     int device, const char *func)
{
	if (find_live(sp, key) >= 0) {
		fprintf(stderr, "truth: %s got live address/handle %#llx again: "
			"scenario races alloc against free\n",
			func, (unsigned long long)key);
		abort();
	}
	lives = grow(lives, &clives, nlives, sizeof(*lives));
	lives[nlives++] = (struct live){sp, key, size, handle, fi, device};
}

/* device_gain counts size bytes of device memory (an allocation or physical
 * VMM memory) that function fi now holds on device. */
static void device_gain(size_t fi, int device, uint64_t size)
{
	struct devstat *d = dev_stat(device);

	tot.allocations++;
	tot.allocated_bytes += size;
	tot.live_bytes += size;
	funcs[fi].allocations++;
	funcs[fi].allocated_bytes += size;
	funcs[fi].live += size;
	d->allocations++;
	d->allocated_bytes += size;
	d->live += size;
	if (d->live > d->peak_bytes)
		d->peak_bytes = d->live;
	/* Strictly greater: the first time a peak level is reached wins. */
	if (tot.live_bytes > tot.peak_bytes) {
		tot.peak_bytes = tot.live_bytes;
		for (size_t i = 0; i < nfuncs; i++)
			funcs[i].live_at_peak = funcs[i].live;
	}
}

static void device_loss(struct live *l)
{
	tot.frees++;
	tot.live_bytes -= l->size;
	funcs[l->func].live -= l->size;
	devs[l->device].live -= l->size;
}

static void book(int level, int is_free, uint64_t size)
{
	for (int lv = level; lv <= TRUTH_DRIVER; lv++) {
		if (is_free) {
			books[lv].frees++;
		} else {
			books[lv].allocations++;
			books[lv].allocated_bytes += size;
		}
	}
}

/* ---- device memory ---- */

static void alloc_impl(const char *func, const char *api, int level, int ret, uint64_t ptr,
		       uint64_t size, int device, uint64_t stream, int retry)
{
	struct call *c = NULL;
	uint64_t t = now_ns();
	uint64_t p = ret == 0 ? ptr : 0;
	size_t fi;

	pthread_mutex_lock(&mu);
	if (!tracing) {
		if (ret == 0 && size > 0) {
			add_live(SP_DEVICE, p, size, 0, SIZE_MAX, device, func);
			pre_allocations++;
			pre_bytes += size;
		}
		pthread_mutex_unlock(&mu);
		return;
	}
	fi = func_index(func);
	dev_stat(device);
	if (ret != 0) {
		tot.failed_allocations++;
		funcs[fi].failed++;
		c = add_call(api, func, "failed", ret, 0, size, t, device, stream);
	} else if (size == 0) {
		tot.zero_size_allocations++;
		c = add_call(api, func, "zero", ret, p, size, t, device, stream);
	} else {
		add_live(SP_DEVICE, p, size, 0, fi, device, func);
		device_gain(fi, device, size);
		book(level, 0, size);
		c = add_call(api, func, "ok", ret, p, size, t, device, stream);
	}
	c->retry = retry;
	pthread_mutex_unlock(&mu);
}

void truth_alloc(const char *func, const char *api, int level, int ret, uint64_t ptr,
		 uint64_t size, int device, uint64_t stream)
{
	alloc_impl(func, api, level, ret, ptr, size, device, stream, 0);
}

void truth_segment_alloc(const char *func, int ret, uint64_t ptr, uint64_t size, int device,
			 int retry)
{
	alloc_impl(func, "cudaMalloc", TRUTH_RUNTIME, ret, ptr, size, device, 0, retry);
}

void truth_dfree(const char *func, const char *api, int level, int ret, uint64_t p,
		 uint64_t stream)
{
	uint64_t t = now_ns();
	uint64_t size = 0;
	int device = cur_device;
	const char *outcome;
	long li;

	pthread_mutex_lock(&mu);
	li = p ? find_live(SP_DEVICE, p) : -1;
	if (li >= 0) {
		size = lives[li].size;
		device = lives[li].device;
	}
	if (!tracing) {
		if (ret == 0 && li >= 0) {
			pre_allocations--;
			pre_bytes -= size;
			lives[li] = lives[--nlives];
		}
		pthread_mutex_unlock(&mu);
		return;
	}
	if (ret != 0) {
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
		book(level, 1, 0);
		lives[li] = lives[--nlives];
	} else {
		outcome = "ok";
		device_loss(&lives[li]);
		book(level, 1, 0);
		lives[li] = lives[--nlives];
	}
	add_call(api, func, outcome, ret, p, size, t, device, stream);
	pthread_mutex_unlock(&mu);
}

void truth_malloc(const char *func, cudaError_t ret, void *ptr, size_t size)
{
	truth_alloc(func, "cudaMalloc", TRUTH_RUNTIME, ret, (uint64_t)(uintptr_t)ptr, size,
		    cur_device, 0);
}

void truth_free(const char *func, cudaError_t ret, void *ptr)
{
	truth_dfree(func, "cudaFree", TRUTH_RUNTIME, ret, (uint64_t)(uintptr_t)ptr, 0);
}

/* ---- pinned host memory: its own space, never in totals ---- */

void truth_host_alloc(const char *func, const char *api, int level, int ret, uint64_t ptr,
		      uint64_t size)
{
	uint64_t t = now_ns();
	uint64_t p = ret == 0 ? ptr : 0;

	(void)level;
	pthread_mutex_lock(&mu);
	if (ret == 0) {
		add_live(SP_HOST, p, size, 0, SIZE_MAX, NO_DEVICE, func);
		host.allocations++;
		host.allocated_bytes += size;
		host.live += size;
		if (host.live > host.peak_bytes)
			host.peak_bytes = host.live;
	}
	add_call(api, func, ret == 0 ? "ok" : "failed", ret, p, size, t, NO_DEVICE, 0);
	pthread_mutex_unlock(&mu);
}

void truth_host_free(const char *func, const char *api, int level, int ret, uint64_t p)
{
	uint64_t t = now_ns();
	uint64_t size = 0;
	const char *outcome = "failed";
	long li;

	(void)level;
	pthread_mutex_lock(&mu);
	li = p ? find_live(SP_HOST, p) : -1;
	if (li >= 0)
		size = lives[li].size;
	if (ret == 0 && p == 0) {
		outcome = "null";
	} else if (ret == 0) {
		if (li < 0) {
			fprintf(stderr, "truth: %s freed host %#llx, never allocated\n", func,
				(unsigned long long)p);
			abort();
		}
		outcome = "ok";
		host.frees++;
		host.live -= size;
		lives[li] = lives[--nlives];
	}
	add_call(api, func, outcome, ret, p, size, t, NO_DEVICE, 0);
	pthread_mutex_unlock(&mu);
}

/* ---- virtual memory management ---- */

static void vmm_call(const char *api, const char *func, int ret, uint64_t ptr, uint64_t size,
		     uint64_t t, int device, uint64_t handle)
{
	struct call *c = add_call(api, func, ret == 0 ? "ok" : "failed", ret, ptr, size, t,
				  device, 0);

	c->handle = handle;
	c->has_handle = 1;
}

void truth_reserve(const char *func, int ret, uint64_t ptr, uint64_t size)
{
	uint64_t t = now_ns();

	pthread_mutex_lock(&mu);
	if (ret == 0) {
		add_live(SP_RESERVE, ptr, size, 0, SIZE_MAX, NO_DEVICE, func);
		vmm.reserves++;
		vmm.reserved += size;
		if (vmm.reserved > vmm.reserved_peak)
			vmm.reserved_peak = vmm.reserved;
	}
	vmm_call("cuMemAddressReserve", func, ret, ret == 0 ? ptr : 0, size, t, NO_DEVICE, 0);
	pthread_mutex_unlock(&mu);
}

void truth_unreserve(const char *func, int ret, uint64_t ptr, uint64_t size)
{
	uint64_t t = now_ns();
	long li;

	pthread_mutex_lock(&mu);
	if (ret == 0) {
		li = find_live(SP_RESERVE, ptr);
		if (li < 0) {
			fprintf(stderr, "truth: %s freed range %#llx, never reserved\n", func,
				(unsigned long long)ptr);
			abort();
		}
		vmm.unreserves++;
		vmm.reserved -= lives[li].size;
		lives[li] = lives[--nlives];
	}
	vmm_call("cuMemAddressFree", func, ret, ptr, size, t, NO_DEVICE, 0);
	pthread_mutex_unlock(&mu);
}

/* Physical memory is device memory: totals, by_function, devices. */
void truth_create(const char *func, int ret, uint64_t handle, uint64_t size, int device)
{
	uint64_t t = now_ns();
	size_t fi;

	pthread_mutex_lock(&mu);
	fi = func_index(func);
	dev_stat(device);
	if (ret == 0) {
		add_live(SP_PHYS, handle, size, handle, fi, device, func);
		device_gain(fi, device, size);
		book(TRUTH_DRIVER, 0, size);
		vmm.creates++;
		vmm.physical += size;
		if (vmm.physical > vmm.physical_peak)
			vmm.physical_peak = vmm.physical;
	} else {
		tot.failed_allocations++;
		funcs[fi].failed++;
	}
	vmm_call("cuMemCreate", func, ret, 0, size, t, device, ret == 0 ? handle : 0);
	pthread_mutex_unlock(&mu);
}

/* Scenarios unmap a handle before releasing it: the memory is gone at
 * release. */
void truth_release(const char *func, int ret, uint64_t handle)
{
	uint64_t t = now_ns();
	uint64_t size = 0;
	int device = NO_DEVICE;
	long li;

	pthread_mutex_lock(&mu);
	li = find_live(SP_PHYS, handle);
	if (li >= 0) {
		size = lives[li].size;
		device = lives[li].device;
	}
	if (ret == 0) {
		if (li < 0) {
			fprintf(stderr, "truth: %s released handle %#llx, never created\n", func,
				(unsigned long long)handle);
			abort();
		}
		device_loss(&lives[li]);
		book(TRUTH_DRIVER, 1, 0);
		vmm.releases++;
		vmm.physical -= size;
		lives[li] = lives[--nlives];
	}
	vmm_call("cuMemRelease", func, ret, 0, size, t, device, handle);
	pthread_mutex_unlock(&mu);
}

void truth_map(const char *func, int ret, uint64_t ptr, uint64_t size, uint64_t handle)
{
	uint64_t t = now_ns();
	long hi;
	int device;

	pthread_mutex_lock(&mu);
	hi = find_live(SP_PHYS, handle);
	device = hi >= 0 ? lives[hi].device : NO_DEVICE;
	if (ret == 0) {
		add_live(SP_MAP, ptr, size, handle, SIZE_MAX, device, func);
		vmm.maps++;
		vmm.mapped += size;
	}
	vmm_call("cuMemMap", func, ret, ptr, size, t, device, handle);
	pthread_mutex_unlock(&mu);
}

/* Scenarios unmap exactly one mapping per call: the record names its handle. */
void truth_unmap(const char *func, int ret, uint64_t ptr, uint64_t size)
{
	uint64_t t = now_ns();
	uint64_t handle = 0;
	int device = NO_DEVICE;
	long li;

	pthread_mutex_lock(&mu);
	li = find_live(SP_MAP, ptr);
	if (li >= 0) {
		handle = lives[li].handle;
		device = lives[li].device;
	}
	if (ret == 0) {
		if (li < 0 || lives[li].size != size) {
			fprintf(stderr, "truth: %s unmapped %#llx, not one mapping\n", func,
				(unsigned long long)ptr);
			abort();
		}
		vmm.unmaps++;
		vmm.mapped -= size;
		lives[li] = lives[--nlives];
	}
	vmm_call("cuMemUnmap", func, ret, ptr, size, t, device, handle);
	pthread_mutex_unlock(&mu);
}

void truth_set_device(const char *func, const char *api, int ret, int device)
{
	uint64_t t = now_ns();

	pthread_mutex_lock(&mu);
	if (ret == 0)
		cur_device = device;
	add_call(api, func, ret == 0 ? "ok" : "failed", ret, 0, 0, t, device, 0);
	pthread_mutex_unlock(&mu);
}

void truth_ctx_create(const char *func, int ret, uint64_t ctx, int device)
{
	uint64_t t = now_ns();

	pthread_mutex_lock(&mu);
	if (ret == 0)
		cur_device = device;
	add_call("cuCtxCreate_v2", func, ret == 0 ? "ok" : "failed", ret, ctx, 0, t, device, 0);
	pthread_mutex_unlock(&mu);
}

void truth_ctx_destroy(const char *func, int ret, uint64_t ctx, int device, int was_current)
{
	uint64_t t = now_ns();

	pthread_mutex_lock(&mu);
	if (ret == 0 && was_current)
		cur_device = 0;
	add_call("cuCtxDestroy_v2", func, ret == 0 ? "ok" : "failed", ret, ctx, 0, t, device, 0);
	pthread_mutex_unlock(&mu);
}

/* ---- the block layer ---- */

static size_t bfunc_index(const char *name)
{
	size_t i;

	for (i = 0; i < nbfuncs; i++)
		if (strcmp(bfuncs[i].name, name) == 0)
			return i;
	bfuncs = grow(bfuncs, &cbfuncs, nbfuncs, sizeof(*bfuncs));
	memset(&bfuncs[nbfuncs], 0, sizeof(*bfuncs));
	bfuncs[nbfuncs].name = name;
	return nbfuncs++;
}

static void add_bcall(const char *api, const char *func, const char *outcome, uint64_t ptr,
		      uint64_t size, int device, uint64_t stream, uint64_t t)
{
	struct block_call *c;

	bcalls = grow(bcalls, &cbcalls, nbcalls, sizeof(*bcalls));
	c = &bcalls[nbcalls++];
	*c = (struct block_call){api, func, outcome, gettid(), size, ptr, t, stream, device};
	dirty = 1;
}

void truth_block_enter(const char *func)
{
	block_func = func;
	pthread_mutex_lock(&mu);
	pool_mode = 1;
	pthread_mutex_unlock(&mu);
}

void truth_block_alloc(const char *func, uint64_t ptr, uint64_t size, int device,
		       uint64_t stream)
{
	uint64_t t = now_ns();
	size_t fi;

	pthread_mutex_lock(&mu);
	pool_mode = 1;
	fi = bfunc_index(func);
	if (ptr == 0) {
		blk.failed_allocations++;
		bfuncs[fi].failed++;
		add_bcall("c10_alloc", func, "failed", 0, size, device, stream, t);
	} else {
		add_live(SP_BLOCK, ptr, size, 0, fi, device, func);
		blk.allocations++;
		blk.allocated_bytes += size;
		blk.live += size;
		bfuncs[fi].allocations++;
		bfuncs[fi].allocated_bytes += size;
		bfuncs[fi].live += size;
		if (blk.live > blk.peak) {
			blk.peak = blk.live;
			for (size_t i = 0; i < nbfuncs; i++)
				bfuncs[i].live_at_peak = bfuncs[i].live;
		}
		add_bcall("c10_alloc", func, "ok", ptr, size, device, stream, t);
	}
	pthread_mutex_unlock(&mu);
}

void truth_block_free(const char *func, int ret, uint64_t ptr)
{
	uint64_t t = now_ns();
	uint64_t size = 0;
	int device = cur_device;
	long li;

	pthread_mutex_lock(&mu);
	pool_mode = 1;
	li = ptr ? find_live(SP_BLOCK, ptr) : -1;
	if (ret == 0) {
		if (li < 0) {
			fprintf(stderr, "truth: %s freed block %#llx, never allocated\n", func,
				(unsigned long long)ptr);
			abort();
		}
		size = lives[li].size;
		device = lives[li].device;
		blk.frees++;
		blk.live -= size;
		bfuncs[lives[li].func].live -= size;
		lives[li] = lives[--nlives];
	}
	add_bcall("c10_free", func, ret == 0 ? "ok" : "failed", ptr, size, device, 0, t);
	pthread_mutex_unlock(&mu);
}

void truth_empty_cache(const char *func)
{
	uint64_t t = now_ns();

	pthread_mutex_lock(&mu);
	pool_mode = 1;
	blk.empty_cache_calls++;
	add_bcall("c10_empty_cache", func, "ok", 0, 0, cur_device, 0, t);
	pthread_mutex_unlock(&mu);
}

static void add_pool_event(struct pool_event **tab, size_t *n, size_t *cap, const char *func,
			   const struct truth_pool_state *st)
{
	uint64_t t = now_ns();

	pthread_mutex_lock(&mu);
	pool_mode = 1;
	*tab = grow(*tab, cap, *n, sizeof(**tab));
	(*tab)[(*n)++] = (struct pool_event){func ? func : "unknown", *st, t};
	dirty = 1;
	pthread_mutex_unlock(&mu);
}

void truth_pool_retry(const struct truth_pool_state *st)
{
	add_pool_event(&retries, &nretries, &cretries, block_func, st);
}

void truth_block_oom(const char *func, const struct truth_pool_state *st)
{
	add_pool_event(&frags, &nfrags, &cfrags, func, st);
}

#define U(x) ((unsigned long long)(x))

static void write_state(FILE *f, const struct truth_pool_state *st)
{
	fprintf(f,
		"\"device\": %d, \"requested\": %llu, \"rounded\": %llu, "
		"\"segment_size\": %llu, \"reserved_bytes\": %llu, \"allocated_bytes\": %llu, "
		"\"requested_bytes\": %llu, \"cached_free_bytes\": %llu, "
		"\"largest_free_range\": %llu, \"segments\": %llu, "
		"\"device_free_bytes\": %llu, \"device_total_bytes\": %llu",
		st->device, U(st->requested), U(st->rounded), U(st->segment_size),
		U(st->reserved_bytes), U(st->allocated_bytes), U(st->requested_bytes),
		U(st->cached_free_bytes), U(st->largest_free_range), U(st->segments),
		U(st->device_free_bytes), U(st->device_total_bytes));
}

/* oom_kind: fragmentation when the cache held enough free bytes in total
 * but no free range fitted (defragmenting, e.g. expandable segments, would
 * have served it); capacity when even the whole cache could not. */
static const char *oom_kind(const struct truth_pool_state *st)
{
	return st->cached_free_bytes >= st->rounded ? "fragmentation" : "capacity";
}

static void write_blocks(FILE *f)
{
	size_t i;
	const char *sep;

	fprintf(f,
		"  \"blocks\": {\"allocations\": %llu, \"frees\": %llu, "
		"\"failed_allocations\": %llu, \"allocated_bytes\": %llu, "
		"\"peak_allocated_bytes\": %llu, \"live_bytes_at_end\": %llu, "
		"\"empty_cache_calls\": %llu, \"alloc_retries\": %llu},\n",
		U(blk.allocations), U(blk.frees), U(blk.failed_allocations),
		U(blk.allocated_bytes), U(blk.peak), U(blk.live), U(blk.empty_cache_calls),
		U(nretries));
	fprintf(f, "  \"by_function_blocks\": {");
	sep = "\n";
	for (i = 0; i < nbfuncs; i++) {
		struct func *fn = &bfuncs[i];
		fprintf(f,
			"%s    \"%s\": {\"allocations\": %llu, "
			"\"allocated_bytes\": %llu, \"live_bytes_at_end\": %llu, "
			"\"live_bytes_at_peak\": %llu, \"failed_allocations\": %llu}",
			sep, fn->name, U(fn->allocations), U(fn->allocated_bytes), U(fn->live),
			U(fn->live_at_peak), U(fn->failed));
		sep = ",\n";
	}
	fprintf(f, "\n  },\n  \"retries\": [");
	sep = "\n";
	for (i = 0; i < nretries; i++) {
		struct pool_event *e = &retries[i];
		fprintf(f, "%s    {\"func\": \"%s\", ", sep, e->func);
		write_state(f, &e->st);
		fprintf(f,
			", \"released_bytes\": %llu, \"released_segments\": %llu, "
			"\"outcome\": \"%s\", \"t_ns\": %llu}",
			U(e->st.released_bytes), U(e->st.released_segments),
			e->st.retry_succeeded ? "succeeded" : "failed", U(e->t_ns));
		sep = ",\n";
	}
	fprintf(f, "\n  ],\n  \"fragmentation\": [");
	sep = "\n";
	for (i = 0; i < nfrags; i++) {
		struct pool_event *e = &frags[i];
		fprintf(f, "%s    {\"func\": \"%s\", ", sep, e->func);
		write_state(f, &e->st);
		fprintf(f, ", \"oom_kind\": \"%s\", \"t_ns\": %llu}", oom_kind(&e->st),
			U(e->t_ns));
		sep = ",\n";
	}
	fprintf(f, "\n  ],\n  \"block_calls\": [");
	sep = "\n";
	for (i = 0; i < nbcalls; i++) {
		struct block_call *c = &bcalls[i];
		fprintf(f,
			"%s    {\"api\": \"%s\", \"func\": \"%s\", \"tid\": %d, "
			"\"size\": %llu, \"ptr\": %llu, \"t_ns\": %llu, \"outcome\": \"%s\", "
			"\"device\": %d, \"stream\": %llu}",
			sep, c->api, c->func, (int)c->tid, U(c->size), U(c->ptr), U(c->t_ns),
			c->outcome, c->device, U(c->stream));
		sep = ",\n";
	}
	fprintf(f, "\n  ],\n");
}

/* ---- labels ---- */

void truth_label_healthy(void)
{
	pthread_mutex_lock(&mu);
	label_healthy = 1;
	dirty = 1;
	pthread_mutex_unlock(&mu);
}

void truth_label_defect(const char *kind, const char *site, uint64_t bytes)
{
	pthread_mutex_lock(&mu);
	defects = grow(defects, &cdefects, ndefects + 1, sizeof(*defects));
	defects[ndefects++] = (struct defect){kind, site, bytes};
	dirty = 1;
	pthread_mutex_unlock(&mu);
}

void truth_step(const char *func)
{
	uint64_t t = now_ns();

	pthread_mutex_lock(&mu);
	if (step_func == NULL)
		step_func = func;
	if (strcmp(step_func, func) == 0) {
		if (step_count > 0) {
			step_gaps = grow(step_gaps, &cstep_gaps, step_count, sizeof(*step_gaps));
			step_gaps[step_count - 1] = t - step_last_ns;
		}
		step_count++;
		step_last_ns = t;
	}
	dirty = 1;
	pthread_mutex_unlock(&mu);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* step_period is the median time between step starts (the upper middle of
 * an even count), 0 with fewer than two steps. */
static uint64_t step_period(void)
{
	size_t n = step_count > 1 ? step_count - 1 : 0;

	if (n == 0)
		return 0;
	qsort(step_gaps, n, sizeof(*step_gaps), cmp_u64);
	return step_gaps[n / 2];
}

static void write_label(FILE *f)
{
	if (!label_healthy && ndefects == 0)
		return;
	fprintf(f, "  \"label\": {\"healthy\": %s, \"defects\": [",
		ndefects == 0 ? "true" : "false");
	for (size_t i = 0; i < ndefects; i++)
		fprintf(f, "%s{\"kind\": \"%s\", \"site\": \"%s\", \"bytes\": %llu}",
			i ? ", " : "", defects[i].kind, defects[i].site, U(defects[i].bytes));
	fprintf(f, "]");
	if (step_count > 0)
		fprintf(f, ", \"steps\": {\"func\": \"%s\", \"count\": %llu, \"period_ns\": %llu}",
			step_func, U(step_count), U(step_period()));
	fprintf(f, "},\n");
}

/* ---- output ---- */

static void write_json(FILE *f)
{
	size_t i;
	const char *sep;

	fprintf(f, "{\n  \"scenario\": \"%s\",\n  \"pid\": %d,\n", scenario,
		(int)getpid());
	fprintf(f, "  \"capacity_bytes\": %llu,\n", U(truth_capacity()));
	fprintf(f,
		"  \"totals\": {\"allocations\": %llu, \"frees\": %llu, "
		"\"failed_allocations\": %llu, \"unknown_frees\": %llu, "
		"\"null_frees\": %llu, \"zero_size_allocations\": %llu, "
		"\"allocated_bytes\": %llu, \"peak_bytes\": %llu, "
		"\"live_bytes_at_end\": %llu},\n",
		U(tot.allocations), U(tot.frees), U(tot.failed_allocations),
		U(tot.unknown_frees), U(tot.null_frees), U(tot.zero_size_allocations),
		U(tot.allocated_bytes), U(tot.peak_bytes), U(tot.live_bytes));
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
			sep, fn->name, U(fn->allocations), U(fn->allocated_bytes),
			U(fn->live), U(fn->live_at_peak), U(fn->failed));
		sep = ",\n";
	}
	fprintf(f, "\n  },\n");
	if (untraced_mode) {
		fprintf(f,
			"  \"preexisting\": {\"allocations\": %llu, "
			"\"bytes\": %llu},\n",
			U(pre_allocations), U(pre_bytes));
	}
	fprintf(f, "  \"devices\": {");
	sep = "";
	for (i = 0; i < MAX_DEVICES; i++) {
		struct devstat *d = &devs[i];
		if (!d->used)
			continue;
		fprintf(f,
			"%s\"%zu\": {\"allocations\": %llu, \"allocated_bytes\": %llu, "
			"\"peak_bytes\": %llu, \"live_bytes_at_end\": %llu}",
			sep, i, U(d->allocations), U(d->allocated_bytes), U(d->peak_bytes),
			U(d->live));
		sep = ", ";
	}
	fprintf(f, "},\n");
	fprintf(f,
		"  \"host\": {\"allocations\": %llu, \"frees\": %llu, "
		"\"allocated_bytes\": %llu, \"peak_bytes\": %llu, "
		"\"live_bytes_at_end\": %llu},\n",
		U(host.allocations), U(host.frees), U(host.allocated_bytes),
		U(host.peak_bytes), U(host.live));
	fprintf(f,
		"  \"vmm\": {\"reserves\": %llu, \"unreserves\": %llu, "
		"\"reserved_bytes_peak\": %llu, \"reserved_bytes_at_end\": %llu, "
		"\"creates\": %llu, \"releases\": %llu, \"physical_bytes_peak\": %llu, "
		"\"physical_bytes_at_end\": %llu, \"maps\": %llu, \"unmaps\": %llu, "
		"\"mapped_bytes_at_end\": %llu},\n",
		U(vmm.reserves), U(vmm.unreserves), U(vmm.reserved_peak), U(vmm.reserved),
		U(vmm.creates), U(vmm.releases), U(vmm.physical_peak), U(vmm.physical),
		U(vmm.maps), U(vmm.unmaps), U(vmm.mapped));
	fprintf(f,
		"  \"books\": {\"runtime\": {\"allocations\": %llu, \"frees\": %llu, "
		"\"allocated_bytes\": %llu}, \"driver\": {\"allocations\": %llu, "
		"\"frees\": %llu, \"allocated_bytes\": %llu}},\n",
		U(books[TRUTH_RUNTIME].allocations), U(books[TRUTH_RUNTIME].frees),
		U(books[TRUTH_RUNTIME].allocated_bytes), U(books[TRUTH_DRIVER].allocations),
		U(books[TRUTH_DRIVER].frees), U(books[TRUTH_DRIVER].allocated_bytes));
	fprintf(f, "  \"children\": [");
	for (i = 0; i < nchildren; i++)
		fprintf(f, "%s%d", i ? ", " : "", (int)children[i]);
	fprintf(f, "],\n");
	if (child_mode)
		fprintf(f, "  \"parent_pid\": %d,\n", (int)parent_pid);
	write_label(f);
	if (pool_mode)
		write_blocks(f);
	fprintf(f, "  \"calls\": [");
	sep = "\n";
	for (i = 0; i < ncalls; i++) {
		struct call *c = &calls[i];
		fprintf(f,
			"%s    {\"api\": \"%s\", \"func\": \"%s\", \"tid\": %d, "
			"\"size\": %llu, \"ptr\": %llu, \"ret\": %d, "
			"\"t_ns\": %llu, \"outcome\": \"%s\", \"device\": %d, "
			"\"stream\": %llu",
			sep, c->api, c->func, (int)c->tid, U(c->size), U(c->ptr), c->ret,
			U(c->t_ns), c->outcome, c->device, U(c->stream));
		if (c->has_handle)
			fprintf(f, ", \"handle\": %llu", U(c->handle));
		if (c->retry)
			fprintf(f, ", \"retry\": true");
		fprintf(f, "}");
		sep = ",\n";
	}
	fprintf(f, "\n  ]\n}\n");
}

/* write_to writes the log to path; mu is held. */
static int write_to(const char *path)
{
	char tmp[4096];
	FILE *f;
	int err;

	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	f = fopen(tmp, "w");
	if (f == NULL) {
		fprintf(stderr, "truth: create %s: %s\n", tmp, strerror(errno));
		return -1;
	}
	write_json(f);
	err = ferror(f);
	if (fclose(f) != 0 || err || rename(tmp, path) != 0) {
		fprintf(stderr, "truth: write %s: %s\n", path, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}

/* A process in a tree (a child, or a parent that registered children)
 * writes $VRAMPROF_TRUTH.<pid>; a parent then also writes $VRAMPROF_TRUTH,
 * last. A lone process writes $VRAMPROF_TRUTH only. */
int truth_write(void)
{
	const char *path = getenv("VRAMPROF_TRUTH");
	char own_path[4096];
	int ret = 0;

	if (path == NULL || *path == '\0')
		return 0;
	pthread_mutex_lock(&mu);
	if (child_mode || nchildren > 0) {
		snprintf(own_path, sizeof(own_path), "%s.%d", path, (int)getpid());
		ret = write_to(own_path);
	}
	if (ret == 0 && !child_mode)
		ret = write_to(path);
	if (ret == 0) {
		dirty = 0;
		written = 1;
	}
	pthread_mutex_unlock(&mu);
	return ret;
}
