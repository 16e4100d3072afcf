// torchdrv drives PyTorch's real CUDA caching allocator (c10's
// CUDACachingAllocator in Debian's libc10_cuda.so, PyTorch 2.6.0) over the
// fake CUDA runtime and driver in testdata/cuda, and writes down what it did
// as JSON: its own count of the tensors it made and freed, the allocator's
// own statistics (getDeviceStats, cacheInfo, snapshot), the text of every
// OutOfMemoryError it caught, and the fake driver's counters.
//
// Usage: torchdrv SCENARIO (see scenarios below); the truth goes to
// $VRAMPROF_TRUTH (nothing when unset). Exit 0, or 1 after an
// OutOfMemoryError (truth written first, as a trainer that dies of it), 2 on
// bad usage, 3 when the allocator misbehaves (an OOM that should not happen,
// a missing one).
//
// Tensors come from allocator->allocate(n), as at::empty does: that path
// fires the pytorch:malloc USDT note (raw_alloc does not); freeing the
// DataPtr fires pytorch:free. Each scenario function below calls allocate
// itself and is noinline, so it is the caller of c10's frames in a stack.
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <deque>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#define NOINLINE __attribute__((noinline))

namespace {

using c10::DataPtr;
namespace alloc = c10::cuda::CUDACachingAllocator;
using Stat = c10::CachingDeviceAllocator::Stat;
using StatType = c10::CachingDeviceAllocator::StatType;

constexpr size_t KiB = 1024, MiB = 1024 * KiB;

// A tensor: the allocator's DataPtr and the requested size.
struct Tensor {
	DataPtr data;
	size_t size = 0;
	const char *site = nullptr;
};

// Per function that allocated: what the program asked for.
struct Site {
	uint64_t allocations = 0, frees = 0, allocated_bytes = 0, live = 0, live_bytes = 0;
	uint64_t failed = 0;
};

// The allocator's segments at one moment (its snapshot), summed.
struct Geometry {
	uint64_t segments = 0, large_segments = 0, expandable_segments = 0, total_size = 0, allocated_size = 0,
		 requested_size = 0, free_blocks = 0, largest_free_block = 0;
};

struct OOM {
	std::string function;
	uint64_t size = 0;
	std::string message;
	// Just after it was caught (the allocator freed what cache it could
	// before it threw).
	c10::CachingDeviceAllocator::DeviceStats stats;
	Geometry geometry;
};

Geometry geometry();

alloc::CUDAAllocator *A;
std::map<std::string, Site> sites;
std::vector<OOM> ooms;
uint64_t n_alloc, n_free, n_failed, bytes_alloc, bytes_freed, live_bytes, peak_bytes, live_count;
uint64_t empty_cache_calls;

// book charges a tensor the allocator just handed out to site (the calling
// function).
NOINLINE Tensor book(const char *site, DataPtr data, size_t n)
{
	Tensor t;
	t.data = std::move(data);
	t.size = n;
	t.site = site;
	Site &s = sites[site];
	s.allocations++;
	s.allocated_bytes += n;
	s.live++;
	s.live_bytes += n;
	n_alloc++;
	bytes_alloc += n;
	live_bytes += n;
	live_count++;
	if (live_bytes > peak_bytes)
		peak_bytes = live_bytes;
	return t;
}

// MAKE(n) allocates a tensor of n bytes in the function it is written in: the
// allocate call is that function's own (its line is the site's line).
#define MAKE(n) book(__func__, A->allocate(n), (n))

// drop frees a tensor (pytorch:free fires inside).
void drop(Tensor &t)
{
	if (!t.data)
		return;
	t.data.clear();
	Site &s = sites[t.site];
	s.frees++;
	s.live--;
	s.live_bytes -= t.size;
	n_free++;
	bytes_freed += t.size;
	live_bytes -= t.size;
	live_count--;
	t.size = 0;
}

void drop_all(std::vector<Tensor> &v)
{
	for (auto &t : v)
		drop(t);
	v.clear();
}

// failed books a request the allocator refused with an OutOfMemoryError.
void failed(const char *site, size_t n, const c10::OutOfMemoryError &e)
{
	sites[site].failed++;
	n_failed++;
	OOM o;
	o.function = site;
	o.size = n;
	o.message = e.what_without_backtrace();
	o.stats = A->getDeviceStats(0);
	o.geometry = geometry();
	ooms.push_back(o);
}

void pause_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0)
		;
}

uint64_t now_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// ---- labels: what is wrong with the program, by its own account ----
//
// As testdata/scenarios/truth.h's truth_label_healthy, truth_label_defect
// and truth_step (../README.md, "Labels"): a scenario says what a person
// would judge of it, with bytes computed from what it made and kept
// (checked against the allocator's statistics where they say the same).

struct Defect {
	std::string kind, site;
	uint64_t bytes;
};

bool labelled_healthy;
std::vector<Defect> defects;
const char *step_func;
std::vector<uint64_t> step_starts;

void label_healthy()
{
	labelled_healthy = true;
}

void label_defect(const char *kind, const char *site, uint64_t bytes)
{
	defects.push_back(Defect{kind, site, bytes});
}

// step marks the start of one step of the loop (first thing in the step
// function, func = __func__); only the first function named counts.
void step(const char *func)
{
	if (step_func == nullptr)
		step_func = func;
	if (strcmp(step_func, func) == 0)
		step_starts.push_back(now_ns());
}

// step_period is the median time between step starts (the upper middle of
// an even count), 0 with fewer than two steps.
uint64_t step_period()
{
	std::vector<uint64_t> gaps;
	for (size_t i = 1; i < step_starts.size(); i++)
		gaps.push_back(step_starts[i] - step_starts[i - 1]);
	if (gaps.empty())
		return 0;
	std::sort(gaps.begin(), gaps.end());
	return gaps[gaps.size() / 2];
}

// check exits 3 when the program's own arithmetic disagrees with the
// allocator's: the label would be wrong.
void check(const char *what, uint64_t want, uint64_t got)
{
	if (want != got) {
		fprintf(stderr, "torchdrv: %s: computed %llu, the allocator says %llu\n", what,
			(unsigned long long)want, (unsigned long long)got);
		_exit(3);
	}
}

// reserved and requested are getDeviceStats' aggregate current figures.
uint64_t reserved()
{
	return A->getDeviceStats(0).reserved_bytes[(size_t)StatType::AGGREGATE].current;
}

uint64_t requested()
{
	return A->getDeviceStats(0).requested_bytes[(size_t)StatType::AGGREGATE].current;
}

// ---- a trainer: weights once, activations per step, optionally a leak ----

std::vector<Tensor> weights, activations, leaked;

NOINLINE void load_model()
{
	weights.push_back(MAKE(64 * MiB));
	weights.push_back(MAKE(32 * MiB));
	weights.push_back(MAKE(16 * MiB + 1000));
	weights.push_back(MAKE(600 * KiB));
}

NOINLINE void forward(size_t grow)
{
	activations.push_back(MAKE(8 * MiB + grow));
	activations.push_back(MAKE(4 * MiB));
	activations.push_back(MAKE(2 * MiB + 12345));
	activations.push_back(MAKE(1 * MiB));
	activations.push_back(MAKE(300 * KiB));
}

NOINLINE void backward(size_t grow)
{
	activations.push_back(MAKE(16 * MiB + grow));
	activations.push_back(MAKE(8 * MiB));
	activations.push_back(MAKE(3000000));
	activations.push_back(MAKE(777));
}

NOINLINE void optimizer_step()
{
	drop_all(activations);
}

// leak_step keeps 1 MiB per step (a tensor of metrics kept on the GPU).
NOINLINE void leak_step()
{
	leaked.push_back(MAKE(1 * MiB));
}

NOINLINE void release_cache()
{
	A->emptyCache();
	empty_cache_calls++;
}

NOINLINE void teardown()
{
	drop_all(weights);
}

// train: 40 steps of 5 ms, each forward, backward, leak_step (1 MiB kept),
// optimizer_step; every empty_every steps (0: never) and at the end,
// empty_cache. The weights are freed at the end; the leak stays live.
void train(int empty_every)
{
	load_model();
	for (int i = 0; i < 40; i++) {
		forward(0);
		backward(0);
		leak_step();
		optimizer_step();
		if (empty_every > 0 && (i + 1) % empty_every == 0)
			release_cache();
		pause_ms(5);
	}
	teardown();
	if (empty_every > 0)
		release_cache();
}

// healthy: the weights once, then 400 steps of 2 ms whose activations grow
// by 256 KiB a step until step 40 and repeat after (the cache warms up in the
// first steps, then stays flat); nothing is kept. The weights are freed at
// the end.
void healthy()
{
	uint64_t warm = 0;
	load_model();
	for (int i = 0; i < 400; i++) {
		size_t grow = (size_t)(i % 40) * 256 * KiB;
		forward(grow);
		backward(grow);
		optimizer_step();
		pause_ms(2);
		if (i == 39)
			warm = reserved();
	}
	check("reserved after the first cycle", warm, reserved());
	teardown();
}

// ---- a fragmentation OOM ----

std::vector<Tensor> cache;

// fill_cache: 6 MiB tensors (three to a 20 MiB large-pool segment) until the
// allocator runs out; the refused request is booked as failed.
NOINLINE int fill_cache()
{
	for (;;) {
		try {
			cache.push_back(MAKE(6 * MiB));
		} catch (const c10::OutOfMemoryError &e) {
			failed(__func__, 6 * MiB, e);
			return 0;
		}
		if (cache.size() > 1000)
			return -1;
	}
}

// free_two_of_three frees the first two tensors of every three: each
// segment keeps one 6 MiB tensor and a 12 MiB hole.
NOINLINE void free_two_of_three()
{
	std::vector<Tensor> kept;
	for (size_t i = 0; i < cache.size(); i++) {
		if (i % 3 == 2)
			kept.push_back(std::move(cache[i]));
		else
			drop(cache[i]);
	}
	cache = std::move(kept);
}

// grow_activations asks for 16 MiB: no cached block is that large, and no
// segment can be had.
NOINLINE int grow_activations(size_t n)
{
	try {
		cache.push_back(MAKE(n));
		return -1;
	} catch (const c10::OutOfMemoryError &e) {
		failed(__func__, n, e);
		return 0;
	}
}

NOINLINE void release_all()
{
	drop_all(cache);
	drop_all(weights);
}

// ---- expandable segments ----

std::vector<Tensor> batch;

NOINLINE void hold_weights()
{
	weights.push_back(MAKE(64 * MiB));
}

NOINLINE void fill_batches()
{
	for (int i = 0; i < 20; i++)
		batch.push_back(MAKE(6 * MiB));
}

NOINLINE void free_every_other()
{
	std::vector<Tensor> kept;
	for (size_t i = 0; i < batch.size(); i++) {
		if (i % 2 == 1)
			kept.push_back(std::move(batch[i]));
		else
			drop(batch[i]);
	}
	batch = std::move(kept);
}

NOINLINE int big_batch(size_t n)
{
	try {
		batch.push_back(MAKE(n));
		return -1;
	} catch (const c10::OutOfMemoryError &e) {
		failed(__func__, n, e);
		return 0;
	}
}

NOINLINE void release_batches()
{
	drop_all(batch);
	drop_all(weights);
}

// ---- the labelled corpus on the real allocator ----
//
// The main cases of testdata/corpus (../corpus/*.c), with corpus.h's model:
// weights made once, activations sized by the batch's tokens, gradients
// freed by zero_grad, and Adam's state made lazily at the first step. Each
// scenario labels itself (healthy, or its defects with the bytes it kept).

constexpr int NW = 5, NA = 4;
const size_t net_sizes[NW] = {64 * MiB, 32 * MiB, 16 * MiB + 4096, 3 * MiB, 256 * KiB};
Tensor net_w[NW], net_g[NW], net_m[NW], net_v[NW], net_a[NA];

// net_bytes: the weights (or any one of grads, exp_avg, exp_avg_sq).
uint64_t net_bytes()
{
	uint64_t n = 0;
	for (size_t s : net_sizes)
		n += s;
	return n;
}

// act_size: activation i for a batch of tokens tokens.
size_t act_size(int i, size_t tokens)
{
	static const size_t per_token[NA] = {16 * KiB, 8 * KiB, 2 * KiB, 0};
	return i == NA - 1 ? 64 * KiB : tokens * per_token[i] + (i == 2 ? 100 : 0);
}

NOINLINE void load_net()
{
	for (int i = 0; i < NW; i++)
		net_w[i] = MAKE(net_sizes[i]);
}

NOINLINE void net_forward(size_t tokens)
{
	for (int i = 0; i < NA; i++)
		net_a[i] = MAKE(act_size(i, tokens));
}

// net_backward: the gradients and a temporary input gradient; the
// activations are freed as it goes.
NOINLINE void net_backward(size_t tokens)
{
	Tensor grad_input = MAKE(tokens * 8 * KiB);
	for (int i = 0; i < NW; i++)
		if (!net_g[i].data)
			net_g[i] = MAKE(net_sizes[i]);
	drop(grad_input);
	for (auto &a : net_a)
		drop(a);
}

// adam_step: Adam's state (exp_avg, exp_avg_sq) is made at the first step.
NOINLINE void adam_step()
{
	for (int i = 0; i < NW; i++)
		if (!net_m[i].data) {
			net_m[i] = MAKE(net_sizes[i]);
			net_v[i] = MAKE(net_sizes[i]);
		}
}

NOINLINE void zero_grad()
{
	for (auto &g : net_g)
		drop(g);
}

// free_net: the end of the script (Python's exit frees every tensor).
NOINLINE void free_net()
{
	for (int i = 0; i < NW; i++) {
		drop(net_m[i]);
		drop(net_v[i]);
		drop(net_w[i]);
	}
}

// train_step: one step of tokens tokens; keep (when set) runs after the
// forward pass; adam false is plain SGD (no state).
NOINLINE void train_step(int i, size_t tokens, void (*keep)(int), bool adam)
{
	step(__func__);
	net_forward(tokens);
	if (keep != nullptr)
		keep(i);
	net_backward(tokens);
	if (adam)
		adam_step();
	zero_grad();
	pause_ms(2);
}

// WARMUP: the step after which a healthy trainer's cache holds every size
// it needs (corpus.h's): reserved memory stays flat after it (checked).
constexpr int WARMUP = 3;

// h_warmup: 400 steps whose batch grows from 32 to 1280 tokens over the
// first 40 and repeats that cycle: the cache grows in the first cycle, then
// stays flat.
int run_h_warmup()
{
	uint64_t warm = 0;
	load_net();
	for (int i = 0; i < 400; i++) {
		train_step(i, 32 * (size_t)(1 + i % 40), nullptr, true);
		if (i == 39)
			warm = reserved();
	}
	check("reserved after the first cycle", warm, reserved());
	free_net();
	label_healthy();
	return 0;
}

// h_lazy_optim: Adam's state (twice the weights) made at step 0 and kept.
int run_h_lazy_optim()
{
	uint64_t warm = 0;
	load_net();
	for (int i = 0; i < 60; i++) {
		train_step(i, 512, nullptr, true);
		if (i == WARMUP)
			warm = reserved();
	}
	check("reserved after the warm-up", warm, reserved());
	check("live: weights and Adam's state", 3 * net_bytes(), requested());
	free_net();
	label_healthy();
	return 0;
}

// eval_batch: 2048 tokens without gradients, and 6 MiB of logits, freed.
NOINLINE void eval_batch()
{
	Tensor h = MAKE(2048 * 16 * KiB);
	Tensor logits = MAKE(6 * MiB);
	drop(h);
	drop(logits);
}

NOINLINE void evaluate()
{
	for (int b = 0; b < 3; b++)
		eval_batch();
	pause_ms(2);
}

// h_eval_every: an eval pass after every 10 of 70 steps; the first grows
// the cache, the later ones reuse it.
int run_h_eval_every()
{
	uint64_t warm = 0;
	load_net();
	for (int i = 0; i < 70; i++) {
		train_step(i, 512, nullptr, true);
		if (i % 10 == 9)
			evaluate();
		if (i == 9)
			warm = reserved();
	}
	check("reserved after the first eval", warm, reserved());
	free_net();
	label_healthy();
	return 0;
}

std::vector<Tensor> kept_tensors;
uint64_t kept_bytes;

// keep allocates n bytes in the calling function and keeps it.
#define KEEP(n) (kept_tensors.push_back(MAKE(n)), kept_bytes += (n))

// evaluate_small: 64 tensors of 256 KiB (eight 2 MiB small-pool segments),
// freed: they stay cached.
NOINLINE void evaluate_small()
{
	std::vector<Tensor> p;
	for (int i = 0; i < 64; i++)
		p.push_back(MAKE(256 * KiB));
	drop_all(p);
}

// cache_mask keeps a 192 KiB attention mask per step.
NOINLINE void cache_mask(int)
{
	KEEP(192 * KiB);
}

// b_hidden_in_cache: a leak the segments never show: every mask fits in
// the cached small segments, so reserved memory stays flat after the
// warm-up (checked); only the tensors grow. Leak at cache_mask.
int run_b_hidden_in_cache()
{
	uint64_t warm = 0;
	load_net();
	evaluate_small();
	for (int i = 0; i < 60; i++) {
		train_step(i, 512, cache_mask, true);
		if (i == WARMUP)
			warm = reserved();
	}
	check("reserved after the warm-up (the leak is hidden)", warm, reserved());
	check("mask bytes", 60 * 192 * KiB, kept_bytes);
	check("live: weights, Adam's state and the masks", 3 * net_bytes() + kept_bytes, requested());
	label_defect("leak", "cache_mask", kept_bytes);
	return 0;
}

int late_epoch;

// log_metrics keeps a 1 MiB + 4096 tensor per step from epoch 60 on.
NOINLINE void log_metrics(int)
{
	if (late_epoch >= 60)
		KEEP(1 * MiB + 4096);
}

// b_late_leak: 80 epochs of 2 steps; the leak starts at epoch 60. Leak at
// log_metrics: 20 x 2 x (1 MiB + 4096).
int run_b_late_leak()
{
	load_net();
	for (late_epoch = 0; late_epoch < 80; late_epoch++)
		for (int s = 0; s < 2; s++)
			train_step(s, 256, log_metrics, true);
	check("metric bytes", 20 * 2 * (1 * MiB + 4096), kept_bytes);
	check("live: weights, Adam's state and the metrics", 3 * net_bytes() + kept_bytes, requested());
	label_defect("leak", "log_metrics", kept_bytes);
	return 0;
}

// cache_hidden_states keeps 3 MiB + 2048 per step.
NOINLINE void cache_hidden_states(int)
{
	KEEP(3 * MiB + 2048);
}

// b_expandable_leak: the leak under expandable segments (the cache grows
// by mapping pages, never with cudaMalloc). Leak at cache_hidden_states:
// 60 x (3 MiB + 2048).
int run_b_expandable_leak()
{
	load_net();
	for (int i = 0; i < 60; i++)
		train_step(i, 512, cache_hidden_states, true);
	check("hidden-state bytes", 60 * (3 * MiB + 2048), kept_bytes);
	check("live: weights, Adam's state and the hidden states", 3 * net_bytes() + kept_bytes, requested());
	label_defect("leak", "cache_hidden_states", kept_bytes);
	return 0;
}

// record_loss keeps the step's per-token loss (32768 x 4 bytes) on the GPU.
NOINLINE void record_loss(int)
{
	KEEP(32768 * 4);
}

NOINLINE void train_epoch()
{
	for (int s = 0; s < 20; s++)
		train_step(s, 512, record_loss, true);
}

// b_loss_history: losses kept on the GPU across 6 epochs of 20 steps,
// never moved to the CPU nor cleared. Leak at record_loss: 120 x 128 KiB.
int run_b_loss_history()
{
	load_net();
	for (int e = 0; e < 6; e++)
		train_epoch();
	check("history bytes", 120 * 32768 * 4, kept_bytes);
	check("live: weights, Adam's state and the losses", 3 * net_bytes() + kept_bytes, requested());
	label_defect("leak", "record_loss", kept_bytes);
	return 0;
}

// eval_logits: 12 MiB of logits, freed.
NOINLINE void eval_logits()
{
	Tensor logits = MAKE(12 * MiB);
	drop(logits);
}

// h_empty_cache_periodic: empty_cache after an eval every 25 of 75 steps;
// the next step takes its segments back: a few cudaMalloc calls every 25
// steps.
int run_h_empty_cache_periodic()
{
	load_net();
	for (int i = 0; i < 75; i++) {
		train_step(i, 512, nullptr, true);
		if (i % 25 == 24) {
			eval_logits();
			release_cache();
		}
	}
	free_net();
	label_healthy();
	return 0;
}

NOINLINE void micro_step()
{
	net_forward(256);
	net_backward(256);
	pause_ms(1);
}

// accum_step: 4 micro-batches whose gradients accumulate (made by the
// first), then Adam and zero_grad.
NOINLINE void accum_step()
{
	step(__func__);
	for (int m = 0; m < 4; m++)
		micro_step();
	adam_step();
	zero_grad();
}

// h_grad_accum: 30 steps of gradient accumulation; memory rises within a
// step and falls back, the same every step (reserved flat after step 3,
// checked).
int run_h_grad_accum()
{
	uint64_t warm = 0;
	load_net();
	for (int i = 0; i < 30; i++) {
		accum_step();
		if (i == WARMUP)
			warm = reserved();
	}
	check("reserved after the warm-up", warm, reserved());
	free_net();
	label_healthy();
	return 0;
}

// release_every_step empties the cache (torch.cuda.empty_cache()).
NOINLINE void release_every_step()
{
	A->emptyCache();
	empty_cache_calls++;
}

// b_churn: SGD for 40 steps, empty_cache after each: the next step
// allocates the same segments again. The bytes at stake: what each step
// took back of what the last release gave up (checked equal), summed.
int run_b_churn()
{
	uint64_t released = 0, cycled = 0;
	load_net();
	for (int i = 0; i < 40; i++) {
		uint64_t before = reserved();
		train_step(i, 512, nullptr, false);
		uint64_t grown = reserved() - before;
		if (i > 0) {
			check("a step takes back what the last release gave up", released, grown);
			cycled += grown;
		}
		uint64_t after = reserved();
		release_every_step();
		released = after - reserved();
	}
	free_net();
	label_defect("churn", "release_every_step", cycled);
	return 0;
}

Tensor big_weight;
std::vector<Tensor> bank;

NOINLINE void load_big_model()
{
	big_weight = MAKE(40 * MiB);
}

// bank_features: 3 x 6 MiB per step (one 20 MiB segment each).
NOINLINE void bank_features()
{
	step(__func__);
	for (int j = 0; j < 3; j++)
		bank.push_back(MAKE(6 * MiB));
	pause_ms(2);
}

// prune_bank frees the first and last of every three: per segment a 6 MiB
// hole and an 8 MiB one (the last merges with the 2 MiB tail).
NOINLINE void prune_bank()
{
	for (size_t i = 0; i < bank.size(); i++)
		if (i % 3 != 1)
			drop(bank[i]);
}

NOINLINE void grow_batch(size_t n)
{
	bank.push_back(MAKE(n));
}

// b_frag_oom (210 MiB): a 40 MiB weight, 8 steps of bank_features, then
// prune_bank: 200 MiB reserved, 88 MiB allocated, 112 MiB cached free in
// holes of 6 and 8 MiB. grow_batch's 16 MiB fits in no hole and no segment
// can be had: an OOM with 112 MiB free in the cache. Exit 1.
int run_b_frag_oom()
{
	const uint64_t batch = 16 * MiB, cached_free = 8 * (20 * MiB - 6 * MiB);
	load_big_model();
	for (int i = 0; i < 8; i++)
		bank_features();
	prune_bank();
	try {
		grow_batch(batch);
		return 3;
	} catch (const c10::OutOfMemoryError &e) {
		failed("grow_batch", batch, e);
	}
	const auto &st = ooms.back().stats;
	const size_t agg = (size_t)StatType::AGGREGATE;
	check("cached free at the failure", cached_free,
	      st.reserved_bytes[agg].current - st.allocated_bytes[agg].current);
	check("largest free block at the failure", 8 * MiB, ooms.back().geometry.largest_free_block);
	label_defect("oom", "grow_batch", batch);
	label_defect("fragmentation", "grow_batch", cached_free);
	return 1;
}

NOINLINE Tensor embed(size_t tokens)
{
	return MAKE(tokens * 16 * KiB);
}

// capacity_step: a step that starts with an embedding of the batch.
NOINLINE void capacity_step(size_t tokens)
{
	step(__func__);
	Tensor e = embed(tokens);
	net_forward(tokens);
	net_backward(tokens);
	adam_step();
	zero_grad();
	drop(e);
	pause_ms(2);
}

// b_capacity_oom (512 MiB): the model and Adam's state (345 MiB) live, 12
// steps of 512 tokens, then a batch of 16384 tokens: embed asks 256 MiB,
// more than the device has beside the live tensors, whatever the cache
// does. Exit 1.
int run_b_capacity_oom()
{
	const size_t big = 16384;
	load_net();
	for (int i = 0; i < 12; i++)
		capacity_step(512);
	check("live tensors before the big batch", 3 * net_bytes(), requested());
	if (3 * net_bytes() + big * 16 * KiB <= 536870912)
		return 3;
	try {
		capacity_step(big);
		return 3;
	} catch (const c10::OutOfMemoryError &e) {
		failed("embed", big * 16 * KiB, e);
	}
	label_defect("oom", "embed", big * 16 * KiB);
	return 1;
}

// ---- truth ----

std::string quote(const std::string &s)
{
	std::string o = "\"";
	for (unsigned char c : s) {
		switch (c) {
		case '"':
			o += "\\\"";
			break;
		case '\\':
			o += "\\\\";
			break;
		case '\n':
			o += "\\n";
			break;
		case '\t':
			o += "\\t";
			break;
		default:
			if (c < 0x20) {
				char b[8];
				snprintf(b, sizeof(b), "\\u%04x", c);
				o += b;
			} else {
				o += (char)c;
			}
		}
	}
	return o + "\"";
}

void stat_json(std::ostream &o, const char *name, const Stat &s)
{
	o << quote(name) << ": {\"current\": " << s.current << ", \"peak\": " << s.peak
	  << ", \"allocated\": " << s.allocated << ", \"freed\": " << s.freed << "}";
}

// stats_json writes getDeviceStats: every StatArray's aggregate figure, the
// large and small pools' reserved and allocated bytes, and the counters.
void stats_json(std::ostream &o, const c10::CachingDeviceAllocator::DeviceStats &d)
{
	const size_t agg = (size_t)StatType::AGGREGATE, small = (size_t)StatType::SMALL_POOL,
		     large = (size_t)StatType::LARGE_POOL;
	o << "{";
	stat_json(o, "allocation", d.allocation[agg]);
	o << ", ";
	stat_json(o, "segment", d.segment[agg]);
	o << ", ";
	stat_json(o, "active", d.active[agg]);
	o << ", ";
	stat_json(o, "inactive_split", d.inactive_split[agg]);
	o << ", ";
	stat_json(o, "allocated_bytes", d.allocated_bytes[agg]);
	o << ", ";
	stat_json(o, "reserved_bytes", d.reserved_bytes[agg]);
	o << ", ";
	stat_json(o, "active_bytes", d.active_bytes[agg]);
	o << ", ";
	stat_json(o, "inactive_split_bytes", d.inactive_split_bytes[agg]);
	o << ", ";
	stat_json(o, "requested_bytes", d.requested_bytes[agg]);
	o << ", ";
	stat_json(o, "small_pool_reserved_bytes", d.reserved_bytes[small]);
	o << ", ";
	stat_json(o, "large_pool_reserved_bytes", d.reserved_bytes[large]);
	o << ", ";
	stat_json(o, "small_pool_allocated_bytes", d.allocated_bytes[small]);
	o << ", ";
	stat_json(o, "large_pool_allocated_bytes", d.allocated_bytes[large]);
	o << ", ";
	stat_json(o, "oversize_allocations", d.oversize_allocations);
	o << ", ";
	stat_json(o, "oversize_segments", d.oversize_segments);
	o << ", \"num_alloc_retries\": " << d.num_alloc_retries << ", \"num_ooms\": " << d.num_ooms
	  << ", \"num_sync_all_streams\": " << d.num_sync_all_streams
	  << ", \"num_device_alloc\": " << d.num_device_alloc << ", \"num_device_free\": " << d.num_device_free
	  << ", \"max_split_size\": " << d.max_split_size << "}";
}

// geometry summarizes the allocator's snapshot: its segments and the
// largest free block in any of them.
Geometry geometry()
{
	alloc::SnapshotInfo s = A->snapshot();
	Geometry g;
	for (const auto &seg : s.segments) {
		g.segments++;
		g.total_size += seg.total_size;
		g.allocated_size += seg.allocated_size;
		g.requested_size += seg.requested_size;
		g.expandable_segments += seg.is_expandable;
		g.large_segments += seg.is_large;
		for (const auto &b : seg.blocks)
			if (!b.allocated) {
				g.free_blocks++;
				if (b.size > g.largest_free_block)
					g.largest_free_block = b.size;
			}
	}
	return g;
}

void geometry_json(std::ostream &o, const Geometry &g)
{
	o << "{\"segments\": " << g.segments << ", \"large_segments\": " << g.large_segments
	  << ", \"expandable_segments\": " << g.expandable_segments << ", \"total_size\": " << g.total_size
	  << ", \"allocated_size\": " << g.allocated_size << ", \"requested_size\": " << g.requested_size
	  << ", \"free_blocks\": " << g.free_blocks << ", \"largest_free_block\": " << g.largest_free_block << "}";
}

struct Counters {
	bool ok = false;
	struct fakecuda_counters c{};
};

// driver_counters reads the fake driver's books (libcuda.so.1, which the fake
// runtime dlopen()ed).
Counters driver_counters()
{
	Counters r;
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (h == nullptr)
		return r;
	auto fn = (void (*)(struct fakecuda_counters *))dlsym(h, "fakecuda_counters");
	if (fn != nullptr) {
		fn(&r.c);
		r.ok = true;
	}
	dlclose(h);
	return r;
}

void driver_json(std::ostream &o, const struct fakecuda_counters &c)
{
	o << "{\"allocs\": " << c.allocs << ", \"failed_allocs\": " << c.failed_allocs
	  << ", \"failed_alloc_bytes\": " << c.failed_alloc_bytes << ", \"frees\": " << c.frees
	  << ", \"alloc_bytes\": " << c.alloc_bytes << ", \"freed_bytes\": " << c.freed_bytes
	  << ", \"live_bytes\": " << c.live_bytes << ", \"peak_live_bytes\": " << c.peak_live_bytes
	  << ", \"reserves\": " << c.reserves << ", \"failed_reserves\": " << c.failed_reserves
	  << ", \"address_frees\": " << c.address_frees << ", \"reserved_bytes\": " << c.reserved_bytes
	  << ", \"peak_reserved_bytes\": " << c.peak_reserved_bytes << ", \"creates\": " << c.creates
	  << ", \"failed_creates\": " << c.failed_creates << ", \"failed_create_bytes\": " << c.failed_create_bytes
	  << ", \"releases\": " << c.releases
	  << ", \"created_bytes\": " << c.created_bytes << ", \"released_bytes\": " << c.released_bytes
	  << ", \"physical_bytes\": " << c.physical_bytes << ", \"peak_physical_bytes\": " << c.peak_physical_bytes
	  << ", \"maps\": " << c.maps << ", \"unmaps\": " << c.unmaps << ", \"mapped_bytes\": " << c.mapped_bytes
	  << ", \"peak_mapped_bytes\": " << c.peak_mapped_bytes << ", \"device_bytes\": " << c.device_bytes
	  << ", \"peak_device_bytes\": " << c.peak_device_bytes << "}";
}

const char *env_or_empty(const char *name)
{
	const char *v = getenv(name);
	return v ? v : "";
}

int write_truth(const char *scenario)
{
	const char *path = getenv("VRAMPROF_TRUTH");
	if (path == nullptr || *path == '\0')
		return 0;
	std::ostringstream o;
	size_t largest_cached = 1, largest_guess = 0;
	// cacheInfo raises *largestBlock to the largest cached block; from 0 it
	// starts at cudaMemGetInfo's free bytes (its own initial guess).
	A->cacheInfo(0, &largest_cached);
	A->cacheInfo(0, &largest_guess);
	Counters dc = driver_counters();
	if (!dc.ok) {
		fprintf(stderr, "torchdrv: the fake driver's fakecuda_counters is not there\n");
		return -1;
	}

	o << "{\n  \"scenario\": " << quote(scenario) << ",\n  \"pid\": " << getpid()
	  << ",\n  \"torch\": {\"allocator\": " << quote(A->name())
	  << ", \"PYTORCH_CUDA_ALLOC_CONF\": " << quote(env_or_empty("PYTORCH_CUDA_ALLOC_CONF"))
	  << ", \"PYTORCH_NO_CUDA_MEMORY_CACHING\": " << quote(env_or_empty("PYTORCH_NO_CUDA_MEMORY_CACHING"))
	  << "},\n  \"capacity_bytes\": " << strtoull(env_or_empty("FAKECUDA_CAPACITY"), nullptr, 10)
	  << ",\n  \"tensors\": {\"allocations\": " << n_alloc << ", \"frees\": " << n_free
	  << ", \"failed_allocations\": " << n_failed << ", \"allocated_bytes\": " << bytes_alloc
	  << ", \"freed_bytes\": " << bytes_freed << ", \"peak_bytes\": " << peak_bytes
	  << ", \"live_bytes_at_end\": " << live_bytes << ", \"live_at_end\": " << live_count
	  << "},\n  \"by_function\": {";
	bool first = true;
	for (const auto &kv : sites) {
		const Site &s = kv.second;
		o << (first ? "\n    " : ",\n    ") << quote(kv.first) << ": {\"allocations\": " << s.allocations
		  << ", \"frees\": " << s.frees << ", \"failed_allocations\": " << s.failed
		  << ", \"allocated_bytes\": " << s.allocated_bytes << ", \"live_at_end\": " << s.live
		  << ", \"live_bytes_at_end\": " << s.live_bytes << "}";
		first = false;
	}
	o << "\n  },\n  \"empty_cache_calls\": " << empty_cache_calls << ",\n  \"stats\": ";
	stats_json(o, A->getDeviceStats(0));
	o << ",\n  \"cache_info\": {\"largest_cached_block\": " << (largest_cached == 1 ? 0 : largest_cached)
	  << ", \"largest_block\": " << largest_guess << "},\n  \"snapshot\": ";
	geometry_json(o, geometry());
	o << ",\n  \"ooms\": [";
	for (size_t i = 0; i < ooms.size(); i++) {
		o << (i ? ",\n    " : "\n    ") << "{\"function\": " << quote(ooms[i].function)
		  << ", \"size\": " << ooms[i].size << ", \"message\": " << quote(ooms[i].message)
		  << ", \"stats\": ";
		stats_json(o, ooms[i].stats);
		o << ", \"snapshot\": ";
		geometry_json(o, ooms[i].geometry);
		o << "}";
	}
	o << (ooms.empty() ? "" : "\n  ") << "],\n  ";
	if (labelled_healthy || !defects.empty()) {
		o << "\"label\": {\"healthy\": " << (defects.empty() ? "true" : "false") << ", \"defects\": [";
		for (size_t i = 0; i < defects.size(); i++)
			o << (i ? ", " : "") << "{\"kind\": " << quote(defects[i].kind) << ", \"site\": "
			  << quote(defects[i].site) << ", \"bytes\": " << defects[i].bytes << "}";
		o << "]";
		if (!step_starts.empty())
			o << ", \"steps\": {\"func\": " << quote(step_func) << ", \"count\": " << step_starts.size()
			  << ", \"period_ns\": " << step_period() << "}";
		o << "},\n  ";
	}
	o << "\"driver\": ";
	driver_json(o, dc.c);
	o << "\n}\n";

	std::ofstream f(path);
	f << o.str();
	f.close();
	if (!f) {
		fprintf(stderr, "torchdrv: write %s failed\n", path);
		return -1;
	}
	return 0;
}

// A scenario: the environment it runs the allocator under (set unless the
// caller set it already), and what it does. run returns 0 when the program
// runs to its end, 1 when it ends on an OutOfMemoryError, 3 when the
// allocator did not do what the scenario is built on.
struct Scenario {
	const char *name;
	const char *capacity; // FAKECUDA_CAPACITY
	const char *alloc_conf;
	bool no_caching;
	int (*run)();
};

// leaked_bytes: what leak_step kept (the tensors live at the end), checked
// against the allocator's requested bytes when it counts them.
uint64_t leaked_bytes(bool caching)
{
	uint64_t n = 0;
	for (const auto &t : leaked)
		n += t.size;
	check("leaked bytes", 40 * MiB, n);
	if (caching)
		check("live at the end: the leak", n, requested());
	return n;
}

int run_train()
{
	train(0);
	label_defect("leak", "leak_step", leaked_bytes(true));
	return 0;
}

int run_train_nocache()
{
	train(0);
	label_defect("leak", "leak_step", leaked_bytes(false));
	return 0;
}

int run_train_empty_cache()
{
	train(10);
	label_defect("leak", "leak_step", leaked_bytes(true));
	return 0;
}

int run_healthy()
{
	healthy();
	label_healthy();
	return 0;
}

// frag_oom: 6 MiB tensors fill 20 MiB segments until a segment allocation
// fails (200 MiB: ten segments, thirty tensors); two of every three are freed;
// a 16 MiB request then fails with 140 MiB cached free (ten 12 MiB holes, ten
// 2 MiB tails). Both OOMs are caught; the program then frees everything and
// ends with exit 1, as a trainer dying of the second would.
int run_frag_oom()
{
	if (fill_cache() != 0)
		return 3;
	free_two_of_three();
	if (grow_activations(16 * MiB) != 0)
		return 3;
	// The first OOM: c10 asked a 20 MiB segment for the 6 MiB tensor
	// (its message says what it tried). The second: 16 MiB with ten 12 MiB
	// holes and ten 2 MiB tails cached free.
	const uint64_t seg = 20 * MiB, cached_free = 10 * (20 * MiB - 6 * MiB);
	if (ooms[0].message.find("Tried to allocate 20.00 MiB") == std::string::npos)
		return 3;
	const size_t agg = (size_t)StatType::AGGREGATE;
	check("cached free at the second OOM", cached_free,
	      ooms[1].stats.reserved_bytes[agg].current - ooms[1].stats.allocated_bytes[agg].current);
	label_defect("oom", "fill_cache", seg);
	label_defect("oom", "grow_activations", 16 * MiB);
	label_defect("fragmentation", "grow_activations", cached_free);
	release_all();
	return 1;
}

// expandable: the trainer (leak included) under expandable segments, then
// empty_cache: the mapped pages are unmapped and released.
int run_expandable()
{
	train(0);
	release_cache();
	label_defect("leak", "leak_step", leaked_bytes(true));
	return 0;
}

// expandable_oom: 256 MiB. hold_weights 64 MiB; fill_batches 20 x 6 MiB;
// free_every_other frees ten (60 MiB of holes no page can be unmapped
// from); big_batch asks 96 MiB: the segment cannot grow enough, the OOM is
// caught; release_batches frees the rest, empty_cache. Exit 1.
int run_expandable_oom()
{
	hold_weights();
	fill_batches();
	free_every_other();
	if (big_batch(96 * MiB) != 0)
		return 3;
	// Mapped: 64 MiB + 20 x 6 MiB in 20 MiB pages; allocated: 64 MiB + 10
	// x 6 MiB; the rest is the holes and the last page's tail.
	const uint64_t mapped = (64 * MiB + 120 * MiB + 20 * MiB - 1) / (20 * MiB) * (20 * MiB),
		       cached_free = mapped - (64 * MiB + 60 * MiB);
	const size_t agg = (size_t)StatType::AGGREGATE;
	check("reserved (mapped) at the OOM", mapped, ooms[0].stats.reserved_bytes[agg].current);
	check("reserved but unallocated at the OOM", cached_free,
	      ooms[0].stats.reserved_bytes[agg].current - ooms[0].stats.allocated_bytes[agg].current);
	label_defect("oom", "big_batch", 96 * MiB);
	label_defect("fragmentation", "big_batch", cached_free);
	release_batches();
	release_cache();
	return 1;
}

const Scenario scenarios[] = {
	{"train", "17179869184", nullptr, false, run_train},
	{"train_nocache", "17179869184", nullptr, true, run_train_nocache},
	{"train_empty_cache", "17179869184", nullptr, false, run_train_empty_cache},
	{"healthy", "17179869184", nullptr, false, run_healthy},
	{"frag_oom", "209715200", nullptr, false, run_frag_oom},
	{"expandable", "17179869184", "expandable_segments:True", false, run_expandable},
	{"expandable_oom", "268435456", "expandable_segments:True", false, run_expandable_oom},
	{"h_warmup", "17179869184", nullptr, false, run_h_warmup},
	{"h_lazy_optim", "17179869184", nullptr, false, run_h_lazy_optim},
	{"h_eval_every", "17179869184", nullptr, false, run_h_eval_every},
	{"b_hidden_in_cache", "17179869184", nullptr, false, run_b_hidden_in_cache},
	{"b_late_leak", "17179869184", nullptr, false, run_b_late_leak},
	{"b_loss_history", "17179869184", nullptr, false, run_b_loss_history},
	{"h_empty_cache_periodic", "17179869184", nullptr, false, run_h_empty_cache_periodic},
	{"h_grad_accum", "17179869184", nullptr, false, run_h_grad_accum},
	{"b_expandable_leak", "17179869184", "expandable_segments:True", false, run_b_expandable_leak},
	{"b_churn", "17179869184", nullptr, false, run_b_churn},
	{"b_frag_oom", "220200960", nullptr, false, run_b_frag_oom},
	{"b_capacity_oom", "536870912", nullptr, false, run_b_capacity_oom},
};

} // namespace

int main(int argc, char **argv)
{
	const Scenario *sc = nullptr;
	for (const auto &s : scenarios)
		if (argc == 2 && strcmp(argv[1], s.name) == 0)
			sc = &s;
	if (sc == nullptr) {
		fprintf(stderr, "usage: torchdrv SCENARIO (one of:");
		for (const auto &s : scenarios)
			fprintf(stderr, " %s", s.name);
		fprintf(stderr, ")\n");
		return 2;
	}
	// Before the first CUDA call: the fake driver reads FAKECUDA_CAPACITY
	// once, c10 reads its two variables at its first allocation.
	setenv("FAKECUDA_CAPACITY", sc->capacity, 0);
	if (sc->alloc_conf)
		setenv("PYTORCH_CUDA_ALLOC_CONF", sc->alloc_conf, 0);
	if (sc->no_caching)
		setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1", 0);

	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
		fprintf(stderr, "torchdrv: no CUDA device (is the fake driver beside libcudart.so.12?)\n");
		return 3;
	}
	A = alloc::get();
	A->init(n);
	int rc;
	try {
		rc = sc->run();
	} catch (const c10::Error &e) {
		fprintf(stderr, "torchdrv: %s: %s\n", sc->name, e.what_without_backtrace());
		return 3;
	}
	if (rc == 3) {
		fprintf(stderr, "torchdrv: %s: the allocator did not do what the scenario is built on\n", sc->name);
		return 3;
	}
	if (write_truth(sc->name) != 0)
		return 3;
	// What is live stays live: no static destructor frees a tensor (or runs
	// after c10's own statics are gone).
	fflush(nullptr);
	_exit(rc);
}
