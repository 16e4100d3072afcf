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
// 4 KiB), freeing them all 4 ms in, and, with leak, from step longLeakFrom
// on 1 MiB at leak_step that is never freed. It returns the stream and
// the bytes one step's forward and backward tensors take (stepBytes).
func longTrainerStream(leak bool) (recs []event.Record, stepBytes uint64) {
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
		if leak && i >= longLeakFrom {
			block(t0+8_000_000, base+512*MiB+(i-longLeakFrom)*MiB, MiB, 4)
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
		leak  bool
		leaks int
	}{
		{"leak", 0, true, 1},
		{"leak, log of 4096", 4096, true, 1},
		{"healthy", 0, false, 0},
		{"healthy, log of 4096", 4096, false, 0},
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
			if tt.leak {
				leaked = (longSteps - 1 - longLeakFrom) * MiB
			}
			assert.Equal(t, float64((longSteps-1)*stepBytes+leaked)/(longSteps-1), it.AllocatedBytesPerIteration)
			// Live tensors just before step j: the leaks of steps 200..j-1.
			ys := make([]float64, longSteps)
			for j := range ys {
				if tt.leak && j > longLeakFrom {
					ys[j] = float64((uint64(j) - longLeakFrom) * MiB)
				}
			}
			assert.InDelta(t, leastSquares(ys), it.LiveGrowthPerIteration, 1e-6)

			leaks := findings(r, KindLeak)
			require.Len(t, leaks, tt.leaks)
			if !tt.leak {
				return
			}
			f := leaks[0]
			assert.Equal(t, event.StackID(4), f.Stacks[0].Stack, "at leak_step")
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
