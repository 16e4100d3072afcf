package pytests

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

const mib = 1 << 20

// py is a Python frame (no mapping).
func py(fn, file string, line int64) event.Frame {
	return event.Frame{Function: fn, File: file, Line: line}
}

// native is the runtime's frame under every stack.
var native = event.Frame{Function: "cudaMalloc", File: "cudart.c", Line: 1, Mapping: 1}

// stream feeds records to a tracker rooted at /repo and returns its tests
// by id.
func stream(t *testing.T, recs ...event.Record) map[string]Test {
	t.Helper()
	tr := NewTracker("/repo")
	for _, r := range recs {
		tr.Add(r)
	}
	out := map[string]Test{}
	for _, tt := range tr.Tests() {
		require.NotContains(t, out, tt.ID)
		out[tt.ID] = tt
	}
	return out
}

func stack(id event.StackID, frames ...event.Frame) *event.Stack {
	return &event.Stack{ID: id, PID: 7, Frames: append([]event.Frame{native}, frames...)}
}

func alloc(time, addr, size uint64, st event.StackID) *event.Event {
	return &event.Event{Time: time, Addr: addr, Size: size, PID: 7, Stack: st, Kind: event.KindAlloc, Layer: event.LayerSegment, Device: 0}
}

// free has the native stack a free carries: no Python frame.
func free(time, addr uint64) *event.Event {
	return &event.Event{Time: time, Addr: addr, PID: 7, Stack: 99, Kind: event.KindFree, Layer: event.LayerSegment}
}

// TestAttribution: each allocation belongs to the innermost pytest test
// frame on its stack; the figures are the arithmetic of the stream below.
func TestAttribution(t *testing.T) {
	const file = "/repo/tests/test_m.py"
	got := stream(t,
		&event.Process{PID: 7},
		stack(99),                         // a free's stack: native only
		stack(1, py("<module>", file, 3)), // collection: no test
		stack(2, py("Books.alloc", file, 50), py("test_a", file, 10), py("main", "/usr/lib/pytest.py", 1)), // test_a through a helper
		stack(3, py("test_a", file, 11)),
		stack(4, py("TestM.test_b", file, 20)),
		stack(5, py("test_helper", file, 30), py("TestM.test_b", file, 21)),          // a test calling a test function: the innermost
		stack(6, py("test_x", "/repo/tests/helpers.py", 5), py("test_a", file, 12)),  // not a test file: test_a's
		stack(7, py("test_a.<locals>.test_inner", file, 13), py("test_a", file, 14)), // a nested function: test_a's
		stack(8, py("Helper.test_y", file, 40), py("TestM.test_b", file, 22)),        // a class pytest does not collect: test_b's
		stack(9, py("test_c", "/elsewhere/c_test.py", 2)),                            // outside the root: the path as it is
		alloc(100, 0x1000, 1*mib, 1),
		// test_a: 8 MiB and 4 MiB live together, 8 MiB freed, 2 MiB more
		// (peak 12 MiB), 2 MiB and 1 MiB kept: leaked 3 MiB + 4 MiB.
		alloc(200, 0x2000, 8*mib, 2),
		alloc(210, 0x3000, 4*mib, 3),
		free(220, 0x2000),
		alloc(230, 0x4000, 2*mib, 6),
		alloc(240, 0x5000, 1*mib, 7),
		free(250, 0x3000), // freed after its last allocation, before test_b: not leaked
		// test_b: 16 MiB; test_helper 32 MiB on its own, freed; 64 MiB
		// through Helper.test_y (test_b's), freed, then the 16 MiB: peak
		// 16 + 64.
		alloc(300, 0x6000, 16*mib, 4),
		alloc(310, 0x7000, 32*mib, 5),
		free(315, 0x7000),
		alloc(320, 0x8000, 64*mib, 8),
		free(330, 0x8000),
		free(340, 0x6000),
		// test_c, last: 5 bytes kept to the end.
		alloc(400, 0x9000, 5, 9),
		free(410, 0x1000), // the module's buffer: no test's
	)
	require.Len(t, got, 4, "test_a, TestM::test_b, test_helper, test_c")
	for id, tt := range got {
		assert.Equal(t, BasisFrames, tt.Basis, "%s: no test phases in the stream", id)
	}
	a := got["tests/test_m.py::test_a"]
	assert.Equal(t, uint64(12*mib), a.PeakBytes, "8 MiB + 4 MiB")
	assert.Equal(t, uint64(3*mib), a.LeakedBytes, "2 MiB + 1 MiB live when test_b began")
	assert.Equal(t, uint64(2), a.LeakedAllocations)
	assert.Equal(t, uint64(4), a.Allocations)
	assert.Equal(t, uint64(15*mib), a.AllocatedBytes)
	assert.Equal(t, "test_a (/repo/tests/test_m.py:11)", a.PeakSite, "the test's line of the allocation that reached the peak")
	assert.Equal(t, "tests/test_m.py", a.Path)
	assert.Equal(t, "segment", a.Layer)

	b := got["tests/test_m.py::TestM::test_b"]
	assert.Equal(t, uint64(80*mib), b.PeakBytes, "16 MiB + 64 MiB (Helper.test_y's is test_b's)")
	assert.Equal(t, uint64(0), b.LeakedBytes)
	h := got["tests/test_m.py::test_helper"]
	assert.Equal(t, uint64(32*mib), h.PeakBytes, "its own, not test_b's")
	assert.Equal(t, uint64(0), h.LeakedBytes, "freed before test_b's next call")

	c := got["/elsewhere/c_test.py::test_c"]
	assert.Equal(t, uint64(5), c.PeakBytes)
	assert.Equal(t, uint64(5), c.LeakedBytes, "the last test: live at the end")
	assert.Equal(t, "", c.Path)
}

// TestParametrizedIsOne: the parameter sets of a test are one test (frames
// do not tell them apart): its peak the most any set had live, its leak
// what all left.
func TestParametrizedIsOne(t *testing.T) {
	const file = "/repo/test_p.py"
	got := stream(t,
		&event.Process{PID: 7}, stack(99),
		stack(1, py("test_p", file, 5)),
		alloc(10, 0x1000, 3*mib, 1), free(11, 0x1000),
		alloc(20, 0x2000, 5*mib, 1), // n=2 keeps 5 MiB
		alloc(30, 0x3000, 1*mib, 1), free(31, 0x3000),
	)
	require.Len(t, got, 1)
	p := got["test_p.py::test_p"]
	assert.Equal(t, uint64(6*mib), p.PeakBytes, "5 MiB kept + 1 MiB")
	assert.Equal(t, uint64(5*mib), p.LeakedBytes)
}

// TestBlockLayer: with a caching allocator traced, the figures are the
// tensors' (blocks), not the cached segments'.
func TestBlockLayer(t *testing.T) {
	const file = "/repo/test_t.py"
	blk := func(time, addr, size uint64, kind event.Kind) *event.Event {
		return &event.Event{Time: time, Addr: addr, Size: size, PID: 7, Stack: 1, Kind: kind, Layer: event.LayerBlock}
	}
	got := stream(t,
		&event.Process{PID: 7}, stack(99),
		stack(1, py("test_t", file, 5)),
		alloc(10, 0x1000, 20*mib, 1), // the segment the cache keeps
		blk(11, 0x1000, 3*mib, event.KindAlloc),
		blk(12, 0x1000+3*mib, 2*mib, event.KindAlloc),
		blk(13, 0x1000, 0, event.KindFree),
	)
	tt := got["test_t.py::test_t"]
	assert.Equal(t, "block", tt.Layer)
	assert.Equal(t, uint64(5*mib), tt.PeakBytes)
	assert.Equal(t, uint64(2*mib), tt.LeakedBytes)
}

func TestIsTestFile(t *testing.T) {
	for file, want := range map[string]bool{
		"tests/test_x.py": true, "/a/x_test.py": true, "test_.py": true,
		"tests/x.py": false, "testx.py": false, "test_x.pyc": false, "conftest.py": false,
	} {
		assert.Equal(t, want, IsTestFile(file), file)
	}
}

// phase is pytest's PYTEST_CURRENT_TEST in pid 7 from time on: "<id>
// (<phase>)", or unset when id is "".
func phase(time uint64, id, ph string) *event.TestPhase {
	return &event.TestPhase{Time: time, PID: 7, TID: 7, NodeID: id, Phase: ph}
}

// TestPhaseAttribution: in a process whose test phases were recorded, an
// allocation belongs to the test pytest ran when it was made (a fixture's
// in setup or teardown included), parameter sets are tests of their own,
// and a leak is what a test had live when its teardown ended. A process
// without phases in the same stream keeps the frames. The figures are the
// arithmetic of the stream below.
func TestPhaseAttribution(t *testing.T) {
	const file = "/repo/tests/test_m.py"
	const p1, p2 = "tests/test_m.py::test_p[1]", "tests/test_m.py::test_p[2-cpu]"
	withPID := func(e *event.Event, pid uint32) *event.Event { e.PID = pid; return e }
	got := stream(t,
		&event.Process{PID: 7},
		&event.Process{PID: 8},
		stack(99),
		stack(1, py("<module>", file, 3)),
		stack(2, py("Books.alloc", file, 50), py("test_p", file, 10)),
		stack(3, py("gpu_buffer", file, 5)), // a fixture: no test frame
		alloc(100, 0x1000, 1*mib, 1),        // collection: no test
		// test_p[1]: its fixture's 2 MiB in setup, 4 MiB in the call
		// (peak 6 MiB, at line 10), 1 MiB kept; the fixture's freed in
		// teardown; the 1 MiB freed after the teardown ended: leaked.
		phase(150, p1, "setup"),
		alloc(160, 0x2000, 2*mib, 3),
		phase(170, p1, "call"),
		alloc(180, 0x3000, 4*mib, 2),
		free(190, 0x3000),
		alloc(195, 0x4000, 1*mib, 2),
		phase(200, p1, "teardown"),
		free(210, 0x2000),
		phase(220, "", ""),
		free(230, 0x4000),
		// test_p[2-cpu]: 8 MiB, freed in its call.
		phase(300, p2, "setup"),
		phase(310, p2, "call"),
		alloc(320, 0x5000, 8*mib, 2),
		free(330, 0x5000),
		phase(340, p2, "teardown"),
		phase(350, "", ""),
		// A test frame while no test runs (pytest called it outside a
		// test): no test's.
		alloc(400, 0x6000, 16*mib, 2),
		// pid 8 has no phases: its test is its frame's, "test_p".
		withPID(alloc(500, 0x7000, 32*mib, 2), 8),
	)
	require.Len(t, got, 3, "%v", got)
	a, b, c := got[p1], got[p2], got["tests/test_m.py::test_p"]
	assert.Equal(t, Test{ID: p1, Basis: BasisPhases, File: file, Path: "tests/test_m.py", Function: "test_p", Layer: "segment",
		Allocations: 3, AllocatedBytes: 7 * mib, PeakBytes: 6 * mib, PeakNs: 180, PeakSite: "test_p (" + file + ":10)",
		LeakedBytes: 1 * mib, LeakedAllocations: 1, StartNs: 150, EndNs: 220}, a)
	assert.Equal(t, Test{ID: p2, Basis: BasisPhases, File: file, Path: "tests/test_m.py", Function: "test_p", Layer: "segment",
		Allocations: 1, AllocatedBytes: 8 * mib, PeakBytes: 8 * mib, PeakNs: 320, PeakSite: "test_p (" + file + ":10)",
		StartNs: 300, EndNs: 350}, b)
	assert.Equal(t, BasisFrames, c.Basis)
	assert.Equal(t, uint64(32*mib), c.PeakBytes, "pid 8's allocation alone")
	assert.Equal(t, uint64(32*mib), c.LeakedBytes)
}

// restored is alloc flagged as a flight recorder's checkpoint restores it.
func restored(time, addr, size uint64, st event.StackID) *event.Event {
	e := alloc(time, addr, size, st)
	e.Flags |= event.FlagRestored
	return e
}

// TestSegmentAlone: a flight recorder's segment read alone begins with the
// running test's first and latest phases, then the allocations its
// checkpoint restores: those made since the test began (time 100) are the
// test's, the one made before it is no test's, and the figures are the
// arithmetic of the stream below.
func TestSegmentAlone(t *testing.T) {
	const id = "tests/test_m.py::test_big"
	tr := NewTracker("/repo")
	for _, r := range []event.Record{
		&event.Process{PID: 7},
		phase(100, id, "setup"),
		phase(150, id, "call"),
		stack(99),
		stack(2, py("test_big", "/repo/tests/test_m.py", 10)),
		restored(50, 0x1000, 1*mib, 2),  // an earlier test's leak: unknown whose
		restored(120, 0x2000, 4*mib, 2), // the test's, live at the cut
		alloc(200, 0x3000, 2*mib, 2),    // 4 + 2 MiB live: the peak
		free(210, 0x2000),
		free(220, 0x1000),
		phase(300, id, "teardown"),
		phase(310, "", ""),
	} {
		tr.Add(r)
	}
	assert.True(t, tr.SawPhases())
	got := tr.Tests()
	require.Len(t, got, 1)
	assert.Equal(t, Test{ID: id, Basis: BasisPhases, File: "/repo/tests/test_m.py", Path: "tests/test_m.py", Function: "test_big",
		Layer: "segment", Allocations: 2, AllocatedBytes: 6 * mib, PeakBytes: 6 * mib, PeakNs: 200,
		PeakSite: "test_big (/repo/tests/test_m.py:10)", LeakedBytes: 2 * mib, LeakedAllocations: 1, StartNs: 100, EndNs: 310}, got[0])
}

// TestNoTestYet: allocations made before any test is known (no phase, no
// test frame seen) are no test's, and their frees and addresses reused
// later change no test's figures; a stream without tests has none.
func TestNoTestYet(t *testing.T) {
	tr := NewTracker("/repo")
	for _, r := range []event.Record{
		&event.Process{PID: 7},
		stack(99),
		alloc(10, 0x1000, 8*mib, 99),
		alloc(20, 0x2000, 4*mib, 99),
	} {
		tr.Add(r)
	}
	assert.False(t, tr.SawPhases())
	const id = "tests/test_m.py::test_a"
	for _, r := range []event.Record{
		phase(100, id, "call"),
		alloc(110, 0x3000, 1*mib, 99),
		free(120, 0x1000),             // made before: not the test's
		alloc(130, 0x2000, 2*mib, 99), // at an address live since before (its free missed)
		phase(200, "", ""),
	} {
		tr.Add(r)
	}
	got := tr.Tests()
	require.Len(t, got, 1)
	assert.Equal(t, uint64(3*mib), got[0].PeakBytes, "1 MiB + 2 MiB, nothing from before")
	assert.Equal(t, uint64(3*mib), got[0].LeakedBytes)
	assert.Equal(t, uint64(2), got[0].Allocations)

	empty := NewTracker("")
	empty.Add(&event.Process{PID: 7})
	empty.Add(alloc(10, 0x1000, mib, 0))
	assert.False(t, empty.SawPhases())
	assert.Empty(t, empty.Tests())
}
