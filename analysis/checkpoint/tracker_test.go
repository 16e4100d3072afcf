package event

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckpointRoundTrip writes a tracker's checkpoint and its restored
// events into a trace and reads them back unchanged.
func TestCheckpointRoundTrip(t *testing.T) {
	tr := NewTracker()
	evs := []Event{
		{Time: 10, Addr: 0x1000, Size: 4096, PID: 7, TID: 7, Kind: KindAlloc, API: APICuMemAlloc, Flags: FlagNested, Stack: 3},
		{Time: 11, Addr: 0x1000, Size: 4096, PID: 7, TID: 7, Kind: KindAlloc, API: APICudaMalloc, Stack: 3},
		{Time: 20, Addr: 0x2000, Size: 512, PID: 7, TID: 8, Kind: KindAlloc, API: APICudaMalloc, Stack: 4},
		{Time: 30, Addr: 0x2000, PID: 7, TID: 8, Kind: KindFree, API: APICudaFree},
		{Time: 40, Size: 1 << 40, PID: 7, TID: 8, Ret: 2, Kind: KindAlloc, API: APICudaMalloc},
		{Time: 50, Addr: 0x3000, Size: 64, PID: 9, TID: 9, Kind: KindHostAlloc, API: APICudaMallocHost},
	}
	for i := range evs {
		tr.Observe(&evs[i])
	}
	assert.Equal(t, uint64(len(evs)), tr.Events())
	assert.Equal(t, 3, tr.Live())
	c, live := tr.Checkpoint(5)
	require.Len(t, live, 3)
	for i, want := range []Event{evs[0], evs[1], evs[5]} {
		want.Flags |= FlagRestored
		assert.Equal(t, want, live[i], "restored %d, in stream order", i)
	}
	assert.Equal(t, uint64(6), c.Events)
	assert.Equal(t, uint64(10), c.FirstTime)
	assert.Equal(t, uint64(50), c.Time)
	dev := c.Totals[0] // pid 7, device memory, segment layer
	assert.Equal(t, CheckpointTotals{PID: 7, Layer: LayerSegment, Allocations: 1, Frees: 1, AllocatedBytes: 512,
		FreedBytes: 512, Failed: 1, FailedBytes: 1 << 40, PeakBytes: 4608, PeakTime: 20}, dev,
		"the restored allocation is left out of the counts, not of the peak")
	// pid 7's device peak, 4096+512 at time 20, reached by the 512 bytes;
	// pid 9's host peak, 64 at 50; device 0 over every process: pid 7's.
	atPeak7 := []PeakClass{
		{PID: 7, Stack: 3, Kind: KindAlloc, API: APICudaMalloc, Size: 4096, Count: 1},
		{PID: 7, Stack: 4, Kind: KindAlloc, API: APICudaMalloc, Size: 512, Count: 1},
	}
	assert.Equal(t, []CheckpointPeak{
		{PID: 7, Layer: LayerSegment, At: Event{Time: 20, Addr: 0x2000, Size: 512, API: APICudaMalloc, Stack: 4}, Live: atPeak7},
		{PID: 9, Layer: LayerSegment, Host: true, At: Event{Time: 50, Addr: 0x3000, Size: 64, API: APICudaMallocHost},
			Live: []PeakClass{{PID: 9, Kind: KindHostAlloc, API: APICudaMallocHost, Size: 64, Count: 1}}},
		{All: true, Layer: LayerSegment, PerDevice: true, Live: atPeak7},
	}, c.Peaks)

	var buf bytes.Buffer
	w, err := NewWriter(&buf, &Header{Tool: "t", Start: 1})
	require.NoError(t, err)
	require.NoError(t, w.Write(c))
	for i := range live {
		require.NoError(t, w.Write(&live[i]))
	}
	require.NoError(t, w.Close())
	r, err := NewReader(&buf)
	require.NoError(t, err)
	rec, err := r.Next()
	require.NoError(t, err)
	assert.Equal(t, c, rec)
	for i := range live {
		rec, err := r.Next()
		require.NoError(t, err)
		assert.Equal(t, &live[i], rec)
	}
	_, err = r.Next()
	assert.True(t, errors.Is(err, io.EOF))
}

// TestCheckpointWithoutPeaks reads a Checkpoint written before Peaks, then
// the timelines, were appended: they read as empty, the rest as written.
func TestCheckpointWithoutPeaks(t *testing.T) {
	c := &Checkpoint{Time: 9, Segment: 2, Events: 5, FirstTime: 1, Live: 1, Totals: []CheckpointTotals{
		{PID: 7, Layer: LayerSegment, Allocations: 3, AllocatedBytes: 300, PeakBytes: 200, PeakTime: 4}}}
	var e encoder
	e.checkpoint(c)
	// Empty peaks, level 0, empty timelines: one byte each.
	require.Equal(t, []byte{0, 0, 0}, e.b[len(e.b)-3:])
	for name, cut := range map[string]int{"without peaks": 3, "without timelines": 2} {
		_, got, err := readAll(t, appendFrame(mustTrace(t, nil), recCheckpoint, e.b[:len(e.b)-cut]))
		require.NoError(t, err, name)
		assert.Equal(t, []Record{c}, got, name)
	}
}

// TestCheckpointTimelines: the tracker's timelines are the live bytes per
// process, layer, memory and device, a low and a high per bucket of the
// grid, which doubles its buckets' width when a time falls past the last.
func TestCheckpointTimelines(t *testing.T) {
	tr := NewTracker()
	tr.SetStart(1000)
	ev := func(at uint64, kind Kind, addr, size uint64) {
		tr.Observe(&Event{Time: at, Addr: addr, Size: size, PID: 7, Kind: kind, API: APICudaMalloc, Device: 1})
	}
	// Bucket 0 (1000..2023): 100, 300, then 200.
	ev(1010, KindAlloc, 0x1000, 100)
	ev(1020, KindAlloc, 0x2000, 200)
	ev(1030, KindFree, 0x1000, 0)
	// Bucket 3: 264.
	ev(1000+3*1024, KindAlloc, 0x3000, 64)
	c, _ := tr.Checkpoint(2)
	assert.Equal(t, uint64(0), c.TimelineLevel)
	assert.Equal(t, []CheckpointTimeline{{PID: 7, Layer: LayerSegment, Device: 1, Buckets: []TimelineBucket{
		{Index: 0, MinTime: 1010, MinBytes: 100, MaxTime: 1020, MaxBytes: 300},
		{Index: 3, MinTime: 1000 + 3*1024, MinBytes: 264, MaxTime: 1000 + 3*1024, MaxBytes: 264}}}}, c.Timelines)

	// Past 256 buckets of 1024 ns: 2048 ns wide, old buckets 0 and 3 go
	// into 0 and 1.
	ev(1000+256*1024, KindFree, 0x2000, 0)
	c, _ = tr.Checkpoint(3)
	assert.Equal(t, uint64(1), c.TimelineLevel)
	assert.Equal(t, []TimelineBucket{
		{Index: 0, MinTime: 1010, MinBytes: 100, MaxTime: 1020, MaxBytes: 300},
		{Index: 1, MinTime: 1000 + 3*1024, MinBytes: 264, MaxTime: 1000 + 3*1024, MaxBytes: 264},
		{Index: 128, MinTime: 1000 + 256*1024, MinBytes: 64, MaxTime: 1000 + 256*1024, MaxBytes: 64}}, c.Timelines[0].Buckets)
}

// TestPeakSetBounded churns many short-lived classes past a peak: the
// tracker keeps the classes live or at the peak, and at most minIdle
// others, not every one seen.
func TestPeakSetBounded(t *testing.T) {
	tr := NewTracker()
	tr.Observe(&Event{Time: 1, Addr: 0x1000, Size: 1 << 20, PID: 7, Kind: KindAlloc, API: APICudaMalloc, Stack: 1})
	for i := range uint64(10000) {
		tr.Observe(&Event{Time: 2 + 2*i, Addr: 0x9000, Size: 4096, PID: 7, Kind: KindAlloc, API: APICudaMalloc, Stack: StackID(2 + i)})
		tr.Observe(&Event{Time: 3 + 2*i, Addr: 0x9000, PID: 7, Kind: KindFree, API: APICudaFree})
	}
	for k, ps := range tr.peaks {
		// Live or at the peak: 2; idle ones wait for minIdle.
		assert.LessOrEqual(t, len(ps.classes), 2+minIdle, "scope %+v: classes", k)
		assert.LessOrEqual(t, len(ps.dirty), 2+minIdle, "scope %+v: changed since the peak", k)
	}
	c, _ := tr.Checkpoint(2)
	require.Len(t, c.Peaks, 2)
	for _, p := range c.Peaks {
		// The peak: the 1 MiB buffer and the first 4 KiB one.
		assert.Equal(t, []PeakClass{{PID: 7, Stack: 1, Kind: KindAlloc, API: APICudaMalloc, Size: 1 << 20, Count: 1},
			{PID: 7, Stack: 2, Kind: KindAlloc, API: APICudaMalloc, Size: 4096, Count: 1}}, p.Live)
	}
}
