package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vramprof/vramprof/probes/event"
)

// leakStream mirrors testdata/scenarios/leak.c over trainer.c: load_model's
// four weights, then 100 iterations of forward (4 allocations from one
// call site), cache_activations(i) keeping 1 MiB + i*4096 bytes, backward (4
// allocations), optimizer_step (8 frees), then teardown. Each step is a
// few µs apart with some jitter, an iteration about 10 ms.
func leakStream(withCapacity bool) *stream {
	s := newStream().stack(1, "load_model", 10).stack(2, "forward", 20).stack(3, "cache_activations", 30).
		stack(4, "backward", 40)
	if withCapacity {
		s.recs = append(s.recs, &event.DeviceInfo{Index: 0, Name: "GPU", TotalBytes: 40 * GiB})
	}
	weights := []uint64{256 * MiB, 128 * MiB, 64 * MiB, 1000000}
	acts := []uint64{8 * MiB, 4 * MiB, 2*MiB + 12345, 1 * MiB}
	grads := []uint64{16 * MiB, 8 * MiB, 3000000, 777}
	t := uint64(1e6)
	for k, w := range weights {
		s.alloc(t, 0x10000000+uint64(k)<<32, w, 1)
		t += 50_000
	}
	for i := uint64(0); i < 100; i++ {
		t = 10e6 + i*10e6 + (i*7919)%300_000 // jitter within 3% of the period
		for k, a := range acts {
			s.alloc(t, 0x20000000+uint64(k)<<32, a, 2)
			t += 20_000
		}
		s.alloc(t, 0x90000000000+i<<24, MiB+i*4096, 3)
		t += 20_000
		for k, g := range grads {
			s.alloc(t, 0x30000000+uint64(k)<<32, g, 4)
			t += 20_000
		}
		for k := range acts {
			s.free(t, 0x20000000+uint64(k)<<32)
			s.free(t+1, 0x30000000+uint64(k)<<32)
			t += 10_000
		}
	}
	t += 1e6
	for k := range weights {
		s.free(t, 0x10000000+uint64(k)<<32)
		t += 10_000
	}
	return s.end(t + 1e6)
}

func TestIterationsAndLeakRate(t *testing.T) {
	r := mustAnalyze(t, Options{}, leakStream(true).recs)
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
	r = mustAnalyze(t, Options{Capacity: GiB}, leakStream(true).recs)
	l = findings(r, KindLeak)[0].Leak
	assert.Equal(t, GiB, l.CapacityBytes)
	assert.InDelta(t, 7.6, l.TimeToOOMSeconds, 0.1)
	assert.True(t, l.TimeToOOMProjectable())
	// Without either there is no time to OOM.
	r = mustAnalyze(t, Options{}, leakStream(false).recs)
	l = findings(r, KindLeak)[0].Leak
	assert.Zero(t, l.CapacityBytes)
	assert.Zero(t, l.TimeToOOMSeconds)
	assert.InEpsilon(t, truth, l.BytesPerIteration, 0.01)
	assert.False(t, l.TimeToOOMProjectable())
}

func TestIterationsNone(t *testing.T) {
	// Allocations at irregular times make no loop.
	s := newStream().stack(1, "f", 10)
	for i, at := range []uint64{1, 2, 50, 51, 52, 400, 900, 905} {
		s.alloc(at*1e6, 0x1000+uint64(i)<<20, MiB, 1)
	}
	r := mustAnalyze(t, Options{}, s.end(1e9).recs)
	assert.Nil(t, process(t, r, 100).Iterations)
	// Too few repetitions are no loop either.
	s = newStream().stack(1, "f", 10)
	for i := range uint64(3) {
		s.alloc((i+1)*1e6, 0x1000+i<<20, MiB, 1)
	}
	r = mustAnalyze(t, Options{}, s.end(1e9).recs)
	assert.Nil(t, process(t, r, 100).Iterations)
}

func TestBursts(t *testing.T) {
	// Two allocations per iteration: the short gaps join them.
	assert.Equal(t, []int{0, 2, 4, 6}, bursts([]uint64{0, 1, 100, 101, 200, 202, 300, 301}))
	// One per iteration: each is its own burst.
	assert.Equal(t, []int{0, 1, 2, 3}, bursts([]uint64{0, 100, 199, 301}))
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
	idx := bursts(times)
	assert.Greater(t, len(idx), 20)
	assert.Equal(t, 4, burstSize(idx, len(times)))
	assert.InDelta(t, 2.0, slope([]float64{0, 2, 4, 6}), 1e-12)
}
