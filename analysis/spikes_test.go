package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event/eventtest"
)

// TestSpikeFinding: a rare, brief allocation that sets the peak is a spike;
// the training loop's activations (brief but every step) and the weights
// (live all run) are not.
func TestSpikeFinding(t *testing.T) {
	r := mustAnalyze(t, Options{}, eventtest.SpikeStream().Recs)

	spikes := findings(r, KindSpike)
	require.Len(t, spikes, 1)
	f := spikes[0]
	assert.Equal(t, 80*MiB, f.Bytes, "the spike's height")
	assert.Equal(t, "save_checkpoint (train.py:30)", f.Stacks[0].Site)
	// Peak: weights 100 + activations 10 + checkpoint 80 MiB, inside the spike.
	assert.Equal(t, 190*MiB, process(t, r, 100).Totals.PeakBytes)
	assert.Equal(t, SeverityHigh, f.Severity, "it set the peak")
	require.NotNil(t, f.Spike)
	assert.True(t, f.Spike.SetPeak)
	assert.Equal(t, 190*MiB, f.Spike.PeakBytes)
	assert.Equal(t, uint64(10_000), f.Spike.LongestNs, "freed 10 us later")
	assert.Equal(t, uint64(1), f.Stacks[0].Count)
}
