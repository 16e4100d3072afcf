package recorder

import (
	"encoding/json"
	"os"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

// newClock is a Clock for tests: it starts at 1 and steps one nanosecond a
// call, so every stamp is later than the last.
func newClock() func() uint64 {
	var t atomic.Uint64
	return func() uint64 { return t.Add(1) }
}

// mustReadJSON reads a JSON file (a report) into a T.
func mustReadJSON[T any](tb testing.TB, path string) *T {
	tb.Helper()
	data, err := os.ReadFile(path)
	require.NoError(tb, err)
	var v T
	require.NoError(tb, json.Unmarshal(data, &v), "parse %s", path)
	return &v
}

// totalsReport is the part of report.json these tests read.
type totalsReport struct {
	Totals struct {
		Allocations    uint64 `json:"allocations"`
		Frees          uint64 `json:"frees"`
		AllocatedBytes uint64 `json:"allocated_bytes"`
		PeakBytes      uint64 `json:"peak_bytes"`
		LiveBytesAtEnd uint64 `json:"live_bytes_at_end"`
	} `json:"totals"`
	Run struct {
		EndReason string `json:"end_reason"`
	} `json:"run"`
}

// alloc is a successful cudaMalloc of size at addr by pid 7 at t.
func alloc(t, addr, size uint64) *event.Event {
	return &event.Event{Time: t, Addr: addr, Size: size, PID: 7, TID: 7, Stack: 1, Kind: event.KindAlloc,
		Layer: event.LayerSegment, API: event.APICudaMalloc}
}

// free is the cudaFree of addr by pid 7 at t.
func free(t, addr uint64) *event.Event {
	return &event.Event{Time: t, Addr: addr, PID: 7, TID: 7, Stack: 1, Kind: event.KindFree,
		Layer: event.LayerSegment, API: event.APICudaFree}
}

// stack is the one call stack the synthetic events carry.
var stack = &event.Stack{ID: 1, PID: 7, Frames: []event.Frame{{Addr: 0x401000, Function: "train_step"}}}

// workload is a synthetic stream: n allocations of size bytes, each freed
// again but every fourth, which stays live. Its truth: n allocations,
// n - n/4 frees, n*size bytes allocated, (n/4)*size live at the end, and a
// peak of n/4 blocks (before the last kept one, n/4-1 kept ones and one
// allocated before its free), n a multiple of 4.
func workload(n int, size uint64) []event.Record {
	recs := []event.Record{stack}
	t := uint64(1000)
	for i := range n {
		addr := 0x7f0000000000 + uint64(i)*size
		recs = append(recs, alloc(t, addr, size))
		t += 10
		if i%4 != 3 {
			recs = append(recs, free(t, addr))
			t += 10
		}
	}
	return recs
}
