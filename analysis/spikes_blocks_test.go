package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

// TestSpikeOfTensors: a checkpoint copy through a caching allocator. Its
// 512 MiB tensor lives 2 ms at steps 10 and 30 of 40 (10 ms each); the
// segment the allocator made for it at step 10 stays cached to the end,
// so the segment layer shows no spike. The tensors decide: a spike at
// save_checkpoint, 512 MiB high, twice, which set the tensors' peak (the
// 64 MiB weight, forward's 3 x 1 MiB and the copy, at step 10).
func TestSpikeOfTensors(t *testing.T) {
	const (
		weights = uint64(0x7f20_0000_0000)
		ckpt    = uint64(0x7f30_0000_0000)
	)
	s := eventtest.NewStream().Stack(1, "alloc_block", 1).Stack(2, "forward", 2).Stack(3, "save_checkpoint", 3).
		Stack(4, "load_model", 4)
	blk := func(t, addr, size uint64, st event.StackID) {
		s.Ev(event.Event{Time: t, Addr: addr, Size: size, Stack: st, Layer: event.LayerBlock, Kind: event.KindAlloc, API: event.APIPyTorchMalloc})
	}
	free := func(t, addr uint64) {
		s.Ev(event.Event{Time: t, Addr: addr, Layer: event.LayerBlock, Kind: event.KindFree, API: event.APIPyTorchFree})
	}
	s.Alloc(1, weights, 128*MiB, 1)
	blk(2, weights, 64*MiB, 4)
	for i := range uint64(40) {
		t0 := 1_000_000 + i*10_000_000
		for k := range uint64(3) {
			blk(t0+k*1000, weights+64*MiB+k*MiB, MiB, 2)
		}
		if i == 10 || i == 30 {
			if i == 10 {
				s.Alloc(t0+4_000_000, ckpt, 512*MiB, 1)
			}
			blk(t0+4_000_100, ckpt, 512*MiB, 3)
			free(t0+6_000_100, ckpt)
		}
		for k := range uint64(3) {
			free(t0+8_000_000+k, weights+64*MiB+k*MiB)
		}
	}
	r := mustAnalyze(t, Options{}, s.End(400_000_000).Recs)
	spikes := findings(r, KindSpike)
	require.Len(t, spikes, 1, "%+v", spikes)
	f := spikes[0]
	assert.Equal(t, event.StackID(3), f.Stacks[0].Stack, "save_checkpoint")
	assert.Equal(t, 512*MiB, f.Bytes)
	assert.Equal(t, uint64(2), f.Stacks[0].Count)
	assert.Equal(t, SeverityHigh, f.Severity)
	assert.Equal(t, &SpikeEvidence{LongestNs: 2_000_000, SetPeak: true, PeakBytes: 64*MiB + 3*MiB + 512*MiB,
		PeakTime: 1_000_000 + 10*10_000_000 + 4_000_100, Layer: event.LayerBlock}, f.Spike)
}
