package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

// longTrainer is a trainer with many tensors per step (see longTrainerStream).
const (
	longSteps    = 300
	longForward  = 600 // tensors per step at forward (stack 2)
	longBackward = 400 // tensors per step at backward (stack 3)
	longPeriod   = 10_000_000
	longLeakFrom = 200 // leak_step (stack 4) keeps 1 MiB per step from here on
)

// longTrainerStream is a trainer traced at the block layer, far past the
// iteration logs' 65536 entries: one segment of 1 GiB, then longSteps
// steps of 10 ms, each allocating longForward tensors at forward and
// longBackward at backward (gaps of 1 and 3 µs alternating, sizes 512 B to
// 4 KiB), freeing them all 4 ms in, and, with a leak stack (not 0), from
// step longLeakFrom on 1 MiB there that is never freed, 8 ms in: at
// leak_step (4), or at backward (3), whose 800 changes a step fill its
// live-bytes log after 82 steps. It returns the stream and the bytes one
// step's forward and backward tensors take (stepBytes).
func longTrainerStream(leak event.StackID) (recs []event.Record, stepBytes uint64) {
	s := eventtest.NewStream().Stack(1, "alloc_segment", 1).Stack(2, "forward", 20).
		Stack(3, "backward", 30).Stack(4, "leak_step", 40)
	base := eventtest.SegBase
	s.Ev(event.Event{Time: 500_000, Duration: 10e3, Addr: base, Size: GiB, Stack: 1, TID: 1,
		Kind: event.KindAlloc, API: event.APICudaMalloc})
	block := func(t, addr, size uint64, st event.StackID) {
		s.Ev(event.Event{Time: t, Addr: addr, Size: size, Stack: st, TID: 1, Layer: event.LayerBlock,
			Kind: event.KindAlloc, API: event.APIPyTorchMalloc})
	}
	for i := range uint64(longSteps) {
		t0 := 1_000_000 + i*longPeriod
		for j := range uint64(longForward + longBackward) {
			st, k, at := event.StackID(2), j, t0
			if j >= longForward {
				st, k, at = 3, j-longForward, t0+1_500_000
			}
			size := 512 * (1 + j%8)
			block(at+2_000*k+1_000*(k%2), base+j*8*KiB, size, st)
			if i == 0 {
				stepBytes += size
			}
		}
		for j := range uint64(longForward + longBackward) {
			s.Ev(event.Event{Time: t0 + 4_000_000 + 1_000*j, Addr: base + j*8*KiB, TID: 1,
				Layer: event.LayerBlock, Kind: event.KindFree, API: event.APIPyTorchFree})
		}
		if leak != 0 && i >= longLeakFrom {
			block(t0+8_000_000, base+512*MiB+(i-longLeakFrom)*MiB, MiB, leak)
		}
	}
	s.End(1_000_000 + longSteps*longPeriod)
	return s.Recs, stepBytes
}

// leastSquares is the least-squares slope of ys against 0, 1, 2...
func leastSquares(ys []float64) float64 {
	n := float64(len(ys))
	var sx, sy, sxy, sxx float64
	for i, y := range ys {
		x := float64(i)
		sx, sy, sxy, sxx = sx+x, sy+y, sxy+x*y, sxx+x*x
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

// TestIterationsLongRun: 300 steps of 1000 tensors (300000 allocations,
// past the logs' 65536 entries, and with a log of 4096 past them after 7
// steps) keep their loop and its figures exact, and a leak that starts at
// step 200 of 300 is found by the late-leak look with its rate and start;
// the same trainer without it has none.
func TestIterationsLongRun(t *testing.T) {
	for _, tt := range []struct {
		name  string
		log   int
		leak  event.StackID
		leaks int
	}{
		{"leak", 0, 4, 1},
		{"leak, log of 4096", 4096, 4, 1},
		{"leak at a busy site", 0, 3, 1},
		{"leak at a busy site, log of 4096", 4096, 3, 1},
		{"healthy", 0, 0, 0},
		{"healthy, log of 4096", 4096, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			recs, stepBytes := longTrainerStream(tt.leak)
			a := New(Options{IterationLog: tt.log})
			for _, rec := range recs {
				require.NoError(t, a.Add(rec))
			}
			r := a.Finish()
			limit := a.opts.IterationLog
			// Bounded: no stack's logs hold more than the cap, whatever
			// the run's length (forward alone allocated 180000 tensors).
			for gi := range a.iters.stacks {
				s := &a.iters.stacks[gi]
				assert.LessOrEqual(t, s.site.st.len(), limit)
				assert.LessOrEqual(t, s.site.bursts.len(), limit)
				assert.LessOrEqual(t, s.live.st.len(), limit)
				assert.LessOrEqual(t, s.live.ends.len(), limit)
			}
			it := process(t, r, 100).Iterations
			require.NotNil(t, it, "the loop is found")
			assert.Equal(t, uint64(longSteps), it.Count)
			assert.Equal(t, event.StackID(2), it.Stack, "forward's bursts start first")
			assert.Equal(t, uint64(longPeriod), it.PeriodNs)
			require.Len(t, it.Starts, longSteps)
			assert.Equal(t, uint64(1_000_000+(longSteps-1)*longPeriod), it.LastStart)
			// From the first start to the last: 299 steps of tensors, and
			// the leaks of steps 200..298 (step 299's comes after its
			// start).
			leaked := uint64(0)
			if tt.leak != 0 {
				leaked = (longSteps - 1 - longLeakFrom) * MiB
			}
			assert.Equal(t, float64((longSteps-1)*stepBytes+leaked)/(longSteps-1), it.AllocatedBytesPerIteration)
			// Live tensors just before step j: the leaks of steps 200..j-1.
			ys := make([]float64, longSteps)
			for j := range ys {
				if tt.leak != 0 && j > longLeakFrom {
					ys[j] = float64((uint64(j) - longLeakFrom) * MiB)
				}
			}
			assert.InDelta(t, leastSquares(ys), it.LiveGrowthPerIteration, 1e-6)

			leaks := findings(r, KindLeak)
			require.Len(t, leaks, tt.leaks)
			if tt.leak == 0 {
				return
			}
			f := leaks[0]
			assert.Equal(t, tt.leak, f.Stacks[0].Stack, "at its site")
			assert.Equal(t, (longSteps-longLeakFrom)*MiB, f.Bytes)
			l := f.Leak
			assert.Equal(t, uint64(1_000_000+longLeakFrom*longPeriod), l.Since, "since step 200's start")
			// The rate: the slope of leak_step's live bytes at the 300
			// starts and at the end (100 MiB).
			ys = append(ys, float64((longSteps-longLeakFrom)*MiB))
			assert.Equal(t, uint64(longSteps), l.Iterations)
			assert.InDelta(t, leastSquares(ys), l.BytesPerIteration, 1e-6)
		})
	}
}

// blockAt adds a tensor of size bytes at addr from stack st (thread 1).
func blockAt(s *eventtest.Stream, t, addr, size uint64, st event.StackID) {
	s.Ev(event.Event{Time: t, Addr: addr, Size: size, Stack: st, TID: 1, Layer: event.LayerBlock,
		Kind: event.KindAlloc, API: event.APIPyTorchMalloc})
}

// blockFree frees the tensor at addr.
func blockFree(s *eventtest.Stream, t, addr uint64) {
	s.Ev(event.Event{Time: t, Addr: addr, TID: 1, Layer: event.LayerBlock, Kind: event.KindFree, API: event.APIPyTorchFree})
}

// TestIterationsNested: gradient accumulation, 30 optimizer steps of 4
// micro-steps of 1 ms. forward (stack 2) makes 4 activations a micro-step
// and frees them; the first micro-step's backward (stack 3) makes the 5
// gradients, which zero_grad frees at the step's end. forward's 120
// micro-steps are the most iterations, but live memory at their starts
// repeats every 4 of them (gradients live or not): the step is
// backward's, 30 of 4 ms. A checkpoint copy every 4 steps (stack 4, freed
// within its step) leaves the live bytes at the starts flat: the 120
// steps stay the loop.
func TestIterationsNested(t *testing.T) {
	const steps, micro, microNs = 30, 4, 1_000_000
	for _, tt := range []struct {
		name         string
		accumulate   bool
		count, per   uint64
		stack        event.StackID
		periodMicros uint64
	}{
		{"gradient accumulation", true, steps, micro, 3, micro},
		{"a checkpoint every 4 steps", false, steps * micro, 1, 2, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := eventtest.NewStream().Stack(2, "forward", 20).Stack(3, "backward", 30).Stack(4, "checkpoint", 40)
			base := eventtest.SegBase
			for i := range uint64(steps) {
				for m := range uint64(micro) {
					t0 := 1_000_000 + (i*micro+m)*microNs
					for j := range uint64(4) {
						blockAt(s, t0+j*1_000, base+j*MiB, MiB, 2)
					}
					first := m == 0
					if tt.accumulate && first || !tt.accumulate {
						for j := range uint64(5) {
							blockAt(s, t0+10_000+j*1_000, base+(8+j)*MiB, 2*MiB, 3)
						}
					}
					if !tt.accumulate && (i*micro+m)%4 == 3 {
						blockAt(s, t0+30_000, base+32*MiB, 8*MiB, 4)
						blockFree(s, t0+40_000, base+32*MiB)
					}
					for j := range uint64(4) {
						blockFree(s, t0+50_000+j*1_000, base+j*MiB)
					}
					if !tt.accumulate || m == micro-1 {
						for j := range uint64(5) {
							blockFree(s, t0+60_000+j*1_000, base+(8+j)*MiB)
						}
					}
				}
			}
			r := mustAnalyze(t, Options{}, s.End(1_000_000+steps*micro*microNs).Recs)
			it := process(t, r, 100).Iterations
			require.NotNil(t, it)
			assert.Equal(t, tt.count, it.Count)
			assert.Equal(t, tt.stack, it.Stack)
			assert.Equal(t, tt.periodMicros*microNs, it.PeriodNs)
			assert.Zero(t, it.LiveGrowthPerIteration)
		})
	}
}

// TestIterationsCutByOOM: 12 steps of 2 ms at embed (stack 2), then a
// 13th whose embedding fails (a batch too large for the device): the
// loop counts 13. The same when the loop is forward's (embed skipped step
// 0), which comes after embed in a step. The same failure from
// grow_batch, code the loop never ran, cuts no step: 12.
func TestIterationsCutByOOM(t *testing.T) {
	for _, tt := range []struct {
		name      string
		fail      event.StackID
		embedFrom uint64
		loop      event.StackID
		count     uint64
	}{
		{"at the step's site", 5, 0, 2, 13},
		{"at a site before the loop's", 5, 1, 3, 13},
		{"after the loop", 6, 0, 2, 12},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := eventtest.NewStream().Stack(2, "embed", 20).Stack(3, "forward", 30).
				Stack(5, "embed", 20).Stack(6, "grow_batch", 60)
			base := eventtest.SegBase
			const period = 2_000_000
			for i := range uint64(12) {
				t0 := 1_000_000 + i*period
				if i >= tt.embedFrom {
					blockAt(s, t0, base, MiB, 2)
				}
				blockAt(s, t0+1_000, base+MiB, MiB, 3)
				blockFree(s, t0+2_000, base+MiB)
				if i >= tt.embedFrom {
					blockFree(s, t0+3_000, base)
				}
			}
			// The 13th step's request: the allocator's cudaMalloc fails.
			s.Fail(1_000_000+12*period, 256*MiB, tt.fail, 2)
			r := mustAnalyze(t, Options{}, s.End(1_000_000+13*period).Recs)
			it := process(t, r, 100).Iterations
			require.NotNil(t, it)
			assert.Equal(t, tt.loop, it.Stack)
			assert.Equal(t, tt.count, it.Count)
			assert.Equal(t, uint64(period), it.PeriodNs)
			assert.Len(t, it.Starts, 12, "the cut step has no start of its own")
		})
	}
}

// TestIterationsShortBurstIsNoLoop: load_model's 5 weights, 10 µs apart,
// are as regular as a loop, but span 40 µs of a run of 70 ms; the 20
// steps of forward (2 tensors each), every 4th stalled by 10 ms
// (patterned), are the loop.
func TestIterationsShortBurstIsNoLoop(t *testing.T) {
	s := eventtest.NewStream().Stack(2, "load_model", 10).Stack(3, "forward", 20)
	base := eventtest.SegBase
	for i := range uint64(5) {
		blockAt(s, 1_000_000+i*10_000, base+i*MiB, MiB, 2)
	}
	t0 := uint64(2_000_000)
	for i := range uint64(20) {
		if i%4 == 0 && i > 0 {
			t0 += 10_000_000
		}
		blockAt(s, t0, base+8*MiB, MiB, 3)
		blockAt(s, t0+10_000, base+9*MiB, MiB, 3)
		blockFree(s, t0+100_000, base+8*MiB)
		blockFree(s, t0+110_000, base+9*MiB)
		t0 += 2_000_000
	}
	r := mustAnalyze(t, Options{}, s.End(t0).Recs)
	it := process(t, r, 100).Iterations
	require.NotNil(t, it)
	assert.Equal(t, event.StackID(3), it.Stack)
	assert.Equal(t, uint64(20), it.Count)
	assert.Equal(t, uint64(2_000_000), it.PeriodNs)
}

// TestIterationsRandomStallsNoPattern: 80 steps of 2 ms at forward, 12 of
// them stalled by 8 to 13 ms at random (a loaded machine: one spacing in 7
// is long, at no stride), and a checkpoint every 20 steps (cast_chunk: 30
// chunks, 4 bursts of 50 ms): the steps are the loop, not the checkpoints.
func TestIterationsRandomStallsNoPattern(t *testing.T) {
	s := eventtest.NewStream().Stack(2, "forward", 20).Stack(3, "cast_chunk", 30)
	base := eventtest.SegBase
	stalls := map[uint64]uint64{3: 10, 7: 8, 16: 13, 18: 9, 29: 11, 33: 8, 41: 12, 47: 10, 58: 9, 61: 13, 70: 8, 76: 11}
	t0 := uint64(1_000_000)
	for i := range uint64(80) {
		t0 += stalls[i] * 1_000_000
		blockAt(s, t0, base, MiB, 2)
		blockAt(s, t0+10_000, base+MiB, MiB, 2)
		blockFree(s, t0+100_000, base)
		blockFree(s, t0+110_000, base+MiB)
		if i%20 == 19 {
			for j := range uint64(30) {
				blockAt(s, t0+200_000+j*5_000, base+8*MiB, MiB, 3)
				blockFree(s, t0+202_000+j*5_000, base+8*MiB)
			}
		}
		t0 += 2_000_000
	}
	r := mustAnalyze(t, Options{}, s.End(t0).Recs)
	it := process(t, r, 100).Iterations
	require.NotNil(t, it)
	assert.Equal(t, event.StackID(2), it.Stack)
	assert.Equal(t, uint64(80), it.Count)
	assert.Equal(t, uint64(2_000_000), it.PeriodNs)
}

// TestLiveLogCompacted: a stack's live-bytes log past its cap keeps its
// bursts' last changes: exact just before an event that falls in a gap
// between its bursts (and at a time there), not within a burst.
func TestLiveLogCompacted(t *testing.T) {
	const limit = 64
	var l liveLog
	// Bursts of 4 changes 1 µs apart (+1, +1, -1, -1 KiB: back to the
	// burst's start plus 1 KiB), every 1 ms: events 10*k+1..10*k+4.
	live := uint64(0)
	for k := range uint64(40) {
		for j, d := range []int64{1, 1, -1, -1} {
			live = uint64(int64(live) + d*int64(KiB))
			l.add(10*k+uint64(j)+1, k*1_000_000+uint64(j)*1_000, live, limit)
		}
		live += KiB
		l.add(10*k+5, k*1_000_000+4_000, live, limit)
	}
	require.True(t, l.compacted)
	assert.LessOrEqual(t, l.ends.len(), limit)
	// Just before burst 30 (event 301): the live bytes after burst 29,
	// 30 KiB.
	assert.True(t, l.exactBefore(301))
	assert.Equal(t, 30*KiB, l.before(301))
	assert.True(t, l.exactAt(30*1_000_000-1))
	assert.Equal(t, 30*KiB, l.at(30*1_000_000-1))
	// Within burst 30 (before event 303) it does not know.
	assert.False(t, l.exactBefore(303))
	assert.False(t, l.exactAt(30*1_000_000+1_500))
	// After the last change: the live bytes at the end.
	assert.True(t, l.exactBefore(1000))
	assert.Equal(t, 40*KiB, l.before(1000))
}
