package snapshot

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

// Hand-built streams: every expected figure is read off the events below.

// segAlloc, segFree, blockAlloc and blockFree are events of pid on device 0.
func segAlloc(pid uint32, t, addr, size uint64) *event.Event {
	return &event.Event{Time: t, PID: pid, Addr: addr, Size: size, Kind: event.KindAlloc, Layer: event.LayerSegment, API: event.APICudaMalloc}
}

func segFree(pid uint32, t, addr uint64) *event.Event {
	return &event.Event{Time: t, PID: pid, Addr: addr, Kind: event.KindFree, Layer: event.LayerSegment, API: event.APICudaFree}
}

func blockAlloc(pid uint32, t, addr, size uint64) *event.Event {
	return &event.Event{Time: t, PID: pid, Addr: addr, Size: size, Kind: event.KindAlloc, Layer: event.LayerBlock, API: event.APIPyTorchMalloc}
}

func blockFree(pid uint32, t, addr uint64) *event.Event {
	return &event.Event{Time: t, PID: pid, Addr: addr, Kind: event.KindFree, Layer: event.LayerBlock, API: event.APIPyTorchFree}
}

func mustExport(tb testing.TB, recs ...event.Record) *Builder {
	tb.Helper()
	x := NewExporter()
	for _, r := range recs {
		require.NoError(tb, x.Add(r))
	}
	return x
}

// segView is a snapshot's segments as (address, size) and its device 0
// trace as (action, addr, size), the figures MemoryViz replays.
type segView struct{ addr, size uint64 }

type traceView struct {
	action     string
	addr, size uint64
}

func viewOf(s *Snapshot) ([]segView, []traceView) {
	var segs []segView
	for _, g := range s.Segments {
		segs = append(segs, segView{g.Address, g.TotalSize})
	}
	var tr []traceView
	for _, e := range s.DeviceTraces[0] {
		tr = append(tr, traceView{e.Action, e.Addr, e.Size})
	}
	return segs, tr
}

// TestSnapshotOneProcess: forked workers allocate at the parent's addresses;
// a snapshot holds one process, the root by default.
func TestSnapshotOneProcess(t *testing.T) {
	const addr = 0x7f2000000000
	x := mustExport(t,
		&event.Header{Mode: "run"}, // run mode: the PID is the first Process record's
		&event.Process{PID: 100, Command: []string{"/bin/workers"}, Time: 1},
		segAlloc(100, 10, addr, 64*MiB),
		&event.Process{PID: 101, PPID: 100, Command: []string{"/bin/workers"}, Time: 20},
		&event.Process{PID: 102, PPID: 100, Command: []string{"/bin/workers"}, Time: 21},
		segAlloc(101, 30, addr, 4*MiB), // a fresh context: the same address
		segAlloc(102, 31, addr, 8*MiB), // and again
		segAlloc(102, 32, addr+8*MiB, MiB),
		segFree(102, 33, addr),
		segFree(100, 40, addr),
		segAlloc(100, 41, addr+64*MiB, MiB),
		&event.Process{PID: 103, PPID: 100, Time: 50}, // no device events
	)

	procs := x.Processes()
	require.Len(t, procs, 3, "processes with events; 103 has none")
	assert.Equal(t, []uint32{100, 101, 102}, []uint32{procs[0].PID, procs[1].PID, procs[2].PID})
	assert.Equal(t, []bool{true, false, false}, []bool{procs[0].Root, procs[1].Root, procs[2].Root})
	assert.Equal(t, []uint64{64 * MiB, 4 * MiB, 9 * MiB}, []uint64{procs[0].PeakBytes, procs[1].PeakBytes, procs[2].PeakBytes})
	assert.Equal(t, []string{"/bin/workers"}, procs[0].Command)
	assert.Equal(t, uint64(1), procs[0].Start)

	d, ok := x.Default()
	require.True(t, ok)
	assert.Equal(t, uint32(100), d.PID, "the root has events")

	for _, tc := range []struct {
		name      string
		snap      func() (*Snapshot, error)
		wantSegs  []segView
		wantTrace []traceView
	}{
		{"default", func() (*Snapshot, error) { return x.Snapshot(), nil },
			[]segView{{addr + 64*MiB, MiB}},
			[]traceView{{ActionSegmentAlloc, addr, 64 * MiB}, {ActionAlloc, addr, 64 * MiB},
				{ActionFreeRequested, addr, 64 * MiB}, {ActionFreeCompleted, addr, 64 * MiB}, {ActionSegmentFree, addr, 64 * MiB},
				{ActionSegmentAlloc, addr + 64*MiB, MiB}, {ActionAlloc, addr + 64*MiB, MiB}}},
		{"pid 101", func() (*Snapshot, error) { return x.SnapshotOf(101) },
			[]segView{{addr, 4 * MiB}},
			[]traceView{{ActionSegmentAlloc, addr, 4 * MiB}, {ActionAlloc, addr, 4 * MiB}}},
		{"pid 102", func() (*Snapshot, error) { return x.SnapshotOf(102) },
			[]segView{{addr + 8*MiB, MiB}},
			[]traceView{{ActionSegmentAlloc, addr, 8 * MiB}, {ActionAlloc, addr, 8 * MiB},
				{ActionSegmentAlloc, addr + 8*MiB, MiB}, {ActionAlloc, addr + 8*MiB, MiB},
				{ActionFreeRequested, addr, 8 * MiB}, {ActionFreeCompleted, addr, 8 * MiB}, {ActionSegmentFree, addr, 8 * MiB}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.snap()
			require.NoError(t, err)
			segs, tr := viewOf(s)
			assert.Equal(t, tc.wantSegs, segs)
			assert.Equal(t, tc.wantTrace, tr)
		})
	}

	_, err := x.SnapshotOf(103)
	assert.ErrorIs(t, err, ErrNoProcess, "a process without device events")
	_, err = x.SnapshotOf(999)
	assert.ErrorIs(t, err, ErrNoProcess)
}

// TestSnapshotDefaultProcess: without a root that has events, the highest
// segment-layer peak (the first of equals); no events, an empty snapshot.
func TestSnapshotDefaultProcess(t *testing.T) {
	for _, tc := range []struct {
		name    string
		recs    []event.Record
		wantPID uint32
		want    bool
	}{
		{"launcher root without events", []event.Record{
			&event.Header{Mode: "run"},
			&event.Process{PID: 10, Command: []string{"sh"}},
			&event.Process{PID: 11, PPID: 10},
			&event.Process{PID: 12, PPID: 10},
			segAlloc(11, 1, 0x1000, 4*MiB), segFree(11, 2, 0x1000), segAlloc(11, 3, 0x1000, 2*MiB),
			segAlloc(12, 4, 0x1000, 5*MiB),
		}, 12, true},
		{"attach root", []event.Record{
			&event.Header{Mode: "attach", PID: 21},
			&event.Process{PID: 20},
			&event.Process{PID: 21},
			segAlloc(20, 1, 0x1000, 8*MiB),
			segAlloc(21, 2, 0x1000, MiB),
		}, 21, true},
		{"attach all: no root, equal peaks", []event.Record{
			&event.Header{Mode: "attach"},
			segAlloc(31, 1, 0x1000, MiB),
			segAlloc(30, 2, 0x1000, MiB),
		}, 31, true},
		{"nothing to export", []event.Record{&event.Header{Mode: "run"}, &event.Process{PID: 40}}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := mustExport(t, tc.recs...)
			d, ok := x.Default()
			require.Equal(t, tc.want, ok)
			assert.Equal(t, tc.wantPID, d.PID)
			s := x.Snapshot()
			if !ok {
				assert.Empty(t, s.Segments)
				assert.Equal(t, [][]TraceEntry{{}}, s.DeviceTraces, "one empty device trace")
			}
		})
	}
}

// TestSnapshotPIDReuse: a PID given to another process after the first had
// events is a second instance, never merged into the first's snapshot.
func TestSnapshotPIDReuse(t *testing.T) {
	x := mustExport(t,
		&event.Header{Mode: "attach", PID: 7},
		&event.Process{PID: 7, Command: []string{"first"}, Time: 1},
		segAlloc(7, 2, 0x1000, MiB),
		&event.Process{PID: 7, Command: []string{"second"}, Time: 10},
		segAlloc(7, 11, 0x1000, 2*MiB), // the same address: another process's memory
		segAlloc(7, 12, 0x9000000, 3*MiB),
	)
	procs := x.Processes()
	require.Len(t, procs, 2)
	assert.Equal(t, []int{0, 1}, []int{procs[0].Instance, procs[1].Instance})
	assert.Equal(t, []bool{true, false}, []bool{procs[0].Root, procs[1].Root}, "the root is the PID's first process")
	assert.Equal(t, []string{"second"}, procs[1].Command)
	assert.Equal(t, uint64(10), procs[1].Start)

	s, err := x.SnapshotOf(7)
	require.NoError(t, err)
	segs, _ := viewOf(s)
	assert.Equal(t, []segView{{0x1000, MiB}}, segs, "--pid takes the PID's first process")
	segs, _ = viewOf(x.Snapshot())
	assert.Equal(t, []segView{{0x1000, MiB}}, segs, "the root")

	// A Process record before any event describes the same process (a
	// fork child that execs before using CUDA).
	x = mustExport(t,
		&event.Process{PID: 8, Command: []string{"python"}, Time: 1},
		&event.Process{PID: 8, Command: []string{"trainer"}, Time: 2},
		segAlloc(8, 3, 0x1000, MiB),
	)
	procs = x.Processes()
	require.Len(t, procs, 1)
	assert.Equal(t, []string{"trainer"}, procs[0].Command)
}

// TestSnapshotUntracedSegment: blocks of a segment allocated before the
// stream began are left out; those of a traced segment are exported.
func TestSnapshotUntracedSegment(t *testing.T) {
	const (
		old    = 0x10000000 // allocated before tracing: never seen
		traced = 0x20000000
	)
	x := mustExport(t,
		&event.Header{Mode: "attach", PID: 5},
		&event.Process{PID: 5},
		blockAlloc(5, 1, old, MiB),
		blockAlloc(5, 2, old+MiB, MiB),
		blockFree(5, 3, old),
		segAlloc(5, 4, traced, 4*MiB),
		blockAlloc(5, 5, traced, MiB),
		blockAlloc(5, 6, traced+2*MiB, MiB),
		blockFree(5, 7, traced),
		blockAlloc(5, 8, traced+4*MiB, MiB), // just past the segment's end
		blockFree(5, 9, old+MiB),
	)
	procs := x.Processes()
	require.Len(t, procs, 1)
	assert.Equal(t, uint64(3), procs[0].UntracedBlocks)

	s := x.Snapshot()
	segs, tr := viewOf(s)
	assert.Equal(t, []segView{{traced, 4 * MiB}}, segs)
	assert.Equal(t, []traceView{{ActionSegmentAlloc, traced, 4 * MiB},
		{ActionAlloc, traced, MiB}, {ActionAlloc, traced + 2*MiB, MiB},
		{ActionFreeRequested, traced, MiB}, {ActionFreeCompleted, traced, MiB}}, tr)
	require.Len(t, s.Segments, 1)
	var states []string
	for _, b := range s.Segments[0].Blocks {
		states = append(states, b.State)
	}
	assert.Equal(t, []string{StateInactive, StateActiveAllocated, StateInactive}, states)
	assert.Equal(t, uint64(MiB), s.Segments[0].AllocatedSize)

	// A segment freed under a live block (its free lost): the block is
	// gone with it, and its late free is not exported.
	x = mustExport(t,
		segAlloc(6, 1, traced, 4*MiB),
		blockAlloc(6, 2, traced, MiB),
		segFree(6, 3, traced),
		blockFree(6, 4, traced),
	)
	s = x.Snapshot()
	segs, tr = viewOf(s)
	assert.Empty(t, segs)
	assert.Equal(t, []traceView{{ActionSegmentAlloc, traced, 4 * MiB}, {ActionAlloc, traced, MiB},
		{ActionSegmentFree, traced, 4 * MiB}}, tr)
}

// TestExportReadsTheLedger: the exporter's live segments and peaks are the
// analysis's ledger's. A free made with another device current frees the
// segment (CUDA gives each pointer one device; the ledger keys by address),
// its entry going to the segment's device; a PID reused after events is a
// second instance, whose peak is its own.
func TestExportReadsTheLedger(t *testing.T) {
	onDev1 := segAlloc(7, 2, 0x1000, 3<<20)
	onDev1.Device = 1
	freeFromDev0 := segFree(7, 3, 0x1000)
	x := mustExport(t,
		&event.Process{PID: 7, Time: 1, Command: []string{"first"}},
		onDev1,
		segAlloc(7, 3, 0x9000, 1<<20),
		freeFromDev0,
		&event.Process{PID: 7, Time: 10, Command: []string{"second"}},
		segAlloc(7, 11, 0x1000, 2<<20),
	)
	ps := x.Processes()
	require.Len(t, ps, 2)
	assert.Equal(t, Process{PID: 7, Command: []string{"first"}, Start: 1, Instance: 0, PeakBytes: 4 << 20}, ps[0])
	assert.Equal(t, Process{PID: 7, Command: []string{"second"}, Start: 10, Instance: 1, PeakBytes: 2 << 20}, ps[1])

	s, err := x.SnapshotOf(7)
	require.NoError(t, err)
	require.Len(t, s.DeviceTraces, 2)
	segs, _ := viewOf(s)
	assert.Equal(t, []segView{{0x9000, 1 << 20}}, segs, "0x1000 was freed")
	var dev1 []traceView
	for _, e := range s.DeviceTraces[1] {
		dev1 = append(dev1, traceView{e.Action, e.Addr, e.Size})
	}
	assert.Equal(t, []traceView{
		{ActionSegmentAlloc, 0x1000, 3 << 20}, {ActionAlloc, 0x1000, 3 << 20},
		{ActionFreeRequested, 0x1000, 3 << 20}, {ActionFreeCompleted, 0x1000, 3 << 20}, {ActionSegmentFree, 0x1000, 3 << 20},
	}, dev1)
}
