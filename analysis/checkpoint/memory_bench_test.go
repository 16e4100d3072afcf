package checkpoint

import (
	"runtime"
	"testing"

	"github.com/vramprof/vramprof/probes/event"
)

// liveBytesPer measures the heap a Tracker holds per live allocation: n
// cudaMallocs that stay live (12 sizes, 1000 stacks), the heap in use
// after less the heap before, over n.
func liveBytesPer(tb testing.TB, n int) float64 {
	tb.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tr := NewTracker()
	e := &event.Event{PID: 1, Kind: event.KindAlloc, Layer: event.LayerSegment, API: event.APICudaMalloc}
	addr := uint64(0x7f0000000000)
	for i := range n {
		e.Time = uint64(i+1) * 1000
		e.Addr = addr
		e.Size = uint64(512) << (i % 12)
		e.Stack = event.StackID(i%1000 + 1)
		addr += e.Size
		tr.Observe(e)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(tr)
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)
}

// BenchmarkTrackerMemory reports the tracker's heap per live allocation
// with 1M live (the event it restores, the ledger's entry, the live set's
// class), and its cost per event in a steady churn of 4096 live
// allocations freed and allocated again.
func BenchmarkTrackerMemory(b *testing.B) {
	b.Run("live", func(b *testing.B) {
		var per float64
		for b.Loop() {
			per = liveBytesPer(b, 1_000_000)
		}
		b.ReportMetric(per, "B/live-alloc")
	})
	b.Run("churn", func(b *testing.B) {
		const working = 4096
		tr := NewTracker()
		e := &event.Event{PID: 1, Layer: event.LayerSegment}
		for i := 0; b.Loop(); i++ {
			e.Time = uint64(i+1) * 1000
			e.Addr = 0x7f0000000000 + uint64(i/2%working)<<24
			if i/2/working%2 == 0 {
				e.Kind, e.API, e.Size, e.Stack = event.KindAlloc, event.APICudaMalloc, uint64(512)<<(i%12), event.StackID(i%1000+1)
			} else {
				e.Kind, e.API = event.KindFree, event.APICudaFree
			}
			tr.Observe(e)
		}
	})
}
