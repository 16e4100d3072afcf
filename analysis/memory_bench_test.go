package analysis

import (
	"runtime"
	"testing"

	"github.com/vramprof/vramprof/probes/event"
)

// benchStacks is a realistic number of distinct allocation sites: a large
// model's tensors come from a few hundred to a few thousand Python lines.
const benchStacks = 1000

// benchSizes are the allocation sizes the synthetic streams draw from:
// the caching allocator's rounding leaves a few dozen sizes per run.
var benchSizes = func() []uint64 {
	var s []uint64
	for i := range 48 {
		s = append(s, uint64(512)<<(i%12)*uint64(1+i/12))
	}
	return s
}()

// benchAnalyzer returns an Analyzer that knows benchStacks stacks of pid 1.
func benchAnalyzer(tb testing.TB) *Analyzer {
	tb.Helper()
	a := New(Options{})
	if err := a.Add(&event.Header{Version: 1, Tool: "bench", PID: 1}); err != nil {
		tb.Fatal(err)
	}
	for i := range benchStacks {
		err := a.Add(&event.Stack{ID: event.StackID(i + 1), PID: 1,
			Frames: []event.Frame{{Addr: uint64(i), Function: "f"}}})
		if err != nil {
			tb.Fatal(err)
		}
	}
	return a
}

// feedLive adds n successful allocations that stay live, in one layer, at
// increasing addresses (allocators hand out ascending addresses within a
// segment), sizes and stacks mixed. At the block layer every 64 blocks lie
// in a segment allocated before them.
func feedLive(tb testing.TB, a *Analyzer, n int, layer event.Layer) {
	tb.Helper()
	e := &event.Event{PID: 1, Kind: event.KindAlloc, Layer: layer, API: event.APICudaMalloc}
	if layer == event.LayerBlock {
		e.API = event.APIPyTorchMalloc
	}
	seg := &event.Event{PID: 1, Kind: event.KindAlloc, Layer: event.LayerSegment, API: event.APICudaMalloc, Stack: 1}
	addr := uint64(0x7f0000000000)
	for i := range n {
		e.Time = uint64(i+1) * 1000
		if layer == event.LayerBlock && i%64 == 0 {
			// The segment holds the next 64 blocks exactly: a cached free
			// total that kept growing would snapshot the pool's geometry
			// at every segment.
			seg.Addr, seg.Time, seg.Size = addr, e.Time, 0
			for j := i; j < min(i+64, n); j++ {
				seg.Size += (benchSizes[(j*7)%len(benchSizes)] + 511) &^ 511
			}
			if err := a.Add(seg); err != nil {
				tb.Fatal(err)
			}
		}
		e.Addr = addr
		e.Size = benchSizes[(i*7)%len(benchSizes)]
		e.Stack = event.StackID((i*31)%benchStacks + 1)
		addr += (e.Size + 511) &^ 511
		if err := a.Add(e); err != nil {
			tb.Fatal(err)
		}
	}
}

// liveBytesPer measures the heap an Analyzer holds per live allocation:
// the heap in use after n live allocations less the heap before, over n.
func liveBytesPer(tb testing.TB, n int, layer event.Layer) float64 {
	tb.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	a := benchAnalyzer(tb)
	feedLive(tb, a, n, layer)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(a)
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)
}

// BenchmarkLiveMemory reports the analyser's heap per live allocation with
// 1M live allocations over 1000 stacks and 48 sizes: at the segment layer
// (cudaMalloc, every ledger) and at the block layer (PyTorch's tensors, 64
// to a segment: the segments count too). The ceiling is 150 B per live allocation.
func BenchmarkLiveMemory(b *testing.B) {
	const n = 1_000_000
	for _, tt := range []struct {
		name  string
		layer event.Layer
	}{{"segment", event.LayerSegment}, {"block", event.LayerBlock}} {
		b.Run(tt.name, func(b *testing.B) {
			var per float64
			for b.Loop() {
				per = liveBytesPer(b, n, tt.layer)
			}
			b.ReportMetric(per, "B/live-alloc")
		})
	}
}

// churn feeds n events of a steady training loop: a working set of live
// allocations at each layer, each event freeing the oldest and allocating
// again (half segment layer, half block layer, in one process; the blocks
// lie 64 to a segment).
func churn(tb testing.TB, a *Analyzer, n int) {
	tb.Helper()
	const working = 4096
	for i := range uint64(working / 64) {
		seg := &event.Event{PID: 1, Kind: event.KindAlloc, Layer: event.LayerSegment, API: event.APICudaMalloc,
			Addr: 0x7e0000000000 + i<<30, Size: 1 << 30, Stack: 1, Time: 1}
		if err := a.Add(seg); err != nil {
			tb.Fatal(err)
		}
	}
	e := &event.Event{PID: 1}
	for i := range n {
		e.Time = uint64(i+2) * 1000
		slot := uint64(i/2) % working
		// Each layer's events alternate alloc and free of one slot.
		if i%2 == 0 {
			e.Layer, e.API = event.LayerSegment, event.APICudaMalloc
			e.Addr = 0x7f0000000000 + slot<<24
		} else {
			e.Layer, e.API = event.LayerBlock, event.APIPyTorchMalloc
			e.Addr = 0x7e0000000000 + slot<<24
		}
		if (i/2/working)%2 == 0 {
			e.Kind = event.KindAlloc
			e.Size = benchSizes[(i*7)%len(benchSizes)]
			e.Stack = event.StackID((i*31)%benchStacks + 1)
		} else {
			e.Kind = event.KindFree
			if e.Layer == event.LayerSegment {
				e.API = event.APICudaFree
			} else {
				e.API = event.APIPyTorchFree
			}
		}
		if err := a.Add(e); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkAnalyze reports the analyser's throughput (events/s, Add and
// Finish) on a 4M-event steady loop over 1000 stacks: replay's floor is
// 5M events/s.
func BenchmarkAnalyze(b *testing.B) {
	const n = 4_000_000
	for b.Loop() {
		a := benchAnalyzer(b)
		churn(b, a, n)
		a.Finish()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
