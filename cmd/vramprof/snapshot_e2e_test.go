//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// snapshotFixture is the current-generation fixture of probes/snapshot;
// its scenario, and the figures below, are in testdata/make_fixtures.py.
var snapshotFixture = filepath.Join("..", "..", "probes", "snapshot", "testdata", "current.pickle")

const mib = 1 << 20

// TestReportSnapshot imports a PyTorch snapshot, exports it again, and
// imports the export: all three reports agree with the scenario.
func TestReportSnapshot(t *testing.T) {
	check := func(t *testing.T, rep *poolReport) {
		t.Helper()
		assert.Equal(t, uint64(3), rep.Totals.Allocations, "segments A, B, C")
		assert.Equal(t, uint64(1), rep.Totals.Frees)
		assert.Equal(t, uint64(24*mib), rep.Totals.PeakBytes)
		assert.Equal(t, uint64(22*mib), rep.Totals.LiveBytesAtEnd)
		require.NotNil(t, rep.Blocks)
		assert.Equal(t, uint64(7), rep.Blocks.Allocations)
		assert.Equal(t, uint64(4), rep.Blocks.Frees)
		assert.Equal(t, uint64(1), rep.Blocks.FailedAllocations, "the oom")
		assert.Equal(t, uint64(14*mib), rep.Blocks.PeakAllocatedBytes)
		assert.Equal(t, uint64(7*mib+mib/2), rep.Blocks.LiveBytesAtEnd)
	}

	r := vramprof(t, execOpts{}, "report", snapshotFixture, "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var rep poolReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	check(t, &rep)

	dir := t.TempDir()
	r = vramprof(t, execOpts{}, "report", snapshotFixture, "--format", "snapshot", "-o", dir)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Empty(t, r.stdout, "with -o the pickle goes to DIR")
	exported := filepath.Join(dir, snapshotFile)
	for _, f := range []string{snapshotFile, profileFile, jsonFile} {
		assert.FileExists(t, filepath.Join(dir, f))
	}
	check(t, readPoolReport(t, dir))

	// To stdout, byte for byte the same; and detected by its header alone.
	r = vramprof(t, execOpts{}, "report", snapshotFixture, "--format", "snapshot")
	require.Equal(t, 0, r.code, r.stderr)
	want, err := os.ReadFile(exported)
	require.NoError(t, err)
	assert.Equal(t, string(want), r.stdout)
	noExt := filepath.Join(t.TempDir(), "dump")
	require.NoError(t, os.WriteFile(noExt, want, 0o644))
	r = vramprof(t, execOpts{}, "report", noExt, "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	rep = poolReport{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	check(t, &rep)
}

// TestReportUnsafeSnapshot: a pickle that would run code is refused with
// one line, and nothing runs.
func TestReportUnsafeSnapshot(t *testing.T) {
	evil := filepath.Join("..", "..", "probes", "snapshot", "testdata", "evil.pickle")
	r := vramprof(t, execOpts{}, "report", evil)
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, "refers to Python code")
	assert.NotContains(t, r.stdout+r.stderr, "vramprof-pwned")
}
