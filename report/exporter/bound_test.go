package exporter

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

// TestMemoryIsBounded: a process allocating and freeing forever at a few
// sites (a training loop) costs the exporter no more memory after 1.8M
// events than after 600k: nothing is kept per event once the iteration
// detector's per-stack logs are full (2^16 entries each).
func TestMemoryIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("feeds 1.8M events")
	}
	x := New(Options{PerProcess: true, Alive: func(uint32, uint64) bool { return true }})
	const pid = 99
	require.NoError(t, x.Write(&event.Process{PID: pid, Command: []string{"trainer"}}))
	for id := event.StackID(1); id <= 4; id++ {
		require.NoError(t, x.Write(&event.Stack{ID: id, PID: pid, Frames: []event.Frame{{Addr: uint64(id), Function: "f"}}}))
	}
	var ev event.Event
	tm := uint64(0)
	pairs := func(n int) {
		for i := range n {
			st := event.StackID(i%4 + 1)
			addr := 0x1000_0000 + uint64(st)<<24
			tm += 1000
			ev = event.Event{Time: tm, Addr: addr, Size: MiB, PID: pid, Stack: st, Kind: event.KindAlloc,
				API: event.APICudaMalloc, Layer: event.LayerSegment}
			require.NoError(t, x.Write(&ev))
			tm += 1000
			ev = event.Event{Time: tm, Addr: addr, PID: pid, Stack: st, Kind: event.KindFree,
				API: event.APICudaFree, Layer: event.LayerSegment}
			require.NoError(t, x.Write(&ev))
		}
	}
	heap := func() uint64 {
		_, err := x.Result(pid) // a scrape
		require.NoError(t, err)
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	pairs(300_000)
	before := heap()
	start := time.Now()
	pairs(600_000)
	perEvent := time.Since(start) / 1_200_000
	after := heap()
	res, err := x.Result(pid)
	require.NoError(t, err)
	assert.Equal(t, uint64(900_000), res.Totals.Allocations)
	assert.Equal(t, uint64(0), res.Totals.LiveBytesAtEnd)
	growth := int64(after) - int64(before)
	t.Logf("heap after 600k events %d KiB, after 1.8M %d KiB (growth %d KiB); %s per event", before>>10, after>>10, growth>>10, perEvent)
	assert.Less(t, growth, int64(1<<20), "heap grew with events")
}
