package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

// TestFragmentationOOM replays pool_frag_oom's allocator
// (eventtest.FragmentationOOMPool). The truth's fragmentation record:
// reserved 85983232, allocated 41943040, cached free 44040192, largest
// free range 4194304, oom_kind fragmentation.
func TestFragmentationOOM(t *testing.T) {
	r := poolResult(t, eventtest.FragmentationOOMPool())

	require.Len(t, r.Pools, 1)
	pl := r.Pools[0]
	require.Len(t, pl.OOMs, 1, "the failed retry belongs to the first failure")
	o := pl.OOMs[0]
	assert.Equal(t, PoolState{Time: o.Time, ReservedBytes: 85983232, AllocatedBytes: 41943040, CachedFreeBytes: 44040192,
		LargestFreeRange: 4194304, FreeRanges: 11, Segments: 5}, o.State)
	assert.Equal(t, OOMFragmentation, o.Kind)
	assert.Equal(t, OOMFinal, o.Outcome)
	assert.Equal(t, uint64(24*MiB), o.RequestBytes)
	assert.Equal(t, uint64(2*MiB), o.ReleasedBytes)
	assert.Equal(t, 1, o.ReleasedSegments)
	assert.Equal(t, uint64(30e3), o.CostNs, "failed call, one free, failed retry")
	assert.Equal(t, 1, o.Index)
	require.NotEmpty(t, o.LiveStacks)
	assert.Equal(t, Usage{Count: 10, Bytes: 41943040}, o.LiveStacks[0].Usage)
	// What was live: 4 segments (the 2 MiB one too, freed only after) and
	// 10 blocks.
	var segs, blks Usage
	for _, c := range o.Live {
		if c.Layer == event.LayerSegment {
			segs.Count += c.Live.Count
			segs.Bytes += c.Live.Bytes
		} else {
			blks.Count += c.Live.Count
			blks.Bytes += c.Live.Bytes
		}
	}
	assert.Equal(t, Usage{Count: 5, Bytes: 85983232}, segs)
	assert.Equal(t, Usage{Count: 10, Bytes: 41943040}, blks)

	ooms := findings(r, KindOOM)
	require.Len(t, ooms, 1, "one finding per failure, the generic one replaced")
	f := ooms[0]
	assert.Equal(t, SeverityCritical, f.Severity)
	assert.Equal(t, uint64(24*MiB), f.Bytes)
	// The words are report's (TestWordsFragmentationOOM); the facts:
	require.NotNil(t, f.OOM)
	assert.Equal(t, OOMFragmentation, f.OOM.Kind)
	assert.Nil(t, f.OOM.Live, "the finding keeps no copy of what was live")
	require.NotNil(t, f.Pool)
	// 1 + the 20 MiB segments that hold the 4 MiB blocks.
	assert.Equal(t, uint64(20*MiB), f.Pool.MaxSharedSegment)
	assert.Equal(t, uint64(21), f.Pool.SplitSizeMiB)
	assert.Equal(t, AdviceExpandable, f.Pool.Advice)

	frag := findings(r, KindFragmentation)
	require.Len(t, frag, 1)
	assert.Equal(t, uint64(44040192), frag[0].Bytes, "cached free at the failing request")
	assert.Equal(t, SeverityHigh, frag[0].Severity)

	assert.Equal(t, "oom-1.pb.gz", OOMProfileName(&o))
	assert.Equal(t, o.Live, r.AtOOM(&o).Classes)
}

// TestCapacityOOM replays pool_capacity_oom (eventtest.CapacityOOMPool).
// Truth: reserved 58720256, allocated 41943040, cached free 16777216,
// largest free range 16777216, oom_kind capacity.
func TestCapacityOOM(t *testing.T) {
	r := poolResult(t, eventtest.CapacityOOMPool())

	require.Len(t, r.Pools, 1)
	require.Len(t, r.Pools[0].OOMs, 1)
	o := r.Pools[0].OOMs[0]
	assert.Equal(t, uint64(58720256), o.State.ReservedBytes)
	assert.Equal(t, uint64(41943040), o.State.AllocatedBytes)
	assert.Equal(t, uint64(16777216), o.State.CachedFreeBytes)
	assert.Equal(t, uint64(16777216), o.State.LargestFreeRange)
	assert.Equal(t, OOMCapacity, o.Kind)
	assert.Equal(t, OOMFinal, o.Outcome)
	assert.Zero(t, o.ReleasedSegments)

	ooms := findings(r, KindOOM)
	require.Len(t, ooms, 1)
	require.NotNil(t, ooms[0].OOM)
	assert.Equal(t, OOMCapacity, ooms[0].OOM.Kind)
	assert.Equal(t, SeverityCritical, ooms[0].Severity)
	assert.Equal(t, AdviceReduceBatch, ooms[0].Pool.Advice, "no allocator setting for a capacity OOM")
	assert.Empty(t, findings(r, KindFragmentation))
}

// TestRetrySucceeded replays pool_retry (eventtest.RetryPool): the 28 MiB
// segment fails, the allocator frees the 12 and 14 MiB segments (27262976
// bytes) and the retry succeeds. State before the free-all (truth's
// retries[]): reserved 48234496, allocated 8388608, cached free 39845888,
// largest 14680064.
func TestRetrySucceeded(t *testing.T) {
	s := eventtest.RetryPool()
	r := poolResult(t, s)

	require.Len(t, r.Pools, 1)
	require.Len(t, r.Pools[0].OOMs, 1)
	o := r.Pools[0].OOMs[0]
	assert.Equal(t, OOMRetried, o.Outcome)
	assert.Equal(t, uint64(48234496), o.State.ReservedBytes)
	assert.Equal(t, uint64(8388608), o.State.AllocatedBytes)
	assert.Equal(t, uint64(39845888), o.State.CachedFreeBytes)
	assert.Equal(t, uint64(14680064), o.State.LargestFreeRange)
	assert.Equal(t, uint64(27262976), o.ReleasedBytes)
	assert.Equal(t, 2, o.ReleasedSegments)
	assert.Equal(t, uint64(40e3), o.CostNs)

	ooms := findings(r, KindOOM)
	require.Len(t, ooms, 1)
	assert.Equal(t, SeverityMedium, ooms[0].Severity, "the run went on")
	assert.Equal(t, OOMRetried, ooms[0].OOM.Outcome)
	// 39845888 cached free, more than the 29360128 asked, the largest
	// range 14680064: expandable segments would have served it.
	assert.Equal(t, AdviceExpandable, ooms[0].Pool.Advice)
	// The cache held 39845888 of 48234496 reserved, 27262976 of it (12 +
	// 14 MiB) in whole free large segments, more than the 28 MiB asked:
	// garbage collection would have reclaimed them. Capacity unknown: the
	// retry proved 48234496 - 27262976 + 29360128 = 50331648 available,
	// so T = floor(100 * (50331648 - 29360128) / 50331648) / 100 =
	// floor(41.67) / 100 = 0.41, above 8388608 / 50331648 = 0.17.
	frag := findings(r, KindFragmentation)
	require.Len(t, frag, 1, "the flushed cache is a fragmentation finding")
	assert.Equal(t, SeverityMedium, frag[0].Severity)
	assert.Equal(t, uint64(39845888), frag[0].Bytes, "cached free at the failing request")
	gc := frag[0].Pool.GC
	require.NotNil(t, gc)
	assert.Equal(t, uint64(41), gc.Threshold)
	assert.False(t, gc.CapacityKnown)
	assert.Equal(t, uint64(50331648), gc.CapacityBytes)
	assert.Equal(t, uint64(27262976), gc.IdleLargeBytes)
	assert.Equal(t, o.Time, gc.OOM.Time)

	// With the capacity known (64 MiB): T = floor(100 * (67108864 -
	// 29360128) / 67108864) / 100 = floor(56.25) / 100 = 0.56.
	r = mustAnalyze(t, Options{Capacity: 64 * MiB}, s.Recs)
	frag = findings(r, KindFragmentation)
	require.Len(t, frag, 1)
	require.NotNil(t, frag[0].Pool.GC)
	assert.Equal(t, uint64(56), frag[0].Pool.GC.Threshold)
	assert.True(t, frag[0].Pool.GC.CapacityKnown)
	assert.Equal(t, uint64(64*MiB), frag[0].Pool.GC.CapacityBytes)
	// A device too small for the request once the idle segments are gone
	// (48234496 - 27262976 + 29360128 = 48 MiB > 47 MiB): no threshold
	// helps.
	r = mustAnalyze(t, Options{Capacity: 47 * MiB}, s.Recs)
	assert.Empty(t, findings(r, KindFragmentation))
}

// TestChurn replays pool_empty_cache (eventtest.EmptyCachePool): 61
// cudaMalloc and 61 cudaFree; steps 2..20 take back what the step before
// released: 19 x 3 = 57 cycles, 19 x 34 MiB = 677380096 bytes.
func TestChurn(t *testing.T) {
	s := eventtest.EmptyCachePool()
	r := poolResult(t, s)

	c := process(t, r, 100).Churn
	require.NotNil(t, c)
	assert.Equal(t, uint64(61), c.Allocs)
	assert.Equal(t, uint64(61), c.Frees)
	assert.Equal(t, uint64(57), c.Cycles)
	assert.Equal(t, uint64(677380096), c.CycleBytes)
	assert.Equal(t, uint64(57*2*10e3), c.CycleNs)
	fs := findings(r, KindChurn)
	require.Len(t, fs, 1)
	assert.Equal(t, uint64(677380096), fs[0].Bytes)
	assert.Same(t, c, fs[0].Churn)
	// A 245 ms run: 122 calls counted over it, not extrapolated to a rate
	// per second (doc.go, "Rates and projections"); 57 cycles x 2 calls x
	// 10 µs = 1.14 ms of the 61 + 61 calls' 1.22 ms; durations in ms.
	assert.Equal(t, uint64(245e6), c.ObservedNs)
	_, perSecond := RateBaseFor(c.ObservedNs)
	assert.False(t, perSecond)
	assert.Equal(t, uint64(57*5e6), c.CycleGapNs, "each size released for 5 ms (report words it, TestWordsChurn)")
	assert.Equal(t, uint64(122*10e3), c.AllocNs+c.FreeNs)
	// 20 x 3 tensors freed into the cache (half a segment each) and the
	// 40 MiB one that filled its segment, freed just before it: 1 of 61
	// passed to cudaFree, so the cache is on and the churn is its release.
	assert.Equal(t, uint64(61), c.TensorFrees)
	assert.Equal(t, uint64(1), c.PassedFrees)
	assert.False(t, c.CachingOff)
	// Steps 2..20 each begin with a release's segments coming back.
	assert.Equal(t, uint64(19), c.Releases)

	// The same calls 3 s apart are phases, not churn.
	r2 := mustAnalyze(t, Options{ChurnWindow: 1}, s.Recs)
	assert.Zero(t, process(t, r2, 100).Churn.Cycles)
	assert.Empty(t, findings(r2, KindChurn))
}

// TestChurnReleaseRounds: 60 steps 20 ms apart, each a 10 MiB tensor
// in a 20 MiB segment and a 1 MiB one in a 2 MiB segment; every `every`
// steps the cache is emptied (both segments freed), so the next step
// allocates both again: 2 cycles a round. Every step: 59 rounds in 60
// iterations, medium, though the cycles cost 59 x 2 x 2 x 10 us = 2.36 ms
// of a 60 x (8 events x 1 ms + 20 ms) = 1.68 s run (1.4 ms per second). Every 20 steps: 2 rounds (steps
// 21 and 41; the release after step 60 is never taken back), 4 cycles,
// below every other iteration: info.
func TestChurnReleaseRounds(t *testing.T) {
	for _, tt := range []struct {
		every            int
		cycles, releases uint64
		sev              Severity
	}{{1, 118, 59, SeverityMedium}, {20, 4, 2, SeverityInfo}} {
		s := eventtest.NewPoolStream()
		s.Stack(4, "forward", 4)
		cached := false
		for step := 1; step <= 60; step++ {
			if !cached {
				s.Seg(eventtest.SegBase, 20*MiB)
				s.Seg(eventtest.SegBase+20*MiB, 2*MiB)
				cached = true
			}
			for _, b := range []struct{ addr, size uint64 }{{eventtest.SegBase, 10 * MiB}, {eventtest.SegBase + 20*MiB, MiB}} {
				s.Block(b.addr, b.size)
				s.Recs[len(s.Recs)-1].(*event.Event).Stack = 4
				s.BlockFree(b.addr)
			}
			if step%tt.every == 0 {
				s.SegFree(eventtest.SegBase)
				s.SegFree(eventtest.SegBase + 20*MiB)
				cached = false
			}
			s.Pause(20e6)
		}
		r := poolResult(t, s)
		p := process(t, r, 100)
		require.NotNil(t, p.Iterations, "every %d", tt.every)
		assert.Equal(t, uint64(60), p.Iterations.Count, "every %d", tt.every)
		require.NotNil(t, p.Churn)
		assert.Equal(t, tt.cycles, p.Churn.Cycles, "every %d", tt.every)
		assert.Equal(t, tt.releases, p.Churn.Releases, "every %d", tt.every)
		assert.Equal(t, uint64(60), p.Churn.Iterations, "every %d", tt.every)
		assert.Less(t, p.Churn.CostMsPerSecond, 10.0)
		fs := findings(r, KindChurn)
		require.Len(t, fs, 1, "every %d", tt.every)
		assert.Equal(t, tt.sev, fs[0].Severity, "every %d", tt.every)
	}
}

// TestChurnCachingOff: an allocator that passes every tensor free to
// cudaFree (PYTORCH_NO_CUDA_MEMORY_CACHING=1: each tensor is its own
// segment, freed right after it) cycles 3 MiB 12 times: 11 cycles, each
// the tensor's own, not a cache release. The finding says so, at info.
func TestChurnCachingOff(t *testing.T) {
	s := eventtest.NewPoolStream()
	for range 12 {
		s.Seg(eventtest.SegBase, 3*MiB)
		s.Block(eventtest.SegBase, 3*MiB)
		s.BlockFree(eventtest.SegBase)
		s.SegFree(eventtest.SegBase)
	}
	r := poolResult(t, s)
	c := process(t, r, 100).Churn
	require.NotNil(t, c)
	assert.Equal(t, uint64(11), c.Cycles)
	assert.Equal(t, uint64(11*3*MiB), c.CycleBytes)
	assert.Equal(t, uint64(12), c.TensorFrees)
	assert.Equal(t, uint64(12), c.PassedFrees)
	assert.True(t, c.CachingOff)
	fs := findings(r, KindChurn)
	require.Len(t, fs, 1)
	assert.Equal(t, SeverityInfo, fs[0].Severity, "caching off is a setting, not an empty_cache() to remove")
	assert.Equal(t, uint64(11*3*MiB), fs[0].Bytes)
}

// TestNoPoolNoForensics: without block events, a failed cudaMalloc keeps
// the generic oom finding and no pool is reported.
func TestNoPoolNoForensics(t *testing.T) {
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.Alloc(1, eventtest.SegBase, MiB, 1).Fail(2, GiB, 1, 2).End(3)
	r := mustAnalyze(t, Options{}, s.Recs)
	assert.Empty(t, r.Pools)
	require.Len(t, findings(r, KindOOM), 1)
	assert.NotNil(t, findings(r, KindOOM)[0].OOMCalls, "the generic oom finding")
	assert.Nil(t, findings(r, KindOOM)[0].Pool)
}

// TestPoolGeometry checks holes, pinned segments and unplaced blocks.
func TestPoolGeometry(t *testing.T) {
	s := eventtest.NewPoolStream()
	s.Block(0x1000, 512) // before any segment: unplaced
	s.Seg(eventtest.SegBase, 20*MiB)
	s.Block(eventtest.SegBase+4*MiB, MiB) // pins the segment: 1 MiB of 20
	s.Seg(eventtest.SegBase+20*MiB, 2*MiB)
	s.Block(eventtest.SegBase+20*MiB, 512*KiB)
	s.Block(eventtest.SegBase+20*MiB+MiB, 512*KiB)
	r := poolResult(t, s)
	require.Len(t, r.Pools, 1)
	end := r.Pools[0].AtEnd
	assert.Equal(t, uint64(22*MiB), end.ReservedBytes)
	assert.Equal(t, uint64(2*MiB), end.AllocatedBytes)
	assert.Equal(t, uint64(20*MiB), end.CachedFreeBytes)
	assert.Equal(t, uint64(15*MiB), end.LargestFreeRange)
	// 4 MiB before the pinning block, 15 after; 512 KiB twice in the small
	// segment.
	assert.Equal(t, 4, end.FreeRanges)
	assert.Equal(t, 1, end.PinnedSegments)
	assert.Equal(t, uint64(19*MiB), end.PinnedBytes)
	assert.Equal(t, uint64(512), end.UnplacedBytes)
}

// TestChurnFreeStacks: the live probes record no stack at a free (only
// allocation-like calls walk the user stack, bpf/vramprof.bpf.c), but an
// imported snapshot's segment_free carries its frames. When frees have
// stacks, the churn finding names the release site first.
func TestChurnFreeStacks(t *testing.T) {
	build := func(withStacks bool) *Result {
		return poolResult(t, eventtest.ReleaseCyclePool(withStacks))
	}
	fs := findings(build(false), KindChurn)
	require.Len(t, fs, 1)
	assert.Equal(t, "alloc_block (train.py:1)", fs[0].Stacks[0].Site, "no stack was captured at the frees")

	fs = findings(build(true), KindChurn)
	require.Len(t, fs, 1)
	// 5 releases, 4 of them taken back within the window: 4 cycles.
	assert.Equal(t, "release_cache (train.py:3)", fs[0].Stacks[0].Site, "the release site first")
	assert.Equal(t, uint64(4*20*MiB), fs[0].Stacks[0].Bytes)
	assert.Equal(t, "alloc_block (train.py:1)", fs[0].Stacks[1].Site, "then the allocations")
}

// TestFragmentationWorst: without a failure, the worst moment is a
// fragmentation finding when the cache holds a quarter of reserved memory
// free, tensors a quarter, and no free range reaches half of the free bytes;
// info only, since nothing failed and nothing measurable was lost.
func TestFragmentationWorst(t *testing.T) {
	r := poolResult(t, eventtest.ScatteredPool())
	fs := findings(r, KindFragmentation)
	require.Len(t, fs, 1)
	f := fs[0]
	assert.Equal(t, SeverityInfo, f.Severity)
	assert.Equal(t, uint64(32*MiB), f.Bytes)
	assert.Nil(t, f.OOM)
	require.NotNil(t, f.Pool)
	require.NotNil(t, f.Pool.Worst)
	// 4 segments + 20 blocks + 8 frees, 1 ms apart: the worst is the last free.
	assert.Equal(t, PoolState{Time: 32e6, ReservedBytes: 80 * MiB, AllocatedBytes: 48 * MiB, CachedFreeBytes: 32 * MiB,
		LargestFreeRange: 4 * MiB, FreeRanges: 8, Segments: 4}, *f.Pool.Worst)
	assert.Equal(t, f.Pool.Worst.Time, f.Time)
	assert.Empty(t, f.Pool.Advice, "a fragmentation finding has no oom advice")
}
