package report

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report/pytests"
)

// pytestRecords is a pytest session of pid 7, started at 1000 s: test_a
// (setup at +1 s) allocates 8 MiB and 4 MiB, frees the 8 MiB and keeps
// the 4 MiB past its teardown (ended at +3 s); test_b[2] (from +4 s)
// allocates 64 MiB and frees it. Both through test frames at
// tests/test_m.py lines 10 and 20.
func pytestRecords() []event.Record {
	const a, b, file = "tests/test_m.py::test_a", "tests/test_m.py::test_b[2]", "/repo/tests/test_m.py"
	at := func(s float64) uint64 { return 1000*sec + uint64(s*float64(sec)) }
	ph := func(t uint64, id, phase string) *event.TestPhase {
		return &event.TestPhase{Time: t, PID: 7, TID: 7, NodeID: id, Phase: phase}
	}
	ev := func(t uint64, kind event.Kind, addr, size uint64, st event.StackID) *event.Event {
		return &event.Event{Time: t, PID: 7, TID: 7, Kind: kind, Layer: event.LayerSegment, API: event.APICudaMalloc,
			Addr: addr, Size: size, Stack: st}
	}
	st := func(id event.StackID, fn string, line int64) *event.Stack {
		return &event.Stack{ID: id, PID: 7, Frames: []event.Frame{{Function: "cudaMalloc", Mapping: 1},
			{Function: fn, File: file, Line: line}}}
	}
	free := func(t, addr uint64) *event.Event {
		e := ev(t, event.KindFree, addr, 0, 0)
		e.API = event.APICudaFree
		return e
	}
	return []event.Record{
		&event.Header{Version: 2, Tool: "vramprof test", Mode: "run", Command: []string{"pytest"}, PID: 7, Start: 1000 * sec},
		&event.Process{PID: 7, Command: []string{"pytest"}, Time: 1000 * sec},
		st(1, "test_a", 10), st(2, "test_b", 20),
		ph(at(1), a, "setup"), ph(at(1.5), a, "call"),
		ev(at(2), event.KindAlloc, 0x1000, 8*MiB, 1),
		ev(at(2.1), event.KindAlloc, 0x2000_0000, 4*MiB, 1),
		free(at(2.2), 0x1000),
		ph(at(2.5), a, "teardown"), ph(at(3), "", ""),
		ph(at(4), b, "setup"), ph(at(4.5), b, "call"),
		ev(at(5), event.KindAlloc, 0x4000_0000, 64*MiB, 2),
		free(at(5.5), 0x4000_0000),
		ph(at(6), b, "teardown"), ph(at(6.5), "", ""),
		&event.End{Time: at(10), Reason: "exited"},
	}
}

// mustReport analyses recs and follows their tests with report/pytests,
// as the recorder does, limit giving each test's limit.
func mustReport(t testing.TB, recs []event.Record, limit func(string) *TestLimit) *Report {
	t.Helper()
	a := analysis.New(analysis.Options{})
	tr := pytests.NewTracker("/repo")
	for _, r := range recs {
		tr.Add(r)
		require.NoError(t, a.Add(r))
	}
	rep := &Report{Result: a.Finish(), Pytest: tr.SawPhases()}
	for _, tt := range tr.Tests() {
		rep.Tests = append(rep.Tests, Test{Test: tt, Limit: limit(tt.ID)})
	}
	return rep
}

// TestReportTests: report.json's "tests" carry each test's figures as the
// stream's arithmetic gives them (pytestRecords), times from the run's
// start, and the limit with its verdict; report.md and report.html show
// them in human units. Without pytest, no "tests" and no section.
func TestReportTests(t *testing.T) {
	rep := mustReport(t, pytestRecords(), func(id string) *TestLimit {
		if id == "tests/test_m.py::test_b[2]" {
			return &TestLimit{Bytes: 32 * MiB, From: "gpu.limits:2"}
		}
		return nil
	})
	var buf bytes.Buffer
	require.NoError(t, rep.WriteJSON(&buf))
	var j struct {
		Tests []JSONTest `json:"tests"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &j))
	require.Len(t, j.Tests, 2)
	assert.Equal(t, JSONTest{NodeID: "tests/test_m.py::test_a", Basis: "phases", Layer: "segment",
		PeakBytes: 12 * MiB, PeakTimeNs: 2.1e9, PeakSite: "test_a (/repo/tests/test_m.py:10)",
		LeakedBytes: 4 * MiB, LeakedAllocations: 1, Allocations: 2, AllocatedBytes: 12 * MiB,
		StartNs: 1e9, EndNs: 3e9, File: "/repo/tests/test_m.py", Function: "test_a"}, j.Tests[0])
	assert.Equal(t, JSONTest{NodeID: "tests/test_m.py::test_b[2]", Basis: "phases", Layer: "segment",
		PeakBytes: 64 * MiB, PeakTimeNs: 5e9, PeakSite: "test_b (/repo/tests/test_m.py:20)",
		Allocations: 1, AllocatedBytes: 64 * MiB, StartNs: 4e9, EndNs: 6.5e9, File: "/repo/tests/test_m.py", Function: "test_b",
		Limit: &JSONTestLimit{Bytes: 32 * MiB, From: "gpu.limits:2", Pass: false}}, j.Tests[1])

	buf.Reset()
	require.NoError(t, rep.WriteMarkdown(&buf))
	md := buf.String()
	assert.Contains(t, md, "## Tests\n\nEach test's own allocations, device memory at the segment layer (the CUDA API): made while pytest ran it")
	assert.Contains(t, md, "| tests/test\\_m.py::test\\_a | 12.00 MiB | 4.00 MiB in 1 | 12.00 MiB in 2 | phases | none |\n")
	assert.Contains(t, md, "| tests/test\\_m.py::test\\_b\\[2\\] | 64.00 MiB | 0 B in 0 | 64.00 MiB in 1 | phases | FAIL, limit 32.00 MiB (gpu.limits:2) |\n")

	buf.Reset()
	require.NoError(t, rep.WriteHTML(&buf))
	page := buf.String()
	assert.Contains(t, page, `<section id="tests">`)
	assert.Contains(t, page, `tests/test_m.py::test_b[2]<div class="muted">peak at test_b (/repo/tests/test_m.py:20)</div>`)
	assert.Contains(t, page, `<span class="b" title="67108864 bytes">64.00 MiB</span>`)
	assert.Contains(t, page, `<td class="warn-text">FAIL, limit 32.00 MiB (gpu.limits:2)</td>`)

	// The same analysis without pytest: the package functions' outputs.
	plain := &Report{Result: rep.Result}
	buf.Reset()
	require.NoError(t, plain.WriteJSON(&buf))
	assert.NotContains(t, buf.String(), `"tests"`)
	var want bytes.Buffer
	require.NoError(t, WriteJSON(&want, rep.Result))
	assert.Equal(t, want.String(), buf.String())
	buf.Reset()
	require.NoError(t, plain.WriteMarkdown(&buf))
	assert.NotContains(t, buf.String(), "## Tests")
	buf.Reset()
	require.NoError(t, plain.WriteHTML(&buf))
	assert.NotContains(t, buf.String(), `id="tests"`)

	// pytest ran, no test allocated: "tests" is there, empty.
	ran := &Report{Result: rep.Result, Pytest: true}
	buf.Reset()
	require.NoError(t, ran.WriteJSON(&buf))
	assert.Contains(t, buf.String(), `"tests": []`)
	buf.Reset()
	require.NoError(t, ran.WriteMarkdown(&buf))
	assert.Contains(t, buf.String(), "## Tests\n\npytest ran tests, and no allocation was made in one.")
}
