package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event/eventtest"
)

// TestSoFarLeavesTheStreamOpen: results taken along the way give the
// figures so far, and the final Result equals one from an Analyzer that took
// none.
func TestSoFarLeavesTheStreamOpen(t *testing.T) {
	s := eventtest.NewStream().Stack(1, "step", 10).Stack(2, "keep", 20)
	for i := uint64(0); i < 40; i++ {
		s.Alloc(i*sec, 0x1000_0000+i*0x10_0000, 4*MiB, 1)
		s.Alloc(i*sec+1, 0x8000_0000+i*0x10_0000, 64*KiB, 2) // kept: a leak
		s.Free(i*sec+2, 0x1000_0000+i*0x10_0000)
	}
	s.Fail(41*sec, 80*GiB, 1, 2)
	half := len(s.Recs) / 2

	plain := New(Options{})
	for _, r := range s.Recs {
		require.NoError(t, plain.Add(r))
	}
	want := plain.Finish()

	a := New(Options{})
	for i, r := range s.Recs {
		require.NoError(t, a.Add(r))
		if i%7 == 0 || i == half {
			snap := a.SoFar()
			require.NotNil(t, snap)
			assert.False(t, snap.Run.Ended)
		}
	}
	got := a.Finish()
	assert.Equal(t, want, got)
	assert.Equal(t, 40*64*KiB, got.Totals.LiveBytesAtEnd)
	assert.Same(t, got, a.SoFar(), "after Finish, Finish's Result")
	assert.ErrorIs(t, a.Add(s.Recs[5]), ErrFinished)
}

// TestSoFarMiddle: a result in the middle counts what came before it.
func TestSoFarMiddle(t *testing.T) {
	s := eventtest.NewStream().Stack(1, "step", 10)
	s.Alloc(1*sec, 0x1000, 4*MiB, 1).Alloc(2*sec, 0x2000_0000, 2*MiB, 1)
	a := New(Options{})
	for _, r := range s.Recs {
		require.NoError(t, a.Add(r))
	}
	snap := a.SoFar()
	assert.Equal(t, uint64(2), snap.Totals.Allocations)
	assert.Equal(t, 6*MiB, snap.Totals.LiveBytesAtEnd)
	require.NoError(t, a.Add(s.Free(3*sec, 0x1000).Recs[len(s.Recs)-1]))
	snap = a.SoFar()
	assert.Equal(t, uint64(1), snap.Totals.Frees)
	assert.Equal(t, 2*MiB, snap.Totals.LiveBytesAtEnd)
	assert.Equal(t, 6*MiB, snap.Totals.PeakBytes)
}
