package checkpoint

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

// TestCheckpointRoundTrip writes a tracker's checkpoint and its restored
// events into a trace and reads them back unchanged.
func TestCheckpointRoundTrip(t *testing.T) {
	tr := NewTracker()
	evs := []event.Event{
		{Time: 10, Addr: 0x1000, Size: 4096, PID: 7, TID: 7, Kind: event.KindAlloc, API: event.APICuMemAlloc, Flags: event.FlagNested, Stack: 3},
		{Time: 11, Addr: 0x1000, Size: 4096, PID: 7, TID: 7, Kind: event.KindAlloc, API: event.APICudaMalloc, Stack: 3},
		{Time: 20, Addr: 0x2000, Size: 512, PID: 7, TID: 8, Kind: event.KindAlloc, API: event.APICudaMalloc, Stack: 4},
		{Time: 30, Addr: 0x2000, PID: 7, TID: 8, Kind: event.KindFree, API: event.APICudaFree},
		{Time: 40, Size: 1 << 40, PID: 7, TID: 8, Ret: 2, Kind: event.KindAlloc, API: event.APICudaMalloc},
		{Time: 50, Addr: 0x3000, Size: 64, PID: 9, TID: 9, Kind: event.KindHostAlloc, API: event.APICudaMallocHost},
	}
	for i := range evs {
		tr.Observe(&evs[i])
	}
	assert.Equal(t, uint64(len(evs)), tr.Events())
	assert.Equal(t, 3, tr.Live())
	c, live := tr.Checkpoint(5)
	require.Len(t, live, 3)
	for i, want := range []event.Event{evs[0], evs[1], evs[5]} {
		want.Flags |= event.FlagRestored
		assert.Equal(t, want, live[i], "restored %d, in stream order", i)
	}
	assert.Equal(t, uint64(6), c.Events)
	assert.Equal(t, uint64(10), c.FirstTime)
	assert.Equal(t, uint64(50), c.Time)
	dev := c.Totals[0] // pid 7, device memory, segment layer
	assert.Equal(t, event.CheckpointTotals{PID: 7, Layer: event.LayerSegment, Allocations: 1, Frees: 1, AllocatedBytes: 512,
		FreedBytes: 512, Failed: 1, FailedBytes: 1 << 40, PeakBytes: 4608, PeakTime: 20}, dev,
		"the restored allocation is left out of the counts, not of the peak")
	// pid 7's device peak, 4096+512 at time 20, reached by the 512 bytes;
	// pid 9's host peak, 64 at 50; device 0 over every process: pid 7's.
	atPeak7 := []event.PeakClass{
		{PID: 7, Stack: 3, Kind: event.KindAlloc, API: event.APICudaMalloc, Size: 4096, Count: 1},
		{PID: 7, Stack: 4, Kind: event.KindAlloc, API: event.APICudaMalloc, Size: 512, Count: 1},
	}
	assert.Equal(t, []event.CheckpointPeak{
		{PID: 7, Layer: event.LayerSegment, At: event.Event{Time: 20, Addr: 0x2000, Size: 512, API: event.APICudaMalloc, Stack: 4}, Live: atPeak7},
		{PID: 9, Layer: event.LayerSegment, Host: true, At: event.Event{Time: 50, Addr: 0x3000, Size: 64, API: event.APICudaMallocHost},
			Live: []event.PeakClass{{PID: 9, Kind: event.KindHostAlloc, API: event.APICudaMallocHost, Size: 64, Count: 1}}},
		{All: true, Layer: event.LayerSegment, PerDevice: true, Live: atPeak7},
	}, c.Peaks)

	var buf bytes.Buffer
	w, err := event.NewWriter(&buf, &event.Header{Tool: "t", Start: 1})
	require.NoError(t, err)
	require.NoError(t, w.Write(c))
	for i := range live {
		require.NoError(t, w.Write(&live[i]))
	}
	require.NoError(t, w.Close())
	r, err := event.NewReader(&buf)
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

// TestCheckpointTimelines: the tracker's timelines are the live bytes per
// process, layer, memory and device, a low and a high per bucket of the
// grid, which doubles its buckets' width when a time falls past the last.
func TestCheckpointTimelines(t *testing.T) {
	tr := NewTracker()
	tr.SetStart(1000)
	ev := func(at uint64, kind event.Kind, addr, size uint64) {
		tr.Observe(&event.Event{Time: at, Addr: addr, Size: size, PID: 7, Kind: kind, API: event.APICudaMalloc, Device: 1})
	}
	// Bucket 0 (1000..2023): 100, 300, then 200.
	ev(1010, event.KindAlloc, 0x1000, 100)
	ev(1020, event.KindAlloc, 0x2000, 200)
	ev(1030, event.KindFree, 0x1000, 0)
	// Bucket 3: 264.
	ev(1000+3*1024, event.KindAlloc, 0x3000, 64)
	c, _ := tr.Checkpoint(2)
	assert.Equal(t, uint64(0), c.TimelineLevel)
	assert.Equal(t, []event.CheckpointTimeline{{PID: 7, Layer: event.LayerSegment, Device: 1, Buckets: []event.TimelineBucket{
		{Index: 0, MinTime: 1010, MinBytes: 100, MaxTime: 1020, MaxBytes: 300},
		{Index: 3, MinTime: 1000 + 3*1024, MinBytes: 264, MaxTime: 1000 + 3*1024, MaxBytes: 264}}}}, c.Timelines)

	// Past 256 buckets of 1024 ns: 2048 ns wide, old buckets 0 and 3 go
	// into 0 and 1.
	ev(1000+256*1024, event.KindFree, 0x2000, 0)
	c, _ = tr.Checkpoint(3)
	assert.Equal(t, uint64(1), c.TimelineLevel)
	assert.Equal(t, []event.TimelineBucket{
		{Index: 0, MinTime: 1010, MinBytes: 100, MaxTime: 1020, MaxBytes: 300},
		{Index: 1, MinTime: 1000 + 3*1024, MinBytes: 264, MaxTime: 1000 + 3*1024, MaxBytes: 264},
		{Index: 128, MinTime: 1000 + 256*1024, MinBytes: 64, MaxTime: 1000 + 256*1024, MaxBytes: 64}}, c.Timelines[0].Buckets)
}

// TestPeakSetBounded churns many short-lived classes past a peak: the
// tracker keeps the classes live or at the peak, and at most minIdle
// others, not every one seen.
func TestPeakSetBounded(t *testing.T) {
	tr := NewTracker()
	tr.Observe(&event.Event{Time: 1, Addr: 0x1000, Size: 1 << 20, PID: 7, Kind: event.KindAlloc, API: event.APICudaMalloc, Stack: 1})
	for i := range uint64(10000) {
		tr.Observe(&event.Event{Time: 2 + 2*i, Addr: 0x9000, Size: 4096, PID: 7, Kind: event.KindAlloc, API: event.APICudaMalloc, Stack: event.StackID(2 + i)})
		tr.Observe(&event.Event{Time: 3 + 2*i, Addr: 0x9000, PID: 7, Kind: event.KindFree, API: event.APICudaFree})
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
		assert.Equal(t, []event.PeakClass{{PID: 7, Stack: 1, Kind: event.KindAlloc, API: event.APICudaMalloc, Size: 1 << 20, Count: 1},
			{PID: 7, Stack: 2, Kind: event.KindAlloc, API: event.APICudaMalloc, Size: 4096, Count: 1}}, p.Live)
	}
}

// TestReleaseAfterStaleUnmap: a handle created, mapped, created again (its
// release missed), its old range unmapped, then released. Nothing maps
// the handle's new life, so the release frees it, as in the ledger and
// the analysis: nothing is left to restore. (The tracker once compared
// its mapping count, below zero here, with zero and kept both events.)
func TestReleaseAfterStaleUnmap(t *testing.T) {
	tr := NewTracker()
	vmm := func(at uint64, k event.Kind, api event.API, addr, size, handle uint64) {
		tr.Observe(&event.Event{Time: at, Addr: addr, Size: size, Stream: handle, PID: 7, Kind: k, API: api})
	}
	vmm(100, event.KindCreate, event.APICuMemCreate, 0xc0de, 2<<20, 0)
	vmm(110, event.KindMap, event.APICuMemMap, 0x7e0000000000, 2<<20, 0xc0de)
	vmm(120, event.KindCreate, event.APICuMemCreate, 0xc0de, 4<<20, 0)
	vmm(130, event.KindUnmap, event.APICuMemUnmap, 0x7e0000000000, 2<<20, 0)
	vmm(140, event.KindRelease, event.APICuMemRelease, 0xc0de, 0, 0)
	assert.Zero(t, tr.Live())
	c, live := tr.Checkpoint(2)
	assert.Empty(t, live)
	require.NotEmpty(t, c.Totals)
	dev := c.Totals[0] // pid 7, device memory
	assert.Equal(t, event.CheckpointTotals{PID: 7, Layer: event.LayerSegment, Allocations: 2, Frees: 1,
		AllocatedBytes: 6 << 20, FreedBytes: 4 << 20, PeakBytes: 4 << 20, PeakTime: 120}, dev,
		"the first 2 MiB went uncounted when the handle was created again")
}
