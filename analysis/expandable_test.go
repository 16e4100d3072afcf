package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis/checkpoint"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

const vmmBase = eventtest.VMMBase

// TestExpandableGeometry: mapped pages are segments, merged while they touch
// inside one reservation, split where a page is unmapped; blocks spanning
// pages are placed, none unplaced.
func TestExpandableGeometry(t *testing.T) {
	s := eventtest.NewVMMPool()
	large, small := vmmBase, vmmBase+100*MiB
	// Two reservations back to back: a 100 MiB one for 20 MiB pages and,
	// right after it, a 10 MiB one for 2 MiB pages.
	s.Reserve(large, 100*MiB)
	s.Reserve(small, 10*MiB)
	// Pages 0 and 1 come before the first block (the pool takes them from
	// the ledger), the rest after it (mapped one by one). The large
	// range's last page (80..100) and the small range's page touch, in
	// different reservations: they must stay two segments.
	s.Grow(large, 20*MiB)
	s.Grow(large+20*MiB, 20*MiB)
	s.Block(large, 30*MiB) // across pages 0 and 1
	s.Grow(large+40*MiB, 20*MiB)
	s.Grow(large+60*MiB, 20*MiB)
	s.Block(large+30*MiB, 12*MiB) // across pages 1 and 2
	s.Block(large+42*MiB, 26*MiB) // across pages 2 and 3
	s.Block(large+72*MiB, 4*MiB)
	s.Grow(small, 2*MiB)
	s.Block(small, MiB)
	s.Grow(large+80*MiB, 20*MiB)
	r := mustAnalyze(t, Options{}, s.Recs)
	require.Len(t, r.Pools, 1)
	pl := r.Pools[0]
	assert.True(t, pl.Expandable)
	// Reserved = mapped: 5 x 20 + 2 MiB; allocated 30 + 12 + 26 + 4 + 1 =
	// 73 MiB; cached free 29 MiB: 4 MiB between the 26 and the 4 MiB
	// blocks (68..72), 4 + 20 MiB after the 4 MiB block (76..100: one
	// range, pages 3 and 4 touch) and 1 MiB in the small page.
	assert.Equal(t, PoolState{Time: pl.AtEnd.Time, ReservedBytes: 102 * MiB, AllocatedBytes: 73 * MiB, CachedFreeBytes: 29 * MiB,
		LargestFreeRange: 24 * MiB, FreeRanges: 3, Segments: 2}, pl.AtEnd)

	// Unmap page 4 (80..100): the large run shrinks at its top. Free
	// the 30, 12 and 26 MiB blocks (0..68 free) and unmap pages 0 and 1,
	// wholly free: the run starts at 40 now.
	s.Shrink(large+80*MiB, 20*MiB)
	s.BlockFree(large + 30*MiB)
	s.BlockFree(large + 42*MiB)
	s.BlockFree(large)
	s.Shrink(large, 20*MiB)
	s.Shrink(large+20*MiB, 20*MiB)
	r = mustAnalyze(t, Options{}, s.Recs)
	end := r.Pools[0].AtEnd
	// Mapped: pages 2 and 3 (40..80) and the small page: 42 MiB. Live:
	// the 4 MiB block at 72 and the 1 MiB one: 5 MiB. Free: 40..72 (32
	// MiB), 76..80 (4 MiB) and 1 MiB in the small page.
	assert.Equal(t, PoolState{Time: end.Time, ReservedBytes: 42 * MiB, AllocatedBytes: 5 * MiB, CachedFreeBytes: 37 * MiB,
		LargestFreeRange: 32 * MiB, FreeRanges: 3, Segments: 2}, end)

	// Unmapping a page in the middle splits the run in two: map pages 0
	// and 1 again, then unmap page 2 (40..60).
	s.Grow(large, 20*MiB)
	s.Grow(large+20*MiB, 20*MiB)
	s.Shrink(large+40*MiB, 20*MiB)
	r = mustAnalyze(t, Options{}, s.Recs)
	end = r.Pools[0].AtEnd
	// Runs 0..40, 60..80 and the small page: 3 segments, 62 MiB; the
	// free ranges 0..40 (40 MiB), 60..72, 76..80 and the small page's.
	assert.Equal(t, PoolState{Time: end.Time, ReservedBytes: 62 * MiB, AllocatedBytes: 5 * MiB, CachedFreeBytes: 57 * MiB,
		LargestFreeRange: 40 * MiB, FreeRanges: 4, Segments: 3}, end)
}

// TestExpandableLateBlocks: pages mapped before the first block event are
// taken from the ledger, merged as they would have been live.
func TestExpandableLateBlocks(t *testing.T) {
	s := eventtest.NewVMMPool()
	s.Reserve(vmmBase, 100*MiB)
	for i := range uint64(3) {
		s.Grow(vmmBase+i*20*MiB, 20*MiB)
	}
	s.Block(vmmBase+10*MiB, 20*MiB) // spans pages 0 and 1
	r := mustAnalyze(t, Options{}, s.Recs)
	end := r.Pools[0].AtEnd
	// One run of 60 MiB; free 0..10 and 30..60.
	assert.Equal(t, PoolState{Time: end.Time, ReservedBytes: 60 * MiB, AllocatedBytes: 20 * MiB, CachedFreeBytes: 40 * MiB,
		LargestFreeRange: 30 * MiB, FreeRanges: 2, Segments: 1}, end)
}

// TestExpandableOOM (eventtest.ExpandableOOMPool): a failing cuMemCreate
// under expandable segments is an OOM of the pool. Its request is what the
// allocator asked the driver for: the two pages created for it and the one that failed, 60 MiB; the
// geometry is before the flush: 60 MiB mapped, 35 allocated, 25 cached free
// (reserved but unallocated), the largest range 25 MiB. The flush unmaps
// one page (20 MiB). 25 < 60: a capacity OOM, and no advice may propose
// expandable segments.
func TestExpandableOOM(t *testing.T) {
	r := mustAnalyze(t, Options{}, eventtest.ExpandableOOMPool(false).Finish())
	require.Len(t, r.Pools, 1)
	require.Len(t, r.Pools[0].OOMs, 1, "the failed retry closes the first failure")
	o := r.Pools[0].OOMs[0]
	assert.True(t, o.Expandable)
	assert.Equal(t, uint64(60*MiB), o.RequestBytes)
	assert.Equal(t, PoolState{Time: o.Time, ReservedBytes: 60 * MiB, AllocatedBytes: 35 * MiB, CachedFreeBytes: 25 * MiB,
		LargestFreeRange: 25 * MiB, FreeRanges: 1, Segments: 1}, o.State)
	assert.Equal(t, OOMCapacity, o.Kind)
	assert.Equal(t, OOMFinal, o.Outcome)
	assert.Equal(t, uint64(20*MiB), o.ReleasedBytes)
	assert.Equal(t, 1, o.ReleasedSegments)

	ooms := findings(r, KindOOM)
	require.Len(t, ooms, 1)
	assert.Equal(t, SeverityCritical, ooms[0].Severity)
	assert.Equal(t, AdviceReduceBatch, ooms[0].Pool.Advice)
	assert.True(t, ooms[0].Pool.Expandable)
	assert.Empty(t, findings(r, KindFragmentation), "a capacity OOM")
}

// TestExpandableFragmentationOOM: the same pool with the request only two
// pages (the first create succeeds, the second fails: 40 MiB asked) and
// 45 MiB cached free: fragmentation, but expandable segments are on, so
// the advice is about the live blocks between the free ranges.
func TestExpandableFragmentationOOM(t *testing.T) {
	s := eventtest.NewVMMPool()
	s.Reserve(vmmBase, 200*MiB)
	for i := range uint64(3) {
		s.Grow(vmmBase+i*20*MiB, 20*MiB)
	}
	s.Block(vmmBase+10*MiB, 5*MiB)
	s.Block(vmmBase+50*MiB, 10*MiB)
	a := s.Create(20 * MiB)
	s.CreateFail(20 * MiB)
	s.Release(a)
	a = s.Create(20 * MiB)
	s.CreateFail(20 * MiB)
	s.Release(a)
	r := mustAnalyze(t, Options{}, s.Finish())
	o := r.Pools[0].OOMs[0]
	// 60 mapped - 15 allocated = 45 free >= 40 asked.
	assert.Equal(t, uint64(40*MiB), o.RequestBytes)
	assert.Equal(t, uint64(45*MiB), o.State.CachedFreeBytes)
	assert.Equal(t, OOMFragmentation, o.Kind)
	assert.Equal(t, OOMFinal, o.Outcome)
	ooms := findings(r, KindOOM)
	require.Len(t, ooms, 1)
	assert.Equal(t, AdviceInterleaved, ooms[0].Pool.Advice, "not expandable segments: already on")
	frag := findings(r, KindFragmentation)
	require.Len(t, frag, 1)
	assert.True(t, frag[0].Pool.Expandable)
	assert.Equal(t, uint64(45*MiB), frag[0].Bytes)
	assert.Nil(t, frag[0].Pool.GC, "no garbage collection advice for pages")
}

// TestExpandableRetried: the retry's pages are all created and mapped:
// the failure was survived (medium), and the advice is to lower the peak.
func TestExpandableRetried(t *testing.T) {
	r := mustAnalyze(t, Options{}, eventtest.ExpandableOOMPool(true).Finish())
	o := r.Pools[0].OOMs[0]
	assert.Equal(t, OOMRetried, o.Outcome)
	assert.Equal(t, uint64(20*MiB), o.ReleasedBytes)
	ooms := findings(r, KindOOM)
	require.Len(t, ooms, 1)
	assert.Equal(t, SeverityMedium, ooms[0].Severity)
	assert.Equal(t, AdviceLowerPeak, ooms[0].Pool.Advice)
	// 35 MiB live before, 60 MiB more mapped at 60..120 and handed out:
	// reserved 40 (0..20, 40..60) + 60 MiB, allocated 95.
	end := r.Pools[0].AtEnd
	assert.Equal(t, uint64(100*MiB), end.ReservedBytes)
	assert.Equal(t, uint64(95*MiB), end.AllocatedBytes)
	assert.Zero(t, end.UnplacedBytes)
}

// TestFragmentationWorstOfFailures replays pool_frag_worst's allocator: 10
// segments of 20 MiB with three 6 MiB blocks each (200 MiB reserved, 180
// allocated); a 20 MiB segment fails (and its retry) with 20 MiB cached
// free, 10 ranges of 2 MiB; two blocks of three freed (140 MiB free in
// ranges of 6 + 6 + 2 = 14 MiB); a 16 MiB segment fails (and its retry).
// Both are fragmentation OOMs (20 >= 20, 140 >= 16); the finding quotes the
// second: 140 MiB > 20 MiB cached free (and 70% > 10% of 200 MiB).
func TestFragmentationWorstOfFailures(t *testing.T) {
	s := eventtest.NewPoolStream()
	var blocks []uint64
	for k := range uint64(10) {
		seg := eventtest.SegBase + k*20*MiB
		s.Seg(seg, 20*MiB)
		for i := range uint64(3) {
			s.Block(seg+i*6*MiB, 6*MiB)
			blocks = append(blocks, seg+i*6*MiB)
		}
	}
	s.SegFail(20 * MiB)
	s.SegFail(20 * MiB)
	for i, b := range blocks {
		if i%3 != 0 {
			s.BlockFree(b)
		}
	}
	s.SegFail(16 * MiB)
	s.SegFail(16 * MiB)
	r := poolResult(t, s)
	require.Len(t, r.Pools[0].OOMs, 2)
	first := r.Pools[0].OOMs[0]
	assert.Equal(t, uint64(20*MiB), first.State.CachedFreeBytes)
	assert.Equal(t, OOMFragmentation, first.Kind)

	frag := findings(r, KindFragmentation)
	require.Len(t, frag, 1)
	f := frag[0]
	assert.Equal(t, SeverityHigh, f.Severity)
	assert.Equal(t, uint64(140*MiB), f.Bytes)
	require.NotNil(t, f.OOM)
	assert.Equal(t, uint64(16*MiB), f.OOM.RequestBytes)
	assert.Equal(t, PoolState{Time: f.OOM.Time, ReservedBytes: 200 * MiB, AllocatedBytes: 60 * MiB, CachedFreeBytes: 140 * MiB,
		LargestFreeRange: 14 * MiB, FreeRanges: 10, Segments: 10}, f.OOM.State)
	assert.Equal(t, 2, f.Pool.Failures)
	assert.Len(t, findings(r, KindOOM), 2, "one oom finding per failure")
}

// TestExpandableImported: a PyTorch snapshot's expandable segment comes in
// as segment-layer allocations of API cuMemMap (segment_map) and frees of
// cuMemUnmap (profile/snapshot): they are merged and cut as traced mappings
// are (no reservations recorded: touching ranges merge).
func TestExpandableImported(t *testing.T) {
	s := eventtest.NewPoolStream()
	seg := func(k event.Kind, api event.API, addr, size uint64) {
		s.Ev(event.Event{Time: s.Next(), Addr: addr, Size: size, Stack: 1, TID: 1, Kind: k, API: api})
	}
	seg(event.KindAlloc, event.APICuMemMap, vmmBase, 20*MiB)
	s.Block(vmmBase, 4*MiB)
	seg(event.KindAlloc, event.APICuMemMap, vmmBase+20*MiB, 40*MiB)
	s.Block(vmmBase+16*MiB, 8*MiB) // across the two maps
	s.Block(vmmBase+50*MiB, 2*MiB)
	r := mustAnalyze(t, Options{}, s.Recs)
	pl := r.Pools[0]
	assert.True(t, pl.Expandable)
	// One 60 MiB run: free 4..16 and 24..50 and 52..60.
	assert.Equal(t, PoolState{Time: pl.AtEnd.Time, ReservedBytes: 60 * MiB, AllocatedBytes: 14 * MiB, CachedFreeBytes: 46 * MiB,
		LargestFreeRange: 26 * MiB, FreeRanges: 3, Segments: 1}, pl.AtEnd)

	// The importer unmaps the 40 MiB map and maps again its parts outside
	// 24..44: the run is cut in two (0..24, 44..60).
	seg(event.KindFree, event.APICuMemUnmap, vmmBase+20*MiB, 0)
	seg(event.KindAlloc, event.APICuMemMap, vmmBase+20*MiB, 4*MiB)
	seg(event.KindAlloc, event.APICuMemMap, vmmBase+44*MiB, 16*MiB)
	r = mustAnalyze(t, Options{}, s.Recs)
	end := r.Pools[0].AtEnd
	assert.Equal(t, PoolState{Time: end.Time, ReservedBytes: 40 * MiB, AllocatedBytes: 14 * MiB, CachedFreeBytes: 26 * MiB,
		LargestFreeRange: 12 * MiB, FreeRanges: 3, Segments: 2}, end)
}

// TestExpandableCheckpoint cuts an expandable pool's stream at every event,
// as the flight recorder does: the live pages, mappings and blocks the
// checkpoint restores give the pool the geometry at the end that the whole
// stream gives.
func TestExpandableCheckpoint(t *testing.T) {
	s := eventtest.NewVMMPool()
	large, small := vmmBase, vmmBase+100*MiB
	s.Reserve(large, 100*MiB)
	s.Reserve(small, 10*MiB)
	s.Grow(large, 20*MiB)
	s.Grow(large+20*MiB, 20*MiB)
	s.Block(large, 30*MiB)
	s.Grow(large+40*MiB, 20*MiB)
	s.Block(large+30*MiB, 12*MiB)
	s.Block(large+42*MiB, 10*MiB)
	s.Grow(small, 2*MiB)
	s.Block(small, MiB)
	s.Grow(large+60*MiB, 20*MiB)
	s.Grow(large+80*MiB, 20*MiB)
	s.BlockFree(large)
	s.Shrink(large, 20*MiB)
	recs := s.Finish()
	whole := mustAnalyze(t, Options{}, recs)
	require.Len(t, whole.Pools, 1)
	want := whole.Pools[0].AtEnd
	// Mapped 20..100 and the small page (82 MiB); blocks 30..42, 42..52
	// and 1 MiB: 23 MiB; free 20..30, 52..100 and 1 MiB.
	require.Equal(t, PoolState{Time: want.Time, ReservedBytes: 82 * MiB, AllocatedBytes: 23 * MiB, CachedFreeBytes: 59 * MiB,
		LargestFreeRange: 48 * MiB, FreeRanges: 3, Segments: 2}, want)
	for cut := range recs {
		if _, ok := recs[cut].(*event.Event); !ok {
			continue
		}
		got := mustAnalyze(t, Options{}, cutAt(recs, cut))
		if !assert.Len(t, got.Pools, 1, "cut %d", cut) {
			continue
		}
		assert.Equal(t, want, got.Pools[0].AtEnd, "cut %d", cut)
		assert.True(t, got.Pools[0].Expandable, "cut %d", cut)
	}
}

// cutAt is recs as a flight recorder keeps them when it cuts before
// record cut: the descriptions, a checkpoint of the events before, the
// live allocations it restores, then the rest.
func cutAt(recs []event.Record, cut int) []event.Record {
	tr := checkpoint.NewTracker()
	tr.SetStart(recs[0].(*event.Header).Start)
	var desc, after []event.Record
	for i, r := range recs {
		e, isEvent := r.(*event.Event)
		switch {
		case isEvent && i < cut:
			tr.Observe(e)
		case isEvent:
			after = append(after, r)
		case i == 0:
		case i < cut:
			desc = append(desc, r)
		default:
			after = append(after, r)
		}
	}
	c, live := tr.Checkpoint(2)
	window := append([]event.Record{recs[0]}, desc...)
	window = append(window, c)
	for i := range live {
		window = append(window, &live[i])
	}
	return append(window, after...)
}

// TestExpandableOOMReported: the allocator's own report of the request
// it gave up on (PyTorch's c10::reportOutOfMemoryToProfiler) follows
// ExpandableOOMPool's failed retry on the same thread: the OOM quotes its
// request, 70 MiB, not the 60 MiB of pages the driver was asked for (the
// kind stays judged on those: 25 MiB cached free < 60, capacity), with
// the allocator's allocated and reserved bytes. A report from another
// thread is another request's, and is not taken.
func TestExpandableOOMReported(t *testing.T) {
	s := eventtest.ExpandableOOMPool(false)
	s.OOMReport(2, 90*MiB, 1, 2)
	s.OOMReport(1, 70*MiB, 35*MiB, 40*MiB)
	reportTime := s.Recs[len(s.Recs)-1].(*event.Event).Time
	r := mustAnalyze(t, Options{}, s.Finish())
	require.Len(t, r.Pools, 1)
	require.Len(t, r.Pools[0].OOMs, 1)
	o := r.Pools[0].OOMs[0]
	assert.Equal(t, uint64(70*MiB), o.RequestBytes, "the reported request")
	assert.Equal(t, uint64(60*MiB), o.PagesBytes, "two pages created and the one refused")
	assert.Equal(t, &OOMReport{Time: reportTime, RequestBytes: 70 * MiB, AllocatedBytes: 35 * MiB, ReservedBytes: 40 * MiB}, o.Reported)
	assert.Equal(t, OOMCapacity, o.Kind)
	assert.Equal(t, OOMFinal, o.Outcome)
	ooms := findings(r, KindOOM)
	require.Len(t, ooms, 1)
	assert.Equal(t, uint64(70*MiB), ooms[0].Bytes, "the finding quotes the request")
}

// TestOOMReportedCudaMalloc: without expandable segments the failed
// cudaMalloc's size is the request PyTorch's message names (the segment
// it asked for, 20 MiB for a 6 MiB tensor) and stays the OOM's; the
// report adds the allocator's figures and ends the failure (no retry
// came): the next failed cudaMalloc of the same size is a new OOM, not
// its retry. A report with no failure before it is left out.
func TestOOMReportedCudaMalloc(t *testing.T) {
	const base = 0x7f00_0000_0000
	s := eventtest.NewPoolStream()
	s.OOMReport(1, 2*MiB, 0, 0)
	s.Seg(base, 20*MiB)
	s.Block(base, 6*MiB)
	s.SegFail(20 * MiB)
	s.OOMReport(1, 6*MiB, 6*MiB, 20*MiB)
	s.SegFail(20 * MiB)
	r := mustAnalyze(t, Options{}, s.Finish())
	require.Len(t, r.Pools, 1)
	require.Len(t, r.Pools[0].OOMs, 2, "the report ended the first failure")
	o := r.Pools[0].OOMs[0]
	assert.Equal(t, uint64(20*MiB), o.RequestBytes, "the segment asked for")
	assert.Zero(t, o.PagesBytes)
	require.NotNil(t, o.Reported)
	assert.Equal(t, uint64(6*MiB), o.Reported.RequestBytes)
	assert.Equal(t, uint64(6*MiB), o.Reported.AllocatedBytes)
	assert.Equal(t, uint64(20*MiB), o.Reported.ReservedBytes)
	assert.Equal(t, OOMFinal, o.Outcome)
	assert.Nil(t, r.Pools[0].OOMs[1].Reported)
}
