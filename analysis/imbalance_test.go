package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

func TestDeviceImbalance(t *testing.T) {
	const gather = 768*MiB + 123
	r := mustAnalyze(t, Options{}, eventtest.RanksStream(gather).Recs)
	require.Len(t, r.Devices, 2)
	// Device 0's peak is its params, optimizer state and the gather.
	assert.Equal(t, 768*MiB+gather, r.Devices[0].PeakBytes)
	assert.Equal(t, []StackUsage{{Stack: 12, Usage: Usage{Count: 1, Bytes: gather}}, {Stack: 11, Usage: Usage{Count: 1, Bytes: 512 * MiB}},
		{Stack: 10, Usage: Usage{Count: 1, Bytes: 256 * MiB}}}, r.Devices[0].PeakStacks)
	fs := findings(r, KindDeviceImbalance)
	require.Len(t, fs, 1)
	f := fs[0]
	assert.Equal(t, gather, f.Bytes, "max peak - min peak")
	assert.Equal(t, uint32(101), f.PID)
	require.Len(t, f.Stacks, 1, "params and optimizer state are the same on both devices")
	assert.Equal(t, "gather_checkpoint (rank.py:30)", f.Stacks[0].Site)
	assert.Equal(t, gather, f.Stacks[0].Bytes)
	// The facts report words (TestWordsDeviceImbalance).
	require.NotNil(t, f.Imbalance)
	assert.Equal(t, DevicePeak{Index: 0, PeakBytes: 768*MiB + gather, PIDs: []uint32{101}}, f.Imbalance.Heavy)
	assert.Equal(t, DevicePeak{Index: 1, PeakBytes: 768 * MiB, PIDs: []uint32{102}}, f.Imbalance.Light)
	assert.Equal(t, 2, f.Imbalance.Devices)
	assert.Equal(t, []ImbalanceStack{{Stack: 12, HeavyBytes: gather}}, f.Imbalance.Stacks, "none at device 1's peak")

	// 200 MiB of difference is under the 256 MiB floor.
	r = mustAnalyze(t, Options{}, eventtest.RanksStream(200*MiB).Recs)
	assert.Empty(t, findings(r, KindDeviceImbalance))
	// One device only: nothing to compare.
	r = mustAnalyze(t, Options{}, eventtest.LeakStream(false).Recs)
	assert.Empty(t, findings(r, KindDeviceImbalance))
}

func TestDeviceImbalanceShare(t *testing.T) {
	// 300 MiB above a 2 GiB device is under a quarter of it.
	s := eventtest.NewStream().Stack(1, "a", 1).Stack(2, "b", 2)
	s.AllocOn(1, 0x7f20_0000_0000, 2*GiB, 1, 100, 0)
	s.AllocOn(2, 0x7ee0_0000_0000, 2*GiB+300*MiB, 2, 100, 1)
	r := mustAnalyze(t, Options{}, s.End(10).Recs)
	assert.Empty(t, findings(r, KindDeviceImbalance))
	// Against 1 GiB it is more than a quarter: one process, two devices.
	s = eventtest.NewStream().Stack(1, "a", 1).Stack(2, "b", 2)
	s.AllocOn(1, 0x7f20_0000_0000, GiB, 1, 100, 0)
	s.AllocOn(2, 0x7ee0_0000_0000, GiB+300*MiB, 2, 100, 1)
	r = mustAnalyze(t, Options{}, s.End(10).Recs)
	fs := findings(r, KindDeviceImbalance)
	require.Len(t, fs, 1)
	assert.Equal(t, 300*MiB, fs[0].Bytes)
	// The stacks differ by frames: b's whole allocation is the difference
	// (a is absent from device 1).
	assert.Equal(t, GiB+300*MiB, fs[0].Stacks[0].Bytes)
}

func TestDevicePeakStacksRetired(t *testing.T) {
	// A PID reused: the first instance's memory leaves the device when the
	// second starts, and the device's next peak does not count it.
	s := eventtest.NewStream().Stack(1, "first", 1).Stack(2, "second", 2)
	s.Alloc(1, 0x1000_0000, 10*MiB, 1)
	s.Recs = append(s.Recs, &event.Process{PID: 100, Command: []string{"again"}, Time: 5})
	s.Alloc(6, 0x2000_0000, 8*MiB, 2)
	s.Alloc(7, 0x3000_0000, 8*MiB, 2)
	r := mustAnalyze(t, Options{}, s.End(10).Recs)
	require.Len(t, r.Devices, 1)
	assert.Equal(t, 16*MiB, r.Devices[0].PeakBytes)
	assert.Equal(t, []StackUsage{{Stack: 2, Usage: Usage{Count: 2, Bytes: 16 * MiB}}}, r.Devices[0].PeakStacks)
}

// TestDeviceImbalanceStackKeys: the same code in two ranks matches when
// one rank's stacks were never symbolized (a forked child that exited
// before its mappings were read: the same addresses as its parent's
// image), and when exec'd ranks differ only in unsymbolized frames (libc
// under ASLR).
func TestDeviceImbalanceStackKeys(t *testing.T) {
	for _, forked := range []bool{false, true} {
		testStackKeys(t, forked)
	}
}

func testStackKeys(t *testing.T, forked bool) {
	const gather = 768*MiB + 123
	s := eventtest.RanksStream(gather)
	for _, rec := range s.Recs {
		st, ok := rec.(*event.Stack)
		if !ok {
			continue
		}
		libc := event.Frame{Addr: 0x7f11_0000_0000 + uint64(st.PID)<<20} // differs per process
		st.Frames = append(st.Frames, libc)
		if forked && st.PID == 102 {
			// Rank 1 unsymbolized: raw addresses only, its parent image's.
			for i := range st.Frames {
				st.Frames[i] = event.Frame{Addr: st.Frames[i].Addr}
			}
			st.Frames[len(st.Frames)-1].Addr = 0x7f11_0000_0000 + 101<<20 // as rank 0's (forked)
		}
	}
	r := mustAnalyze(t, Options{}, s.Recs)
	fs := findings(r, KindDeviceImbalance)
	require.Len(t, fs, 1)
	require.Len(t, fs[0].Stacks, 1, "params and optimizer state match across the ranks (forked %v)", forked)
	assert.Equal(t, "gather_checkpoint (rank.py:30)", fs[0].Stacks[0].Site)
	assert.Equal(t, gather, fs[0].Stacks[0].Bytes)
}
