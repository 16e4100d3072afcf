package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

func TestPinnedHostGrowth(t *testing.T) {
	r := mustAnalyze(t, Options{}, eventtest.PinnedStream().Recs)
	fs := findings(r, KindPinnedHostGrowth)
	require.Len(t, fs, 1)
	f := fs[0]
	// stage_batch pinned 40 x (2 MiB + 4096) inside the loop and freed none.
	const perIter = 2*MiB + 4096
	assert.Equal(t, 40*perIter, f.Bytes, "growth over the run: all stage_batch pinned and kept")
	require.Len(t, f.Stacks, 1, "only stage_batch grows; setup is before the loop, copy_staging is steady")
	assert.Equal(t, "stage_batch (train.py:20)", f.Stacks[0].Site)
	assert.Equal(t, 40*perIter, f.Stacks[0].Bytes)
	require.NotNil(t, f.Leak)
	assert.Equal(t, uint64(40), f.Leak.Iterations)
	assert.InDelta(t, float64(perIter), f.Leak.BytesPerIteration, 1e-6, "one buffer per iteration")
	assert.InEpsilon(t, float64(perIter)*60e9/float64(f.Leak.PeriodNs), f.Leak.BytesPerMinute, 1e-9)
	// 40 x 2101248 = 84049920 bytes over the run; the windows saw less.
	assert.Less(t, f.Leak.WindowGrowthBytes, f.Bytes)
	// 40 iterations of 10 ms observe 400 ms: per iteration, no rate per
	// second or minute (report words it, TestWordsPinnedHostGrowth).
	_, observed := f.Leak.BytesPerSecondObserved()
	_, perTime := RateBaseFor(observed)
	assert.False(t, perTime)
	require.NotNil(t, f.Pinned)
	assert.Equal(t, []StackUsage{{Stack: 2, Usage: Usage{Count: 40, Bytes: 40 * perIter}}}, f.Pinned.Growing)
	assert.Equal(t, uint64(8*MiB+40*perIter), f.Pinned.HostLiveBytesAtEnd)
	assert.Empty(t, f.Pinned.PinMemoryFrame, "no pin_memory frame in the stack")
	// Host memory stays out of device figures and out of the leak rule.
	assert.Empty(t, findings(r, KindLeak))
	assert.Equal(t, uint64(64*MiB), r.Totals.PeakBytes)
	assert.Equal(t, uint64(8*MiB+40*perIter), r.Host.LiveBytesAtEnd)
}

func TestPinnedHostGrowthWindows(t *testing.T) {
	// eventtest.PinMemoryStream: no device allocation, so no loop: the
	// windows' growth, as a leak's.
	// The DataLoader advice needs a pin_memory frame.
	r := mustAnalyze(t, Options{}, eventtest.PinMemoryStream().Recs)
	fs := findings(r, KindPinnedHostGrowth)
	require.Len(t, fs, 1)
	l := fs[0].Leak
	// Growth over the run: the 64 buffers of 1 MiB, all pinned during it;
	// the windows' growth is the evidence.
	assert.Equal(t, 64*MiB, fs[0].Bytes)
	assert.Equal(t, l.Live[len(l.Live)-1]-l.Live[0], l.WindowGrowthBytes)
	assert.Zero(t, l.Iterations)
	// No loop: the windows' rate, observed from the end of the first
	// window (+12.9 s) to the end (+68.7 s), 55.8 s: under a minute, so
	// per second, 53 MiB / 55.8 s = 972 KiB.
	_, observed := l.BytesPerSecondObserved()
	b, ok := RateBaseFor(observed)
	assert.True(t, ok)
	assert.Equal(t, "second", b.Name, "under a minute observed")
	assert.Equal(t, event.StackID(7), fs[0].Pinned.PinMemoryStack)
	assert.Equal(t, "pin_memory (torch/utils/data/_utils/pin_memory.py:58)", fs[0].Pinned.PinMemoryFrame)

	// Pinned once and freed later: no growth.
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.HostAlloc(tick, 0x6000_0000, 64*MiB, 1).HostFree(60*tick, 0x6000_0000)
	r = mustAnalyze(t, Options{}, s.End(64*tick).Recs)
	assert.Empty(t, findings(r, KindPinnedHostGrowth))
}
