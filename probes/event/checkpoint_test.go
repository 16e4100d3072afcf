package event

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
