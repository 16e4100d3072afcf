//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	gprofile "github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// flightReport is the part of report.json the flight recorder adds.
type flightReport struct {
	Run struct {
		Events uint64 `json:"events"`
		Flight *struct {
			KeptEvents          uint64 `json:"kept_events"`
			SummarisedEvents    uint64 `json:"summarised_events"`
			RestoredAllocations uint64 `json:"restored_allocations"`
			WindowStart         uint64 `json:"window_start_ns"`
			Note                string `json:"note"`
		} `json:"flight"`
	} `json:"run"`
	Timelines []struct {
		Space  string      `json:"space"`
		Points [][2]uint64 `json:"points"`
	} `json:"timelines"`
}

// segmentFiles lists the trace segments in dir with their sizes.
func segmentFiles(tb testing.TB, dir string) (names []string, total, largest int64) {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "trace-*.vpt"))
	require.NoError(tb, err)
	for _, p := range paths {
		st, err := os.Stat(p)
		require.NoError(tb, err)
		names = append(names, filepath.Base(p))
		total += st.Size()
		largest = max(largest, st.Size())
	}
	return names, total, largest
}

// TestFlightRecorderMatchesTruth records scenarios under a small
// --max-trace: the trace rotates through many segments, the oldest are
// deleted, and still the report (live and replayed with `vramprof report
// DIR`) gives the truth's counts and live bytes exactly, and says what it
// summarised.
func TestFlightRecorderMatchesTruth(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tc := range []struct {
		name, max string
		maxBytes  int64
		env       []string
		// dropped: segments were deleted, the report starts at a
		// checkpoint; whole: the truth's peak and stacks hold too.
		dropped, whole bool
	}{
		// leak: ~43 KB of segments of 64KiB/4 (three): rotated, none
		// dropped (a fourth would start past 48 KiB; the size is the
		// events' varints and stacks, ~4% from run to run).
		{name: "leak", max: "64KiB", maxBytes: 64 << 10, whole: true},
		// churn_threads: 128000 events in ~1.8 MB; 8000 buffers live at the end.
		{name: "churn_threads", max: "512KiB", maxBytes: 512 << 10, env: []string{"CHURN_PAIRS=2000"}, dropped: true},
		// spike, 3000 iterations: ~96000 events in ~1.4 MB; its peak, at
		// iteration 10, long before the segments kept.
		{name: "spike", max: "64KiB", maxBytes: 64 << 10, env: []string{"SPIKE_ITERATIONS=3000"}, dropped: true, whole: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := probetest.Bin(t, tc.name)
			tmp := t.TempDir()
			truthPath := filepath.Join(tmp, "truth.json")
			dir := filepath.Join(tmp, "out")
			r := vramprof(t, execOpts{env: append(tc.env, "VRAMPROF_TRUTH="+truthPath), dir: tmp},
				"run", "--max-trace", tc.max, "-o", dir, "--", bin)
			require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
			truth := probetest.MustReadTruth(t, truthPath)

			names, total, largest := segmentFiles(t, dir)
			require.NotEmpty(t, names)
			_, err := os.Stat(filepath.Join(dir, "trace.vpt"))
			assert.True(t, os.IsNotExist(err), "no trace.vpt beside the segments")
			assert.LessOrEqual(t, total, tc.maxBytes+largest, "disk: the budget and one segment, %v", names)
			if tc.dropped {
				assert.NotEqual(t, "trace-000001.vpt", names[0], "the oldest segments were deleted")
			} else {
				assert.Greater(t, len(names), 1, "the trace rotated")
			}

			rep := mustReadReport(t, filepath.Join(dir, "report.json"))
			tt, want := rep.Totals, truth.Totals
			assert.Equal(t, want.Allocations, val(t, "allocations", tt.Allocations), "allocations")
			assert.Equal(t, want.Frees, val(t, "frees", tt.Frees), "frees")
			assert.Equal(t, want.AllocatedBytes, val(t, "allocated_bytes", tt.AllocatedBytes), "allocated_bytes")
			assert.Equal(t, want.LiveBytesAtEnd, val(t, "live_bytes_at_end", tt.LiveBytesAtEnd), "live_bytes_at_end")
			assert.Equal(t, want.FailedAllocations, val(t, "failed_allocations", tt.FailedAllocations), "failed_allocations")
			assert.Zero(t, val(t, "unknown_frees", tt.UnknownFrees), "unknown_frees: every free found its allocation")
			if want.PeakBytes != 0 {
				assert.Equal(t, want.PeakBytes, val(t, "peak_bytes", tt.PeakBytes), "peak_bytes")
			}
			if tc.whole {
				checkReport(t, rep, truth)
			}
			checkFlightPeak(t, rep, filepath.Join(dir, "profile.pb.gz"), truth)

			fr := mustReadJSON[flightReport](t, filepath.Join(dir, "report.json"))
			if tc.dropped {
				require.NotNil(t, fr.Run.Flight, "report.json run.flight")
				f := fr.Run.Flight
				assert.Equal(t, fr.Run.Events, f.KeptEvents)
				assert.NotZero(t, f.SummarisedEvents)
				assert.NotZero(t, f.RestoredAllocations)
				assert.Contains(t, f.Note, "flight recorder: kept the last")
				assert.Contains(t, f.Note, "the stacks live at them and timelines cover the whole run")
				// The device timeline starts before the window and reaches
				// the peak, wherever it fell.
				var highest uint64
				for _, tl := range fr.Timelines {
					if tl.Space != "device" || len(tl.Points) == 0 {
						continue
					}
					assert.Less(t, tl.Points[0][0], f.WindowStart, "the timeline starts before the window")
					for _, pt := range tl.Points {
						highest = max(highest, pt[1])
					}
				}
				assert.Equal(t, val(t, "peak_bytes", rep.Totals.PeakBytes), highest, "the timeline's highest point is the peak")
				assert.Contains(t, r.stdout+r.stderr, "earlier events summarised in a checkpoint", "the summary says so")
				md, err := os.ReadFile(filepath.Join(dir, "report.md"))
				require.NoError(t, err)
				assert.Contains(t, string(md), "**Note:** flight recorder: kept the last")
				html, err := os.ReadFile(filepath.Join(dir, "report.html"))
				require.NoError(t, err)
				assert.Contains(t, string(html), "flight recorder: kept the last")
			} else {
				assert.Nil(t, fr.Run.Flight, "nothing was dropped")
			}

			// The same report from the segments on disk.
			dir2 := filepath.Join(t.TempDir(), "replay")
			r2 := vramprof(t, execOpts{}, "report", dir, "-o", dir2)
			require.Equal(t, 0, r2.code, "stderr: %s", r2.stderr)
			for _, name := range []string{"profile.pb.gz", "report.json", "report.md", "report.html"} {
				live, err := os.ReadFile(filepath.Join(dir, name))
				require.NoError(t, err)
				replay, err := os.ReadFile(filepath.Join(dir2, name))
				require.NoError(t, err)
				assert.True(t, bytes.Equal(live, replay), "%s differs between the live run and the replay", name)
			}
			assert.True(t, strings.HasPrefix(names[len(names)-1], "trace-"))
		})
	}
}

// TestAttachFlightRecorder is TestFlightRecorderMatchesTruth for `attach -p
// PID --max-trace SIZE`: longrun's phase 2, long enough here for the oldest
// segments to be deleted, recorded by an attach within the budget gives its
// truth's counts, bytes, unknown frees (the preloaded buffer, allocated
// before the attach, freed after the checkpoints) and live bytes at the
// end, live and replayed from the segments.
func TestAttachFlightRecorder(t *testing.T) {
	probetest.RequirePrivilege(t)
	const maxBytes = 256 << 10
	cmd := exec.Command(probetest.Bin(t, "longrun"))
	// 5000 iterations write ~550 KB of events (about 110 B an iteration):
	// several 64 KiB segments beyond the 256 KiB budget.
	cmd.Env = append(os.Environ(), "LONGRUN_ITERATIONS=5000", "LONGRUN_PAUSE_MS=0")
	lr := startLongrunCmd(t, cmd)
	a := startAttach(t, lr.pid, "--max-trace", "256KiB")
	require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1))
	lr.expect(t, "done")
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, a.wait(t, 20*time.Second), "exit code; stderr:\n%s", a.stderr.String())
	truth := probetest.MustReadTruth(t, lr.truth)

	names, total, largest := segmentFiles(t, a.dir)
	require.NotEmpty(t, names, "segments in %s", a.dir)
	assert.NotEqual(t, "trace-000001.vpt", names[0], "the oldest segments were deleted")
	_, err := os.Stat(filepath.Join(a.dir, "trace.vpt"))
	assert.True(t, os.IsNotExist(err), "no trace.vpt beside the segments")
	assert.LessOrEqual(t, total, maxBytes+largest, "disk: the budget and one segment, %v", names)

	rep := mustReadReport(t, filepath.Join(a.dir, "report.json"))
	tt, want := rep.Totals, truth.Totals
	assert.Equal(t, "attach", rep.Run.Mode)
	assert.Equal(t, want.Allocations, val(t, "allocations", tt.Allocations), "allocations")
	assert.Equal(t, want.Frees, val(t, "frees", tt.Frees), "frees")
	assert.Equal(t, uint64(1), want.UnknownFrees, "truth: one preloaded buffer freed")
	assert.Equal(t, want.UnknownFrees, val(t, "unknown_frees", tt.UnknownFrees), "unknown_frees")
	assert.Equal(t, want.AllocatedBytes, val(t, "allocated_bytes", tt.AllocatedBytes), "allocated_bytes")
	assert.Equal(t, want.LiveBytesAtEnd, val(t, "live_bytes_at_end", tt.LiveBytesAtEnd), "live_bytes_at_end")
	assert.Equal(t, want.PeakBytes, val(t, "peak_bytes", tt.PeakBytes), "peak_bytes")
	assert.Zero(t, val(t, "lost_events", tt.LostEvents), "lost_events")
	fr := mustReadJSON[flightReport](t, filepath.Join(a.dir, "report.json"))
	require.NotNil(t, fr.Run.Flight, "report.json run.flight")
	assert.NotZero(t, fr.Run.Flight.SummarisedEvents)
	assert.NotZero(t, fr.Run.Flight.RestoredAllocations)

	// The same report from the segments on disk.
	dir2 := filepath.Join(t.TempDir(), "replay")
	r2 := vramprof(t, execOpts{}, "report", a.dir, "-o", dir2)
	require.Equal(t, 0, r2.code, "stderr: %s", r2.stderr)
	for _, name := range []string{"profile.pb.gz", "report.json", "report.md", "report.html"} {
		live, err := os.ReadFile(filepath.Join(a.dir, name))
		require.NoError(t, err)
		replay, err := os.ReadFile(filepath.Join(dir2, name))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(live, replay), "%s differs between the live run and the replay", name)
	}
	t.Logf("segments %v, %d bytes", names, total)
}

// checkFlightPeak checks the stacks at the peak of a flight recording's
// report against its truth: the process's peak stacks add up to its peak,
// and the profile's peak_space (device memory) to the truth's peak (the
// report's when the truth does not know it), topped by the function the
// truth says held the most at the peak.
func checkFlightPeak(t *testing.T, rep *Report, path string, truth *probetest.Truth) {
	t.Helper()
	peak := val(t, "peak_bytes", rep.Totals.PeakBytes)
	if truth.Totals.PeakBytes != 0 {
		require.Equal(t, truth.Totals.PeakBytes, peak, "peak_bytes")
	}
	require.Len(t, rep.Processes, 1)
	p := rep.Processes[0]
	var sum uint64
	for _, s := range p.PeakStacks {
		sum += s.Bytes
	}
	assert.Equal(t, p.PeakBytes, sum, "the stacks at the process's peak add up to it")

	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	prof, err := gprofile.Parse(f)
	require.NoError(t, err)
	ix := -1
	for i, st := range prof.SampleType {
		if st.Type == "peak_space" {
			ix = i
		}
	}
	require.GreaterOrEqual(t, ix, 0, "peak_space")
	var space int64
	for _, s := range prof.Sample {
		if sp := s.Label["space"]; len(sp) == 1 && sp[0] == "host" {
			continue
		}
		space += s.Value[ix]
	}
	assert.EqualValues(t, peak, space, "peak_space")
	var top string
	var topBytes uint64
	for fn, f := range truth.ByFunction {
		if f.LiveBytesAtPeak > topBytes {
			top, topBytes = fn, f.LiveBytesAtPeak
		}
	}
	if top != "" {
		assert.Equal(t, top, pprofTop(t, path, "peak_space"), "top of peak_space")
	}
}
