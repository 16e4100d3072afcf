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
