package recorder

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report/pytests"
)

// testsReport is report.json's "tests", as these tests read it.
type testsReport struct {
	Tests []struct {
		NodeID      string `json:"node_id"`
		Basis       string `json:"basis"`
		PeakBytes   uint64 `json:"peak_bytes"`
		LeakedBytes uint64 `json:"leaked_bytes"`
	} `json:"tests"`
}

// TestFlightRestatesTestPhase: a segment that begins while a pytest test
// runs starts with that test's phases, so the segment read alone gives
// the test its figures. The stream: test_big's setup allocates A (4 MiB,
// live to its teardown), its call churns 5000 pairs of 4 KiB through
// several segments, then allocates B (2 MiB, never freed); its teardown
// frees A. Its peak is A + B (a churned 4 KiB is freed before B), its leak
// B. The segment holding B's allocation began inside the call.
func TestFlightRestatesTestPhase(t *testing.T) {
	const id = "tests/test_m.py::test_big"
	const a, b, churn = 0x1000_0000, 0x2000_0000, 0x7f00_0000_0000
	const aSize, bSize = 4 << 20, 2 << 20
	ph := func(t uint64, phase string) *event.TestPhase {
		p := &event.TestPhase{Time: t, PID: 7, TID: 7, NodeID: id, Phase: phase}
		if phase == "" {
			p.NodeID = ""
		}
		return p
	}
	recs := []event.Record{&event.Process{PID: 7, Command: []string{"pytest"}}, stack,
		ph(1000, "setup"), alloc(1010, a, aSize), ph(1020, "call")}
	tm := uint64(2000)
	for i := range 5000 {
		addr := churn + uint64(i)*4096
		recs = append(recs, alloc(tm, addr, 4096), free(tm+5, addr))
		tm += 10
	}
	recs = append(recs, alloc(tm, b, bSize), ph(tm+10, "teardown"), free(tm+20, a), ph(tm+30, ""))
	dir, _ := mustRecord(t, Options{MaxTrace: MinMaxTrace}, recs)

	segs := SegmentsOf(filepath.Join(dir, TraceFile))
	require.Greater(t, len(segs), 1)
	require.NotEqual(t, "trace-000001.vpt", filepath.Base(segs[0]), "the oldest segments were dropped")
	seg := segmentAllocating(t, segs, b)
	require.NotEqual(t, "trace-000001.vpt", filepath.Base(seg), "B's segment began inside the test")

	tests, err := Tests(seg, "")
	require.NoError(t, err)
	require.Len(t, tests, 1, "%s alone names the running test", filepath.Base(seg))
	got := tests[0]
	assert.Equal(t, id, got.ID)
	assert.Equal(t, pytests.BasisPhases, got.Basis)
	assert.Equal(t, uint64(aSize+bSize), got.PeakBytes, "A (restored: made since the test began) + B")
	assert.Equal(t, uint64(1000), got.StartNs, "its setup, restated")

	// The recording's report.json, from the segments kept: the same test.
	rep := mustReadJSON[testsReport](t, filepath.Join(dir, JSONFile))
	require.Len(t, rep.Tests, 1)
	assert.Equal(t, id, rep.Tests[0].NodeID)
	assert.Equal(t, "phases", rep.Tests[0].Basis)
	assert.Equal(t, uint64(aSize+bSize), rep.Tests[0].PeakBytes)
	assert.Equal(t, uint64(bSize), rep.Tests[0].LeakedBytes, "B, live after the teardown")
}

// segmentAllocating is the segment in which addr's allocation was made
// (not restored).
func segmentAllocating(t *testing.T, segs []string, addr uint64) string {
	t.Helper()
	for _, s := range segs {
		f, err := os.Open(s)
		require.NoError(t, err)
		r, err := event.NewReader(f)
		require.NoError(t, err)
		for {
			rec, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
			if e, ok := rec.(*event.Event); ok && e.Addr == addr && e.Kind == event.KindAlloc && e.Flags&event.FlagRestored == 0 {
				_ = f.Close()
				return s
			}
		}
		_ = f.Close()
	}
	t.Fatalf("no segment allocates %#x", addr)
	return ""
}
