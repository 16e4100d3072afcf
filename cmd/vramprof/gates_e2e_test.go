//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/scenario"
)

// TestFailedPitchedRequest: managed_pinned's pitched_too_big asks
// cudaMallocPitch for 1000 x 2^30 and cudaMalloc3D for {700, 2^20, 1024},
// both beyond the device. A failed pitched request counts what was asked
// for, width x height [x depth] (before: 0 bytes, the pitch being unknown).
func TestFailedPitchedRequest(t *testing.T) {
	scenario.RequirePrivilege(t)
	dir, truth, r := runScenario(t, "managed_pinned")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	var want uint64
	var failed int
	for _, c := range truth.Calls {
		if c.Outcome == "failed" {
			failed++
			want += c.Size
		}
	}
	require.Equal(t, 2, failed, "truth: two failed pitched requests")
	require.Equal(t, uint64(1000<<30+700<<30), want, "truth: the requests' bytes")
	data, err := os.ReadFile(filepath.Join(dir, "report.json"))
	require.NoError(t, err)
	var rep struct {
		Totals struct {
			FailedAllocations uint64 `json:"failed_allocations"`
			FailedBytes       uint64 `json:"failed_bytes"`
		} `json:"totals"`
	}
	require.NoError(t, json.Unmarshal(data, &rep))
	assert.EqualValues(t, failed, rep.Totals.FailedAllocations, "failed_allocations")
	assert.Equal(t, want, rep.Totals.FailedBytes, "failed_bytes: width x height [x depth]")
}

// withLost copies a recorded trace, adding a Lost record (running total
// lost) before its End: what the probes write when the ring buffer
// overflowed. It returns the copy's path and how many events it recorded.
func withLost(t *testing.T, trace string, lost uint64) (string, uint64) {
	t.Helper()
	in, err := os.Open(trace)
	require.NoError(t, err)
	defer in.Close()
	r, err := event.NewReader(bufio.NewReader(in))
	require.NoError(t, err)
	outPath := filepath.Join(t.TempDir(), "lossy.vpt")
	out, err := os.Create(outPath)
	require.NoError(t, err)
	defer out.Close()
	w, err := event.NewWriter(out, r.Header())
	require.NoError(t, err)
	var events uint64
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		switch e := rec.(type) {
		case *event.Event:
			events++
		case *event.End:
			require.NoError(t, w.Write(&event.Lost{Time: e.Time, Total: lost}))
		}
		require.NoError(t, w.Write(rec))
	}
	require.NoError(t, w.Close())
	return outPath, events
}

// TestCheckLostEvents: a recording that lost events has figures that may be
// wrong either way, so check gives no verdict (exit 2) unless --allow-lost
// permits that share (before: PASS, exit 0, with 99.6% of events lost, and
// "the measured figures may be low").
func TestCheckLostEvents(t *testing.T) {
	scenario.RequirePrivilege(t)
	dir, truth, r := runScenario(t, "steady")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	peak := strconv.FormatUint(truth.Totals.PeakBytes, 10)

	_, events := withLost(t, filepath.Join(dir, "trace.vpt"), 0)
	require.Positive(t, events)
	lost := 249 * events // 99.6% of lost+recorded
	lossy, _ := withLost(t, filepath.Join(dir, "trace.vpt"), lost)
	share := fmt.Sprintf("%d of %d events lost (99.60%%)", lost, lost+events)

	t.Run("unknown_without_allow_lost", func(t *testing.T) {
		junit := filepath.Join(t.TempDir(), "j.xml")
		base := filepath.Join(t.TempDir(), "base.json")
		r := vramprof(t, execOpts{}, "check", "--max-peak", peak, "--junit", junit, "--write-baseline", base, lossy)
		assert.Equal(t, exitToolError, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		assert.Contains(t, r.stdout, "vramprof check: UNKNOWN: "+share)
		assert.Contains(t, r.stdout, "the figures may be wrong either way")
		assert.NotContains(t, r.stdout, "may be low")
		assert.Contains(t, r.stdout, "UNKNOWN  lost-events   "+share+"; limit none (no --allow-lost)")
		assert.Contains(t, r.stdout, "PASS  max-peak", "the limit itself held, on figures that may be wrong")
		assert.Regexp(t, `^vramprof: check: verdict unknown: .*--allow-lost PCT\)\n$`, r.stderr, "one line, with the fix")
		doc := mustReadJUnit(t, junit)
		assert.Equal(t, 1, doc.Errors)
		assert.Contains(t, failedCases(doc)["lost-events"], "error: "+share)
		assert.NoFileExists(t, base, "no baseline from skewed figures")
	})
	t.Run("allowed_share_judges", func(t *testing.T) {
		r := vramprof(t, execOpts{}, "check", "--max-peak", peak, "--allow-lost", "99.6", lossy)
		assert.Equal(t, exitCheckPass, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		assert.Contains(t, r.stdout, "vramprof check: PASS (1 check)")
		assert.Contains(t, r.stdout, "PASS  lost-events   "+share+"; limit 99.6% (--allow-lost)")
		assert.Contains(t, r.stdout, "WARNING: "+strconv.FormatUint(lost, 10)+" events lost (ring buffer full): the figures may be wrong either way")

		over := vramprof(t, execOpts{}, "check", "--max-peak", "1", "--allow-lost", "100", lossy)
		assert.Equal(t, exitCheckRegression, over.code, "a regression within the allowance: stdout:\n%s", over.stdout)
	})
	t.Run("share_above_allowance", func(t *testing.T) {
		r := vramprof(t, execOpts{}, "check", "--max-peak", peak, "--allow-lost", "99.5%", lossy)
		assert.Equal(t, exitToolError, r.code, "stdout:\n%s", r.stdout)
		assert.Contains(t, r.stdout, "UNKNOWN  lost-events   "+share+"; limit 99.5% (--allow-lost)")
	})
	t.Run("no_lost_events", func(t *testing.T) {
		r := vramprof(t, execOpts{}, "check", "--max-peak", peak, dir)
		assert.Equal(t, exitCheckPass, r.code, "stdout:\n%s", r.stdout)
		assert.NotContains(t, r.stdout, "lost-events")
	})
	t.Run("bad_allow_lost", func(t *testing.T) {
		r := vramprof(t, execOpts{}, "check", "--max-peak", peak, "--allow-lost", "150", dir)
		assert.Equal(t, exitToolError, r.code)
		assert.Contains(t, r.stderr, "--allow-lost \"150\"")
	})
}
