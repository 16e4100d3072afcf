package analysis

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

func TestIterationsAndLeakRate(t *testing.T) {
	r := mustAnalyze(t, Options{}, eventtest.LeakStream(true).Recs)
	p := process(t, r, 100)
	require.NotNil(t, p.Iterations, "the loop is found")
	it := p.Iterations
	// forward, cache_activations and backward each mark 100 iterations;
	// forward's bursts start earliest, so forward paces the loop.
	assert.Equal(t, uint64(100), it.Count)
	assert.Equal(t, event.StackID(2), it.Stack)
	assert.InDelta(t, 10e6, float64(it.PeriodNs), 0.05*10e6)
	assert.Len(t, it.Starts, 100)
	// Iterations 0..98 (first start to last start) each allocate the
	// activations and gradients, 15740985 + 28166601 bytes, and 1 MiB +
	// 4096 i: on average 44956162 + 4096 * 49 = 45156866 bytes.
	assert.InDelta(t, 45156866.0, it.AllocatedBytesPerIteration, 1e-6)
	// Live bytes grow by the cache's 1 MiB + 4096 i: 1251328 on average.
	assert.InEpsilon(t, 125132800.0/100, it.LiveGrowthPerIteration, 0.01)

	leaks := findings(r, KindLeak)
	require.Len(t, leaks, 1)
	l := leaks[0].Leak
	// The truth: sum over i<100 of 1 MiB + 4096 i = 125132800 bytes kept
	// over 100 iterations, 1251328 bytes per iteration on average.
	const truth = 125132800.0 / 100
	t.Logf("bytes/iteration %.1f (truth %.1f), bytes/minute %.0f, period %d ns, time to OOM %.1f s", l.BytesPerIteration, truth, l.BytesPerMinute, it.PeriodNs, l.TimeToOOMSeconds)
	assert.Equal(t, uint64(100), l.Iterations)
	assert.InEpsilon(t, truth, l.BytesPerIteration, 0.01)
	assert.InEpsilon(t, truth*60e9/float64(it.PeriodNs), l.BytesPerMinute, 1e-9)
	// Capacity from DeviceInfo: 40 GiB; live at the end is the leak only.
	assert.Equal(t, 40*GiB, l.CapacityBytes)
	assert.InEpsilon(t, float64(40*GiB-125132800)/(l.BytesPerMinute/60), l.TimeToOOMSeconds, 1e-9)
	// The growth over the run is all the cache kept: 125132800 bytes.
	assert.Equal(t, uint64(125132800), leaks[0].Bytes)
	// 100 iterations of ~10 ms observe ~1 s: a rate per second, never per
	// minute; 40 GiB at ~125 MB/s is ~340 s away, beyond 10 x 1 s: the run
	// is too short to project it (report words it, TestWordsLeakRate).
	_, observed := l.BytesPerSecondObserved()
	b, ok := RateBaseFor(observed)
	assert.True(t, ok)
	assert.Equal(t, "second", b.Name)
	assert.False(t, l.TimeToOOMProjectable())

	// Options.Capacity wins over NVML. With 1 GiB, (1073741824 - 125132800)
	// / (1251328 bytes per ~10 ms) = ~7.6 s, within 10 x the ~1 s observed:
	// projected.
	r = mustAnalyze(t, Options{Capacity: GiB}, eventtest.LeakStream(true).Recs)
	l = findings(r, KindLeak)[0].Leak
	assert.Equal(t, GiB, l.CapacityBytes)
	assert.InDelta(t, 7.6, l.TimeToOOMSeconds, 0.1)
	assert.True(t, l.TimeToOOMProjectable())
	// Without either there is no time to OOM.
	r = mustAnalyze(t, Options{}, eventtest.LeakStream(false).Recs)
	l = findings(r, KindLeak)[0].Leak
	assert.Zero(t, l.CapacityBytes)
	assert.Zero(t, l.TimeToOOMSeconds)
	assert.InEpsilon(t, truth, l.BytesPerIteration, 0.01)
	assert.False(t, l.TimeToOOMProjectable())
}

func TestIterationsNone(t *testing.T) {
	// Allocations at irregular times make no loop.
	s := eventtest.NewStream().Stack(1, "f", 10)
	for i, at := range []uint64{1, 2, 50, 51, 52, 400, 900, 905} {
		s.Alloc(at*1e6, 0x1000+uint64(i)<<20, MiB, 1)
	}
	r := mustAnalyze(t, Options{}, s.End(1e9).Recs)
	assert.Nil(t, process(t, r, 100).Iterations)
	// Too few repetitions are no loop either.
	s = eventtest.NewStream().Stack(1, "f", 10)
	for i := range uint64(3) {
		s.Alloc((i+1)*1e6, 0x1000+i<<20, MiB, 1)
	}
	r = mustAnalyze(t, Options{}, s.End(1e9).Recs)
	assert.Nil(t, process(t, r, 100).Iterations)
}

// quartileBursts splits times at gaps longer than 4 times their lower
// quartile (burstLimits' first limit).
func quartileBursts(times []uint64) []int { return bursts(times, burstLimits(times)[0]) }

func TestBursts(t *testing.T) {
	// Two allocations per iteration: the short gaps join them.
	assert.Equal(t, []int{0, 2, 4, 6}, quartileBursts([]uint64{0, 1, 100, 101, 200, 202, 300, 301}))
	// One per iteration: each is its own burst.
	assert.Equal(t, []int{0, 1, 2, 3}, quartileBursts([]uint64{0, 100, 199, 301}))
	// A stall inside one iteration splits its burst; the mode is still 4.
	times := []uint64{}
	for i := range uint64(20) {
		base := i * 100_000
		gap := uint64(3_000)
		if i == 7 {
			gap = 60_000
		}
		times = append(times, base, base+gap, base+gap+3_000, base+gap+6_000)
	}
	idx := quartileBursts(times)
	assert.Greater(t, len(idx), 20)
	assert.Equal(t, 4, burstSize(idx, len(times)))
}

func TestLeakDescheduled(t *testing.T) {
	// LeakStream's loop, descheduled for 1.5 s before iteration 38 and 2 s
	// before iteration 71: over time, windows 2, 4 and 5 of the 4.5 s run
	// see no iteration, so the stack rises in 2 steps of 5, which the time
	// windows do not take for a leak. By iterations it is the same leak as
	// undisturbed, found the same.
	r := mustAnalyze(t, Options{}, eventtest.StalledLeakStream().Recs)
	it := process(t, r, 100).Iterations
	require.NotNil(t, it, "the loop is found through the stalls")
	require.Equal(t, uint64(100), it.Count)
	leaks := findings(r, KindLeak)
	require.Len(t, leaks, 1)
	f := leaks[0]
	assert.Equal(t, event.StackID(3), f.Stacks[0].Stack, "cache_activations")
	// What the cache kept: sum over i<100 of 1 MiB + 4096 i.
	assert.Equal(t, uint64(125132800), f.Bytes)
	l := f.Leak
	assert.Equal(t, uint64(125132800), l.GrowthBytes)
	// Six windows of 100 iterations: window k < 6 ends where iteration
	// ceil(100 k / 6) = 17, 34, 50, 67, 84 starts, holding the cache of the
	// iterations before it (k iterations: 1 MiB k + 4096 k(k-1)/2); the
	// last ends at the last event, holding all of it.
	kept := func(k uint64) uint64 { return k*MiB + 4096*k*(k-1)/2 }
	assert.Equal(t, []uint64{kept(17), kept(34), kept(50), kept(67), kept(84), kept(100)}, l.Live)
	assert.Equal(t, []uint64{it.Starts[17], it.Starts[34], it.Starts[50], it.Starts[67], it.Starts[84]}, l.WindowEnds[:5])
	assert.Equal(t, l.To, l.WindowEnds[5])
	assert.Equal(t, kept(100)-kept(17), l.WindowGrowthBytes)
	assert.Equal(t, []uint64{it.Starts[17], l.To}, []uint64{l.WindowStart, l.WindowEnd})
	assert.InEpsilon(t, 125132800.0/100, l.BytesPerIteration, 0.01)
	// The stalls moved nothing else: no other stack leaks, undisturbed or
	// not, and LeakStream's time windows find the leak as before.
	r = mustAnalyze(t, Options{}, eventtest.LeakStream(false).Recs)
	leaks = findings(r, KindLeak)
	require.Len(t, leaks, 1)
	assert.Equal(t, event.StackID(3), leaks[0].Stacks[0].Stack)
}

// TestSiteLoopStallsMakeNoMode is CI's leak run (134 iterations of 93.2
// µs for leak.c's 100): forward() allocates 4 times a step (5 µs apart,
// the next step 85 µs on), and 4 stalls of 2 ms cut the site in 5 runs of
// 101, 3, 146, 80 and 70 allocations. The natural break (85 µs) splits at
// the stalls only; every size is seen once, so the smallest, 3, was taken
// for the allocations per step: a run of 3 every 95 µs, 134 of them,
// regular and more than the quartile's 100. The runs of 3 do not start
// where the bursts do: that limit makes no loop, and the quartile's does.
func TestSiteLoopStallsMakeNoMode(t *testing.T) {
	const steps, per = 100, 4
	var seqs, times []uint64
	now := uint64(1e9)
	stalls := map[int]bool{101: true, 104: true, 250: true, 330: true}
	for i := range steps * per {
		switch {
		case i == 0:
		case i%per == 0:
			now += 85_000
		default:
			now += 5_000
		}
		if stalls[i] {
			now += 2_000_000
		}
		seqs, times = append(seqs, uint64(i)), append(times, now)
	}
	limits := burstLimits(times)
	require.Len(t, limits, 2, "the quartile's limit and the natural break")
	assert.Equal(t, uint64(20_000), limits[0], "4 x the lower quartile, 5 µs")
	assert.Equal(t, uint64(85_000), limits[1], "the break: the step's gap, below the stalls'")
	assert.Nil(t, siteLoop(seqs, times, limits[1]), "runs of 3 that start mid-burst are no loop")
	l := siteLoop(seqs, times, limits[0])
	require.NotNil(t, l)
	assert.Equal(t, uint64(steps), l.count)
	assert.Equal(t, uint64(100_000), l.period, "85 µs + 3 x 5 µs")
}

// TestLeakTimeToOOMFromNVML: with NVML samples the time to OOM counts down
// NVML's free bytes at its last sample before the end, which takes out what
// the trace cannot see (another process's 2 GiB, the context's 300 MiB),
// not capacity - traced; a sample after the process exited (its memory
// back) is not the one read. Options.Capacity still wins.
func TestLeakTimeToOOMFromNVML(t *testing.T) {
	s := eventtest.LeakStream(true)
	end := s.Recs[len(s.Recs)-1].(*event.End)
	const traced = 125132800 // live at the end: the leak (TestIterationsAndLeakRate)
	free := 40*GiB - traced - 300*MiB - 2*GiB
	before := &event.Sample{Time: end.Time - 500_000, Device: 0, TotalBytes: 40 * GiB, FreeBytes: free, UsedBytes: 40*GiB - free}
	after := &event.Sample{Time: end.Time + 100e6, Device: 0, TotalBytes: 40 * GiB, FreeBytes: 38 * GiB, UsedBytes: 2 * GiB}
	recs := append(slices.Clone(s.Recs[:len(s.Recs)-1]), &event.NVMLStatus{Time: 1, Available: true}, before, end, after)

	r := mustAnalyze(t, Options{}, recs)
	leaks := findings(r, KindLeak)
	require.Len(t, leaks, 1)
	l := leaks[0].Leak
	assert.Equal(t, 40*GiB, l.CapacityBytes)
	assert.True(t, l.HeadroomNVML)
	assert.Equal(t, free, l.HeadroomBytes)
	assert.Equal(t, before.Time, l.HeadroomTime)
	assert.InEpsilon(t, float64(free)/(l.BytesPerMinute/60), l.TimeToOOMSeconds, 1e-9)

	r = mustAnalyze(t, Options{Capacity: GiB}, recs)
	l = findings(r, KindLeak)[0].Leak
	assert.False(t, l.HeadroomNVML)
	assert.Equal(t, GiB-traced, l.HeadroomBytes)
	assert.Zero(t, l.HeadroomTime)
	assert.InEpsilon(t, float64(GiB-traced)/(l.BytesPerMinute/60), l.TimeToOOMSeconds, 1e-9)
}
