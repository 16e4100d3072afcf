//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/cmd/vramprof/internal/recorder"
)

// snapshotFixture is the current-generation fixture of profile/snapshot;
// its scenario, and the figures below, are in testdata/make_fixtures.py.
var snapshotFixture = filepath.Join("..", "..", "profile", "snapshot", "testdata", "current.pickle")

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
	exported := filepath.Join(dir, recorder.SnapshotFile)
	for _, f := range []string{recorder.SnapshotFile, recorder.ProfileFile, recorder.JSONFile} {
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
	evil := filepath.Join("..", "..", "profile", "snapshot", "testdata", "evil.pickle")
	r := vramprof(t, execOpts{}, "report", evil)
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, "refers to Python code")
	assert.NotContains(t, r.stdout+r.stderr, "vramprof-pwned")
}

// TestReportSnapshotUnknowns: re-reading a snapshot says "unknown" for what
// a snapshot does not know (its process, parent and exit code), in text,
// Markdown, HTML and JSON, and prints its times in units that fit. The
// fixture's trace (testdata/make_fixtures.py) runs from time_us 1000 to
// 1210 and peaks at 1200 (segment C on device 1: 22 MiB + 2 MiB): a run of
// 210 µs peaking at +200 µs. The older generation has no trace, so no
// times at all.
func TestReportSnapshotUnknowns(t *testing.T) {
	olderFixture := filepath.Join(filepath.Dir(snapshotFixture), "older.pickle")
	for _, tc := range []struct {
		name, path  string
		text        []string
		runUnknown  []string
		procUnknown []string
	}{
		{"current", snapshotFixture,
			[]string{"(import, 210 µs, snapshot, exit code unknown)", "peak:               25165824 bytes (24.00 MiB) at +200 µs",
				"top stacks at the peak of pid unknown"},
			[]string{"pid", "exit_code", "host", "start_time"}, []string{"pid", "ppid"}},
		{"older", olderFixture,
			[]string{"(import, duration unknown, snapshot, exit code unknown)", "at an unknown time", "top stacks at the peak of pid unknown"},
			[]string{"pid", "exit_code", "host", "start_time", "duration_ns", "times"}, []string{"pid", "ppid", "peak_time_ns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := vramprof(t, execOpts{}, "report", tc.path)
			require.Equal(t, 0, r.code, r.stderr)
			for _, want := range tc.text {
				assert.Contains(t, r.stdout, want)
			}
			// Before: "pid 0: unknown", "exit code 0", "peak ... at +0.000s".
			assert.NotContains(t, r.stdout, "pid 0")
			assert.NotContains(t, r.stdout, "exit code 0")
			assert.NotContains(t, r.stdout, "+0.000s")

			dir := t.TempDir()
			r = vramprof(t, execOpts{}, "report", tc.path, "-o", dir)
			require.Equal(t, 0, r.code, r.stderr)
			md, err := os.ReadFile(filepath.Join(dir, "report.md"))
			require.NoError(t, err)
			assert.Contains(t, string(md), "exit code unknown")
			assert.Contains(t, string(md), "### Process unknown:")
			assert.NotContains(t, string(md), "exit code 0")
			page, err := os.ReadFile(filepath.Join(dir, "report.html"))
			require.NoError(t, err)
			assert.Contains(t, string(page), "<dt>root pid</dt><dd>unknown</dd>")
			assert.Contains(t, string(page), "exit code unknown")

			// JSON: v1's fields stay (pid 0, exit_code 0), flagged unknown.
			rep := mustReadJSON[struct {
				Run struct {
					PID      uint32   `json:"pid"`
					ExitCode int      `json:"exit_code"`
					Unknown  []string `json:"unknown"`
				} `json:"run"`
				Processes []struct {
					PID     uint32   `json:"pid"`
					Unknown []string `json:"unknown"`
				} `json:"processes"`
			}](t, filepath.Join(dir, "report.json"))
			assert.Equal(t, tc.runUnknown, rep.Run.Unknown)
			require.Len(t, rep.Processes, 1)
			assert.Equal(t, tc.procUnknown, rep.Processes[0].Unknown)
		})
	}
}
