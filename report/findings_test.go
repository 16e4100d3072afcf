package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

// The words of the findings, on the scenarios of analysis's finding tests
// (probes/event/eventtest); those tests check the facts, these the sentences.

func TestWordsOOM(t *testing.T) {
	// 3 GiB live at stack 1, then a 2 GiB request at stack 2 fails with
	// cudaErrorMemoryAllocation, then a 1 GiB one at stack 2 fails too.
	s := eventtest.NewStream().Stack(1, "load_model", 5).Stack(2, "forward", 42)
	s.Alloc(1*sec, 0xa, 3*GiB, 1).Fail(2*sec, 2*GiB, 2, 2).Fail(3*sec, GiB, 2, 2).End(4 * sec)
	r := mustAnalyze(t, analysis.Options{}, s.Recs)

	oom := worded(r, analysis.KindOOM)
	require.Len(t, oom, 1)
	assert.Contains(t, oom[0].Summary, "request for 2147483648 bytes (2.00 GiB) at forward (train.py:42)")
	assert.Contains(t, oom[0].Summary, "3221225472 bytes (3.00 GiB) were live")
	require.Len(t, oom[0].Remediation, 2)
	assert.Contains(t, oom[0].Remediation[0], "load_model (train.py:5) with 3221225472 bytes")
	assert.Contains(t, oom[0].Remediation[1], "2 allocation calls ran out of memory in all (3221225472 bytes requested)")
}

func TestWordsFailedCall(t *testing.T) {
	// Stack 1: three cudaMalloc calls fail with 35 (cudaErrorInsufficientDriver);
	// stack 2: one cuMemAlloc_v2 fails with 3 (CUDA_ERROR_NOT_INITIALIZED,
	// which would be cudaErrorInitializationError from the runtime).
	s := eventtest.NewStream().Stack(1, "load_model", 5).Stack(2, "init_pool", 9)
	s.Fail(1*sec, GiB, 1, 35).Fail(2*sec, GiB, 1, 35).Fail(3*sec, MiB, 1, 35)
	s.Ev(event.Event{Time: 4 * sec, Size: 4 * MiB, Stack: 2, Ret: 3, Kind: event.KindAlloc, API: event.APICuMemAlloc})
	s.End(5 * sec)
	r := mustAnalyze(t, analysis.Options{}, s.Recs)

	fc := worded(r, analysis.KindFailedCall)
	require.Len(t, fc, 2)
	assert.Contains(t, fc[0].Summary, "3 allocation calls failed with error 35 (cudaErrorInsufficientDriver) (not out-of-memory)")
	assert.Contains(t, fc[0].Summary, "cudaMalloc of 1073741824 bytes at load_model (train.py:5)")
	assert.Contains(t, fc[0].Remediation[0], "driver is missing or older")
	assert.Contains(t, fc[1].Summary, "1 allocation call failed with error 3 (CUDA_ERROR_NOT_INITIALIZED)")
	assert.NotContains(t, fc[1].Summary, "cudaErrorInitializationError")
	assert.Contains(t, fc[1].Summary, "cuMemAlloc_v2 of 4194304 bytes at init_pool (train.py:9)")
	assert.Contains(t, fc[1].Remediation[0], "the driver API was called before cuInit")
}

// TestSetupHints: every code the analysis calls a setup error has its hint,
// and no other code has one.
func TestSetupHints(t *testing.T) {
	for _, driver := range []bool{false, true} {
		for ret := range int32(1000) {
			_, hint := setupHints[setupKey{driver, ret}]
			assert.Equal(t, analysis.IsSetupError(driver, ret), hint, "driver %v, code %d", driver, ret)
		}
	}
}

func TestWordsPeak(t *testing.T) {
	// t1 s1 +1 MiB (1), t2 s2 +2 MiB (3, peak), t3 free s1 (2),
	// t4 s3 +1 MiB (3 = peak: not new), t5 s3 +512 KiB (3.5 MiB: new peak,
	// crossed by s3's 512 KiB), then everything freed and s1 allocs 1 MiB.
	s := eventtest.NewStream().Stack(1, "f", 1).Stack(2, "g", 2).Stack(3, "h", 3)
	s.Alloc(1, 0xa, MiB, 1).Alloc(2, 0xb, 2*MiB, 2).Free(3, 0xa).
		Alloc(4, 0xc, MiB, 3).Alloc(5, 0xd, 512*KiB, 3).
		Free(6, 0xb).Free(7, 0xc).Free(8, 0xd).Alloc(9, 0xe, MiB, 1).End(10)
	r := mustAnalyze(t, analysis.Options{}, s.Recs)
	peak := worded(r, analysis.KindPeak)
	require.Len(t, peak, 1)
	// 3670016 bytes, crossed by h's 524288 at +5 ns.
	assert.Equal(t, "process 100 peaked at 3670016 bytes (3.50 MiB) at +5 ns; the allocation that crossed it: 524288 bytes at h (train.py:3) on device 0",
		peak[0].Summary)
	// g's 2 MiB are 57.1% of 3.5 MiB: more than half, one stack named.
	require.Len(t, peak[0].Remediation, 1)
	assert.Contains(t, peak[0].Remediation[0], "g (train.py:2): 2097152 bytes (2.00 MiB, 57.1% of the peak) in 1 allocations")
}

func TestWordsLeak(t *testing.T) {
	// 64 ticks, 4 windows ending at ticks 16, 32, 48 and the end.
	r := mustAnalyze(t, analysis.Options{LeakWindows: 4}, eventtest.LeakWindowsStream().Recs)
	leaks := worded(r, analysis.KindLeak)
	require.Len(t, leaks, 1)
	f := leaks[0]
	// The run: 64 ticks of 2^30 ns less 1 ns = 68.72 s.
	assert.Contains(t, f.Remediation[0], "free or detach the buffers allocated at leaky (train.py:10): +67108864 bytes (64.00 MiB) over 68.7 s")
	// Short words: what grows, where, how much, since when; the detection
	// windows are report.json's evidence, not the summary's.
	assert.Contains(t, f.Summary, "device memory allocated at leaky (train.py:10) in process 100 grew by 67108864 bytes (64.00 MiB) since +")
	assert.Contains(t, f.Summary, "64 allocations still live at the end")
	assert.NotContains(t, f.Summary, "detection windows")
}

func TestWordsLeakDefaultWindows(t *testing.T) {
	// A 60 s run; 1 MiB leaked every second from the first: a loop of 60
	// iterations of 1 s, 60 s observed, so the rate is quoted per minute,
	// never per hour, and without a capacity there is no projection.
	s := eventtest.NewStream().Stack(1, "leaky", 10)
	for i := range uint64(60) {
		s.Alloc(i*sec+1, 0x1000+i, MiB, 1)
	}
	s.End(60 * sec)
	r := mustAnalyze(t, analysis.Options{}, s.Recs)
	leaks := worded(r, analysis.KindLeak)
	require.Len(t, leaks, 1)
	// Since the first iteration (its allocation at 1 ns) to the last
	// event (59 s + 1 ns).
	assert.Contains(t, leaks[0].Summary, "device memory allocated at leaky (train.py:10) in process 100 grew by 62914560 bytes (60.00 MiB) since +1 ns (59.0 s), 60 allocations still live at the end")
	assert.Contains(t, leaks[0].Summary, "; 1048576 bytes (1.00 MiB) per iteration over 60 iterations of 1.00 s; 60.00 MiB per minute over 60.0 s")
	assert.NotContains(t, leaks[0].Summary, "per hour")
	assert.NotContains(t, leaks[0].Summary, "runs out")
}

func TestWordsLeakRate(t *testing.T) {
	r := mustAnalyze(t, analysis.Options{}, eventtest.LeakStream(true).Recs)
	leaks := worded(r, analysis.KindLeak)
	require.Len(t, leaks, 1)
	// The truth: sum over i<100 of 1 MiB + 4096 i = 125132800 bytes kept
	// over 100 iterations, 1251328 bytes per iteration.
	assert.Contains(t, leaks[0].Summary, "1251328 bytes (1.19 MiB) per iteration over 100 iterations of 10.0 ms")
	assert.Contains(t, leaks[0].Remediation[1], "each iteration keeps")
	// 100 iterations of ~10 ms observe ~1 s: a rate per second, never per
	// minute; 40 GiB at ~125 MB/s is ~340 s away, beyond 10 x 1 s: the run
	// is too short to project it.
	assert.Contains(t, leaks[0].Summary, "MiB per second over 1.00 s")
	assert.NotContains(t, leaks[0].Summary, "per minute")
	assert.Contains(t, leaks[0].Summary, "; run too short to project when device 0 (42949672960 bytes, 40.00 GiB) runs out: the stack grew by 125132800 bytes (119.34 MiB) over")
	assert.NotContains(t, leaks[0].Remediation[1], "run out in")

	// With 1 GiB, (1073741824 - 125132800) / (1251328 bytes per ~10 ms) =
	// ~7.6 s, within 10 x the ~1 s observed: projected.
	r = mustAnalyze(t, analysis.Options{Capacity: GiB}, eventtest.LeakStream(true).Recs)
	leaks = worded(r, analysis.KindLeak)
	assert.Contains(t, leaks[0].Summary, "; at that rate device 0 (1073741824 bytes, 1.00 GiB) runs out in 7.")
	assert.Contains(t, leaks[0].Remediation[1], "run out in 7.")
	// Without a capacity there is no time to OOM.
	r = mustAnalyze(t, analysis.Options{}, eventtest.LeakStream(false).Recs)
	assert.NotContains(t, worded(r, analysis.KindLeak)[0].Remediation[1], "run out")
}

func TestWordsPinnedHostGrowth(t *testing.T) {
	r := mustAnalyze(t, analysis.Options{}, eventtest.PinnedStream().Recs)
	fs := worded(r, analysis.KindPinnedHostGrowth)
	require.Len(t, fs, 1)
	f := fs[0]
	// 40 x 2101248 = 84049920 bytes over the run.
	assert.Contains(t, f.Summary, "grew by 84049920 bytes (80.16 MiB) over the run (+0 s to +400 ms, 400 ms)")
	// 40 iterations of 10 ms observe 400 ms: per iteration, no rate per
	// second or minute.
	assert.Contains(t, f.Summary, "; 2101248 bytes (2.00 MiB) per iteration over 40 iterations of 10.0 ms;")
	assert.NotContains(t, f.Summary, "per second")
	assert.NotContains(t, f.Summary, "per minute")
	assert.Contains(t, f.Remediation[0], "cudaFreeHost")
	assert.Contains(t, f.Remediation[1], "pinned-memory pool")
	for _, r := range f.Remediation {
		assert.NotContains(t, r, "DataLoader", "no pin_memory frame in the stack")
	}
}

func TestWordsPinnedHostGrowthWindows(t *testing.T) {
	// No device allocation, so no loop: the windows' rate, observed from
	// the end of the first window (+12.9 s) to the end (+68.7 s), 55.8 s:
	// under a minute, so per second, 53 MiB / 55.8 s = 972 KiB. The
	// DataLoader advice needs the pin_memory frame.
	r := mustAnalyze(t, analysis.Options{}, eventtest.PinMemoryStream().Recs)
	fs := worded(r, analysis.KindPinnedHostGrowth)
	require.Len(t, fs, 1)
	assert.Contains(t, fs[0].Summary, "; 972.01 KiB per second over 55.8 s;")
	assert.NotContains(t, fs[0].Summary, "per minute")
	assert.Contains(t, fs[0].Remediation[len(fs[0].Remediation)-1], "persistent_workers=True")
	assert.Contains(t, fs[0].Remediation[len(fs[0].Remediation)-1],
		"runs through pin_memory (torch/utils/data/_utils/pin_memory.py:58)")
}

func TestWordsSpike(t *testing.T) {
	r := mustAnalyze(t, analysis.Options{}, eventtest.SpikeStream().Recs)
	spikes := worded(r, analysis.KindSpike)
	require.Len(t, spikes, 1)
	// Peak: weights 100 + activations 10 + checkpoint 80 MiB; 110 MiB
	// without the checkpoint.
	assert.Contains(t, spikes[0].Summary, "1 short-lived allocations of up to 83886080 bytes (80.00 MiB) at save_checkpoint (train.py:30) in process 100, each freed within 10.0 µs")
	assert.Contains(t, spikes[0].Summary, "without it the peak there was 115343360 bytes")
	assert.Equal(t, []string{"allocate the 80.00 MiB at save_checkpoint (train.py:30) where less is live, in smaller pieces, or on the host (e.g. copy tensors to CPU before saving a checkpoint): it adds 83886080 bytes on top of what is live"},
		spikes[0].Remediation)
}

func TestWordsDeviceImbalance(t *testing.T) {
	const gather = 768*MiB + 123
	r := mustAnalyze(t, analysis.Options{}, eventtest.RanksStream(gather).Recs)
	fs := worded(r, analysis.KindDeviceImbalance)
	require.Len(t, fs, 1)
	f := fs[0]
	assert.Contains(t, f.Summary, "none at device 1's peak")
	// Device 0: 256 + 512 MiB + the gather; device 1: 768 MiB.
	assert.Contains(t, f.Summary, "device 0 peaked at 1610612859 bytes (1.50 GiB), 805306491 bytes (768.00 MiB, 100.0%) above device 1 (805306368 bytes, 768.00 MiB), the lightest of 2 devices in use (device 0: processes 101; device 1: processes 102)")
	assert.Contains(t, f.Remediation[0], "shard it")
}

func TestWordsFragmentationOOM(t *testing.T) {
	// pool_frag_oom's allocator, as analysis's TestFragmentationOOM.
	r := poolResult(t, eventtest.FragmentationOOMPool())

	ooms := worded(r, analysis.KindOOM)
	require.Len(t, ooms, 1)
	f := ooms[0]
	assert.Contains(t, f.Summary, "fragmentation OOM")
	// The truth's geometry: reserved 85983232 in 5 segments, allocated
	// 41943040, cached free 44040192 in 11 ranges, the largest 4194304.
	assert.Contains(t, f.Summary, "; reserved 85983232 bytes in 5 segments, 41943040 allocated to tensors, 44040192 cached free in 11 ranges, the largest 4194304")
	require.Len(t, f.Remediation, 2)
	assert.Contains(t, f.Remediation[0], "expandable_segments:True")
	// 1 + the 20 MiB segments that hold the 4 MiB blocks.
	assert.Contains(t, f.Remediation[1], "max_split_size_mb:21")
	assert.Contains(t, f.Remediation[1], "largest segment (20 MiB)")

	frag := worded(r, analysis.KindFragmentation)
	require.Len(t, frag, 1)
	assert.Contains(t, frag[0].Summary, "44040192 bytes (51.2% of the 85983232 reserved) were cached free in 11 ranges, the largest 4194304: fragmentation, not capacity, ended the run")
}

func TestWordsCapacityOOM(t *testing.T) {
	r := poolResult(t, eventtest.CapacityOOMPool())

	ooms := worded(r, analysis.KindOOM)
	require.Len(t, ooms, 1)
	assert.Contains(t, ooms[0].Summary, "capacity OOM")
	assert.Contains(t, ooms[0].Remediation[0], "reduce the batch size")
	assert.Contains(t, ooms[0].Remediation[1], "would not avoid it")
	// 32 MiB requested, 16 MiB cached free: short by 16777216.
	assert.Contains(t, ooms[0].Remediation[1], "the 16777216 cached free bytes are short of the 33554432 requested by 16777216")
	for _, rem := range ooms[0].Remediation {
		assert.False(t, strings.HasPrefix(rem, "set PYTORCH_CUDA_ALLOC_CONF"), "no allocator setting for a capacity OOM")
	}
}

func TestWordsRetrySucceeded(t *testing.T) {
	s := eventtest.RetryPool()
	r := poolResult(t, s)

	ooms := worded(r, analysis.KindOOM)
	require.Len(t, ooms, 1)
	assert.Contains(t, ooms[0].Summary, "the retry succeeded")
	assert.Equal(t, []string{"set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the cache held 39845888 bytes free, more than the 29360128 requested, but no range above 14680064; expandable segments grow in place and would have served it without flushing the cache"},
		ooms[0].Remediation)
	// Capacity unknown: the retry proved 48234496 - 27262976 + 29360128 =
	// 50331648 available, so T = floor(100 * (50331648 - 29360128) /
	// 50331648) / 100 = 0.41.
	frag := worded(r, analysis.KindFragmentation)
	require.Len(t, frag, 1)
	require.Len(t, frag[0].Remediation, 1)
	assert.Contains(t, frag[0].Remediation[0], "garbage_collection_threshold:0.41 ")
	assert.Contains(t, frag[0].Remediation[0], "set_per_process_memory_fraction")
	assert.Contains(t, frag[0].Remediation[0], "at least 50331648 bytes")
	assert.Contains(t, frag[0].Summary, "27262976 of them in whole free segments")

	// With the capacity known (64 MiB): T = floor(100 * (67108864 -
	// 29360128) / 67108864) / 100 = floor(56.25) / 100 = 0.56.
	r = mustAnalyze(t, analysis.Options{Capacity: 64 * MiB}, s.Recs)
	frag = worded(r, analysis.KindFragmentation)
	require.Len(t, frag, 1)
	assert.Contains(t, frag[0].Remediation[0], "garbage_collection_threshold:0.56 ")
	assert.Contains(t, frag[0].Remediation[0], "; the device has 67108864 bytes;")
}

func TestWordsChurn(t *testing.T) {
	r := poolResult(t, eventtest.EmptyCachePool())

	fs := worded(r, analysis.KindChurn)
	require.Len(t, fs, 1)
	assert.Contains(t, fs[0].Remediation[0], "empty_cache()")
	// A 245 ms run: 122 calls counted over it, not extrapolated to a rate
	// per second; 61 + 61 calls of 10 µs = 1.22 ms.
	assert.Contains(t, fs[0].Summary, "within 5.00 ms on average: 61 cudaMalloc and 61 cudaFree calls (in 245 ms, 1.22 ms inside them)")
	assert.NotContains(t, fs[0].Summary, "per second,")
	// Steps 2..20 took back what the step before released; the loop found
	// is every tensor allocation of this evenly clocked stream, 1 + 20 x 3
	// = 61.
	assert.Contains(t, fs[0].Summary, "; the cache was released and refilled 19 times in 61 iterations")
}

// TestWordsChurnCachingOff: each tensor its own segment, freed right
// after it (caching off), 12 times: the advice names the setting, not an
// empty_cache() to remove.
func TestWordsChurnCachingOff(t *testing.T) {
	s := eventtest.NewPoolStream()
	for range 12 {
		s.Seg(eventtest.SegBase, 3*MiB)
		s.Block(eventtest.SegBase, 3*MiB)
		s.BlockFree(eventtest.SegBase)
		s.SegFree(eventtest.SegBase)
	}
	fs := worded(poolResult(t, s), analysis.KindChurn)
	require.Len(t, fs, 1)
	assert.Contains(t, fs[0].Remediation[0], "the caching allocator is not caching: 12 of the 12 tensor frees went straight to cudaFree")
	assert.Contains(t, fs[0].Remediation[0], "PYTORCH_NO_CUDA_MEMORY_CACHING")
	assert.NotContains(t, fs[0].Remediation[0], "empty_cache()")
}

func TestWordsNoPool(t *testing.T) {
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.Alloc(1, eventtest.SegBase, MiB, 1).Fail(2, GiB, 1, 2).End(3)
	r := mustAnalyze(t, analysis.Options{}, s.Recs)
	require.Len(t, worded(r, analysis.KindOOM), 1)
	assert.Contains(t, worded(r, analysis.KindOOM)[0].Summary, "a request for")
}

func TestWordsChurnFreeStacks(t *testing.T) {
	build := func(withStacks bool) *analysis.Result {
		return poolResult(t, eventtest.ReleaseCyclePool(withStacks))
	}
	fs := worded(build(false), analysis.KindChurn)
	require.Len(t, fs, 1)
	assert.Contains(t, fs[0].Remediation[0], "no stack was captured at the frees")

	fs = worded(build(true), analysis.KindChurn)
	require.Len(t, fs, 1)
	assert.Contains(t, fs[0].Remediation[0], "at release_cache (train.py:3), before the allocations at alloc_block (train.py:1)")
}

// TestWordsOrder: findings that tie on the analysis's rank are listed by
// their words, then their first stack, in every output.
func TestWordsOrder(t *testing.T) {
	// Two leaks of the same growth in one process: 64 ticks of 1 MiB at
	// b_leaky and at a_leaky. Same bytes, severity, kind and process: the
	// summaries ("live bytes allocated at a_leaky..." before "...at
	// b_leaky...") decide, whatever the stack IDs.
	s := eventtest.NewStream().Stack(1, "b_leaky", 10).Stack(2, "a_leaky", 20)
	for i := range uint64(64) {
		s.Alloc(i*gridTick+1, 0x1000+i, MiB, 1)
		s.Alloc(i*gridTick+2, 0x9000+i, MiB, 2)
	}
	r := mustAnalyze(t, analysis.Options{LeakWindows: 4}, s.End(64*gridTick-1).Recs)
	leaks := worded(r, analysis.KindLeak)
	require.Len(t, leaks, 2)
	assert.Equal(t, "a_leaky (train.py:20)", leaks[0].Stacks[0].Site)
	assert.Equal(t, "b_leaky (train.py:10)", leaks[1].Stacks[0].Site)
	j := NewJSON(r)
	var sites []string
	for _, f := range j.Findings {
		if f.Kind == analysis.KindLeak {
			sites = append(sites, f.Stacks[0].Site)
		}
	}
	assert.Equal(t, []string{"a_leaky (train.py:20)", "b_leaky (train.py:10)"}, sites)
}

// TestWordsEveryFinding: every finding of the report's scenarios gets a
// summary, and the outputs list them in one order.
func TestWordsEveryFinding(t *testing.T) {
	for name, recs := range scenarios {
		t.Run(name, func(t *testing.T) {
			res := mustResult(t, recs())
			ws := wordFindings(res)
			require.Len(t, ws, len(res.Findings))
			j := NewJSON(res)
			require.Len(t, j.Findings, len(ws))
			for i, w := range ws {
				assert.NotEmpty(t, w.Summary, "%s finding", w.Kind)
				assert.Equal(t, w.Summary, j.Findings[i].Summary)
				assert.Equal(t, nonNil(w.Remediation), j.Findings[i].Remediation)
			}
		})
	}
}

func TestWordsFragmentationWorst(t *testing.T) {
	r := poolResult(t, eventtest.ScatteredPool())
	fs := worded(r, analysis.KindFragmentation)
	require.Len(t, fs, 1)
	// 33554432 of 83886080 reserved is 40.0%; the last of 32 events 1 ms
	// apart.
	assert.Equal(t, "at +32.0 ms, 33554432 bytes (40.0% of the 83886080 reserved on device 0) were cached free but scattered in 8 ranges, the largest 4194304; 0 segments were pinned by one small block",
		fs[0].Summary)
	assert.Equal(t, []string{"set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: no request above 4194304 bytes could use the 33554432 free bytes without a new segment"},
		fs[0].Remediation)
}

// TestWordsExpandableOOM: eventtest.ExpandableOOMPool's capacity OOM under
// expandable segments (analysis's TestExpandableOOM: 60 MiB of pages asked,
// 25 MiB reserved but unallocated, 20 MiB unmapped by the flush, 35 MiB
// live). The verdict gives those figures, and no remediation proposes
// expandable segments, which are on.
func TestWordsExpandableOOM(t *testing.T) {
	r := mustAnalyze(t, analysis.Options{}, eventtest.ExpandableOOMPool(false).Finish())
	ooms := worded(r, analysis.KindOOM)
	require.Len(t, ooms, 1)
	f := ooms[0]
	assert.Contains(t, f.Summary, "capacity OOM: creating 62914560 bytes (60.00 MiB) of pages for an expandable segment")
	assert.Contains(t, f.Summary, "expandable segments were on: 26214400 bytes were reserved but unallocated, the allocator unmapped 20971520 of them (1 wholly free page) before it gave up, and tensors held 36700160 bytes")
	require.Len(t, f.Remediation, 2)
	assert.Contains(t, f.Remediation[0], "reduce the batch size")
	// 62914560 - 26214400 = 36700160 short.
	assert.Contains(t, f.Remediation[1], "expandable segments are already on, and the allocator unmapped every wholly free page (20971520 bytes) before it raised")
	assert.Contains(t, f.Remediation[1], "short of the 62914560 requested by 36700160")
	ooms = append(ooms, worded(r, analysis.KindFragmentation)...)
	for _, w := range ooms {
		for _, rem := range w.Remediation {
			assert.NotContains(t, rem, "expandable_segments:True")
		}
	}

	// The retry that maps its pages: lower the peak, no setting.
	r = mustAnalyze(t, analysis.Options{}, eventtest.ExpandableOOMPool(true).Finish())
	ooms = worded(r, analysis.KindOOM)
	require.Len(t, ooms, 1)
	assert.Contains(t, ooms[0].Summary, "the allocator unmapped 1 wholly free page (20971520 bytes) and the retry succeeded")
	for _, rem := range ooms[0].Remediation {
		assert.NotContains(t, rem, "expandable_segments:True")
	}
}

// TestMarkdownUnplaced: a block in no traced segment, in a process traced
// from its start (mode run), is said to come from a lost segment record,
// not from before attach.
func TestMarkdownUnplaced(t *testing.T) {
	s := eventtest.NewPoolStream()
	s.Seg(eventtest.SegBase, 20*MiB)
	s.Block(0x1000, 512) // in no segment
	s.Block(eventtest.SegBase, MiB)
	var md bytes.Buffer
	require.NoError(t, WriteMarkdown(&md, poolResult(t, s)))
	assert.Contains(t, md.String(), "512 bytes of live blocks lie in no traced segment (a segment record was lost)")
	assert.NotContains(t, md.String(), "before attach")
}
