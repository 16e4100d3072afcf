package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

// Stacks of cachedTrainer: the allocator's segments are charged to
// backward (stack 1, the segment layer); tensors are made at forward
// (stack 2) and leak_step (stack 3).
const (
	stSegments event.StackID = 1
	stForward  event.StackID = 2
	stLeak     event.StackID = 3
)

// cachedTrainer is a trainer over a caching allocator, 40 steps of 20 ms
// (step i starts at 1 ms + i * 20 ms). At 0 one 64 MiB segment; forward
// makes 3 activations of 512 KiB in it, 10 µs apart, freed 5 ms later;
// with leak, leak_step then keeps one 1 MiB block, in a 2 MiB segment
// made every other step (step i's block at offset (i%2) MiB of segment
// i/2). Without leak the small segments still come every other step
// until step 9 (a cache warming up; blocks of 256 KiB made and freed in
// them), then never. At 799 ms save_results (stack 4) allocates and
// frees 1 MiB: the process is active to the end (the steadiness test reads
// its activity, not the exit after it). blocks false drops the block layer
// (--pool off).
func cachedTrainer(leak, blocks bool) *eventtest.Stream {
	const (
		big    = uint64(0x7f20_0000_0000)
		small  = uint64(0x7f21_0000_0000)
		period = 20_000_000
	)
	s := eventtest.NewStream().Stack(stSegments, "backward", 1).Stack(stForward, "forward", 2).Stack(stLeak, "leak_step", 3)
	seg := func(t, addr, size uint64) {
		s.Ev(event.Event{Time: t, Addr: addr, Size: size, Stack: stSegments, Kind: event.KindAlloc, API: event.APICudaMalloc})
	}
	block := func(t, addr, size uint64, st event.StackID) {
		if blocks {
			s.Ev(event.Event{Time: t, Addr: addr, Size: size, Stack: st, Layer: event.LayerBlock,
				Kind: event.KindAlloc, API: event.APIPyTorchMalloc})
		}
	}
	free := func(t, addr uint64) {
		if blocks {
			s.Ev(event.Event{Time: t, Addr: addr, Layer: event.LayerBlock, Kind: event.KindFree, API: event.APIPyTorchFree})
		}
	}
	seg(0, big, 64*MiB)
	for i := range uint64(40) {
		t0 := 1_000_000 + i*period
		makeSeg := i%2 == 0 && (leak || i < 10)
		if makeSeg {
			seg(t0, small+(i/2)*2*MiB, 2*MiB)
		}
		for k := range uint64(3) {
			block(t0+10_000*(k+1), big+k*512*KiB, 512*KiB, stForward)
		}
		for k := range uint64(3) {
			free(t0+5_000_000+k, big+k*512*KiB)
		}
		switch {
		case leak:
			block(t0+6_000_000, small+(i/2)*2*MiB+(i%2)*MiB, MiB, stLeak)
		case makeSeg:
			block(t0+6_000_000, small+(i/2)*2*MiB, 256*KiB, stLeak)
			free(t0+7_000_000, small+(i/2)*2*MiB)
		}
	}
	s.Stack(4, "save_results", 4)
	s.Alloc(799_000_000, 0x7f40_0000_0000, MiB, 4).Free(799_500_000, 0x7f40_0000_0000)
	return s.End(40 * period)
}

// TestLeakHiddenInCache: with the block layer traced the tensors decide.
// leak_step keeps 40 blocks of 1 MiB inside segments charged to backward,
// which grow every other step: one leak, at leak_step, of the blocks'
// bytes; none at backward, whose segments are the cache, said once.
func TestLeakHiddenInCache(t *testing.T) {
	r := mustAnalyze(t, Options{}, cachedTrainer(true, true).Recs)
	leaks := findings(r, KindLeak)
	require.Len(t, leaks, 1, "one leak: %+v", leaks)
	f := leaks[0]
	assert.Equal(t, stLeak, f.Stacks[0].Stack, "at leak_step, not at the segments' backward")
	assert.Equal(t, 40*MiB, f.Bytes, "40 blocks of 1 MiB")
	assert.Equal(t, uint64(40), f.Stacks[0].Count)
	assert.Equal(t, event.LayerBlock, f.Leak.Layer)
	// The tensors' peak: 39 leaked blocks and forward's 3 x 512 KiB, at
	// step 39; 40 MiB is more than 10% of it.
	assert.Equal(t, SeverityHigh, f.Severity)
	// Live bytes at the iteration starts (forward's first block) are
	// 0, 1, ..., 39 MiB, and 40 MiB at the last start plus the period:
	// a slope of exactly 1 MiB per iteration, growing since the first.
	assert.Equal(t, uint64(40), f.Leak.Iterations)
	assert.Equal(t, uint64(20_000_000), f.Leak.PeriodNs)
	assert.InDelta(t, float64(MiB), f.Leak.BytesPerIteration, 1e-6)
	assert.Equal(t, uint64(1_010_000), f.Leak.Since, "step 0's first block")

	it := process(t, r, 100).Iterations
	require.NotNil(t, it)
	assert.Equal(t, uint64(40), it.Count, "40 steps, from the blocks (the segments come every other step)")
	assert.Equal(t, uint64(20_000_000), it.PeriodNs)
	assert.Equal(t, stForward, it.Stack, "forward's blocks start each step")

	caches := findings(r, KindCacheGrowth)
	require.Len(t, caches, 1, "the cache, said once")
	c := caches[0]
	assert.Equal(t, SeverityInfo, c.Severity)
	// Reserved: 64 MiB + 20 segments of 2 MiB, never freed, and at 799 ms
	// save_results' 1 MiB (the process's segment peak counts all its
	// device memory from CUDA); the tensors' peak: 39 MiB kept + 3 x
	// 512 KiB at step 39's forward.
	wantReserved, wantTensors := 64*MiB+20*2*MiB, 39*MiB+3*512*KiB
	assert.Equal(t, &CacheEvidence{ReservedPeakBytes: wantReserved + MiB, ReservedPeakTime: 799_000_000,
		AllocatedPeakBytes: wantTensors, AllocatedPeakTime: 1_000_000 + 39*20_000_000 + 30_000,
		ReservedAtEnd: wantReserved, AllocatedAtEnd: 40 * MiB, End: 799_500_000}, c.Cache)
	assert.Equal(t, wantReserved+MiB-wantTensors, c.Bytes)
	assert.Equal(t, stSegments, c.Stacks[0].Stack)

	// The peak's advice names tensors, not the cache: at the tensors'
	// peak leak_step's 39 MiB cover more than half of it.
	peaks := findings(r, KindPeak)
	require.Len(t, peaks, 1)
	ev := peaks[0].Peak
	assert.Equal(t, wantTensors, ev.TensorPeakBytes)
	assert.Equal(t, []StackUsage{{Stack: stLeak, Usage: Usage{Count: 39, Bytes: 39 * MiB}}}, ev.Tensors)
}

// TestWarmUpIsNotALeak: a cache that warms up (2 MiB segments at steps
// 0, 2, ..., 8 of 40, never freed) and then stays flat for 30 steps is no
// leak, with the block layer (its tensors come and go) or without (the
// segments' growth stopped in the first half of the run). The same
// growth kept up to the end is one (the control).
func TestWarmUpIsNotALeak(t *testing.T) {
	for _, blocks := range []bool{true, false} {
		r := mustAnalyze(t, Options{}, cachedTrainer(false, blocks).Recs)
		assert.Empty(t, findings(r, KindLeak), "blocks %v", blocks)
		for _, f := range r.Findings {
			assert.Equal(t, SeverityInfo, f.Severity, "blocks %v: %s", blocks, f.Kind)
		}
		assert.Len(t, findings(r, KindCacheGrowth), map[bool]int{true: 1, false: 0}[blocks], "blocks %v", blocks)
	}
	// The old rule's false leak: the segments at backward paced a loop
	// (the 64 MiB one at 0 and the 2 MiB ones at 1, 41, ..., 161 ms: 6
	// allocations, one a burst, 40 ms apart but the first), over which
	// they rose at every window.
	r := mustAnalyze(t, Options{}, cachedTrainer(false, false).Recs)
	it := process(t, r, 100).Iterations
	require.NotNil(t, it, "the warm-up's segments make a loop")
	assert.Equal(t, uint64(6), it.Count)
	assert.Equal(t, uint64(40_000_000), it.PeriodNs)

	// Control: the segments keep coming to the end (no block layer): 20
	// segments of 2 MiB grow at backward through the last half, beside
	// the 64 MiB one made at 0, all live at the end.
	r = mustAnalyze(t, Options{}, cachedTrainer(true, false).Recs)
	leaks := findings(r, KindLeak)
	require.Len(t, leaks, 1)
	assert.Equal(t, stSegments, leaks[0].Stacks[0].Stack)
	assert.Equal(t, 64*MiB+20*2*MiB, leaks[0].Bytes)
	assert.Equal(t, event.LayerSegment, leaks[0].Leak.Layer)
}

// TestPersists: the steadiness test reads the leak grid at the middle of
// the process's span.
func TestPersists(t *testing.T) {
	// One stack: +1 MiB at the case's times; another allocates and frees
	// at 900 ms (the process is still at work); the run ends at 1 s.
	for _, tc := range []struct {
		name  string
		at    []uint64 // ms
		leaks bool
	}{
		{"grows to the end", []uint64{100, 200, 300, 400, 500, 600, 700, 800, 900}, true},
		{"stops at 40%", []uint64{50, 100, 150, 200, 250, 300, 350, 400}, false},
	} {
		s := eventtest.NewStream().Stack(1, "grow", 1).Stack(2, "work", 2)
		for i, ms := range tc.at {
			s.Alloc(ms*1_000_000, 0x1000+uint64(i)<<20, MiB, 1)
		}
		s.Alloc(900_000_000, 0x7f00_0000_0000, MiB, 2).Free(900_000_001, 0x7f00_0000_0000)
		r := mustAnalyze(t, Options{}, s.End(1_000_000_000).Recs)
		assert.Equal(t, tc.leaks, len(findings(r, KindLeak)) == 1, tc.name)
	}
}

// TestPersistsToExit: the run's own process (pid 100, the header's) grows
// for its first 200 ms (+1 MiB every 20 ms) and then runs on, making no
// CUDA call, until it exits at 1 s (the End record, stamped at the exit
// in run mode): flat from 200 ms, through the middle (500 ms), not a
// leak. The same growth in another process (pid 200, a child whose exit
// is not recorded) is judged over its activity, through which it grew: a
// leak, the limit of what segments alone can tell.
func TestPersistsToExit(t *testing.T) {
	for _, pid := range []uint32{100, 200} {
		s := eventtest.NewStream().Stack(1, "warm", 1)
		s.Add(&event.Header{Version: 2, Mode: "run", PID: 100})
		s.AllocOn(1_000_000, 0x7f00_0000_0000, MiB, 1, 100, 0).FreeOn(2_000_000, 0x7f00_0000_0000, 100)
		for i := range uint64(10) {
			s.AllocOn((i+1)*20_000_000, 0x1000+i<<20, MiB, 1, pid, 0)
		}
		r := mustAnalyze(t, Options{}, s.End(1_000_000_000).Recs)
		assert.Equal(t, pid == 200, len(findings(r, KindLeak)) == 1, "pid %d", pid)
	}
}

// TestBurstsNaturalBreak: a site that allocates 4 tensors per step, its
// in-step gaps 1, 9 and 2 µs, its steps 20 ms apart. The lower quartile
// of the gaps is 1 µs, and 9 µs is more than 4 times it: that limit splits
// every step in two (80 bursts of 2 or 2 of 1 and 3, a mode of 2). The
// largest jump in the sorted gaps (9 µs to ~20 ms) is the break: 40
// bursts of 4, the loop's 40 iterations of 20 ms. Taken one allocation per
// iteration, its spacings are long every 4th: patterned, taken only when
// nothing else is.
func TestBurstsNaturalBreak(t *testing.T) {
	var times, seqs []uint64
	for i := range uint64(40) {
		t0 := i * 20_000_000
		times = append(times, t0, t0+1_000, t0+10_000, t0+12_000)
	}
	for i := range times {
		seqs = append(seqs, uint64(i))
	}
	limits := burstLimits(times)
	require.Equal(t, []uint64{4_000, 9_000}, limits, "the quartile's, then the break's")
	assert.Len(t, bursts(times, limits[0]), 80)
	idx := bursts(times, limits[1])
	require.Len(t, idx, 40)
	assert.Equal(t, 4, burstSize(idx, len(times)))
	for j, i := range idx {
		assert.Equal(t, 4*j, i)
	}
	_, _, patterned := regular(times)
	assert.True(t, patterned, "one allocation per iteration: a long spacing every 4th")
	l := siteLoop(seqs, times, limits[1])
	require.NotNil(t, l)
	assert.Equal(t, uint64(40), l.count)
	assert.Equal(t, uint64(20_000_000), l.period)
}

// TestBetterLoop: a patterned loop (long spacings recurring) loses to one
// that is not, whatever their counts; then more iterations win, then the
// earlier start.
func TestBetterLoop(t *testing.T) {
	bogus := &loop{count: 160, patterned: true, starts: []uint64{0}}
	steps := &loop{count: 40, starts: []uint64{5}}
	assert.True(t, better(steps, nil))
	assert.True(t, better(steps, bogus))
	assert.False(t, better(bogus, steps))
	assert.True(t, better(bogus, nil), "taken when nothing else is")
	assert.True(t, better(&loop{count: 41, starts: []uint64{9}}, steps))
	assert.True(t, better(&loop{count: 40, starts: []uint64{1}}, steps))
	assert.False(t, better(&loop{count: 40, starts: []uint64{7}}, steps))
}
