package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSpikeFinding: a rare, brief allocation that sets the peak is a spike;
// the training loop's activations (brief but every step) and the weights
// (live all run) are not.
func TestSpikeFinding(t *testing.T) {
	const ms = uint64(1_000_000)
	s := newStream().stack(1, "load_weights", 10).stack(2, "forward", 20).stack(3, "save_checkpoint", 30)
	s.alloc(0, 0xf000_0000, 100*MiB, 1) // weights, never freed
	for i := range uint64(100) {
		s.alloc(i*ms+1, 0x1000, 10*MiB, 2) // activations: 0.5 ms each step
		if i == 50 {
			// A checkpoint copy during step 50's activations, freed 10 us later.
			s.alloc(50*ms+100_000, 0xa000_0000, 80*MiB, 3).free(50*ms+110_000, 0xa000_0000)
		}
		s.free(i*ms+500_000, 0x1000)
	}
	r := mustAnalyze(t, Options{}, s.end(100*ms).recs)

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
