//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/cmd/vramprof/internal/recorder"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
)

// TestFailedPitchedRequest: managed_pinned's pitched_too_big asks
// cudaMallocPitch for 1000 x 2^30 and cudaMalloc3D for {700, 2^20, 1024},
// both beyond the device. A failed pitched request counts what was asked
// for, width x height [x depth] (before: 0 bytes, the pitch being unknown).
func TestFailedPitchedRequest(t *testing.T) {
	probetest.RequirePrivilege(t)
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
	probetest.RequirePrivilege(t)
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

// TestOutputsNeverFollowLinks: run as root, an output that is a symbolic
// link would aim vramprof's writes anywhere (before: `-o link` wrote into
// the link's target, a trace.vpt linked to a file overwrote that file).
// Every command refuses an -o that is a link, refuses a directory holding
// an earlier recording unless --force, and with --force replaces a linked
// output file without touching its target. Each refusal is one line with
// the fix, exit 2.
func TestOutputsNeverFollowLinks(t *testing.T) {
	probetest.RequirePrivilege(t)
	steady := probetest.Bin(t, "steady")
	rec, _, r := runScenario(t, "steady")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)

	// setup makes tmp/{victim, victimdir/, link -> victimdir, out/ holding
	// name -> ../victim}.
	type fixture struct{ tmp, victim, victimDir, link, out string }
	setup := func(t *testing.T, linked string) fixture {
		tmp := t.TempDir()
		f := fixture{tmp: tmp, victim: filepath.Join(tmp, "victim"), victimDir: filepath.Join(tmp, "victimdir"),
			link: filepath.Join(tmp, "link"), out: filepath.Join(tmp, "out")}
		require.NoError(t, os.WriteFile(f.victim, []byte("precious\n"), 0o644))
		require.NoError(t, os.Mkdir(f.victimDir, 0o755))
		require.NoError(t, os.Symlink("victimdir", f.link))
		require.NoError(t, os.Mkdir(f.out, 0o755))
		require.NoError(t, os.Symlink("../victim", filepath.Join(f.out, linked)))
		return f
	}
	assertUntouched := func(t *testing.T, f fixture) {
		t.Helper()
		data, err := os.ReadFile(f.victim)
		require.NoError(t, err)
		assert.Equal(t, "precious\n", string(data), "the link's target file")
		entries, err := os.ReadDir(f.victimDir)
		require.NoError(t, err)
		assert.Empty(t, entries, "the linked directory")
	}
	oneLine := func(t *testing.T, r result, want string) {
		t.Helper()
		assert.Equal(t, exitToolError, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		assert.Len(t, r.stderrLines(), 1, "one line: %q", r.stderr)
		assert.Contains(t, r.stderr, want)
	}

	for _, tc := range []struct {
		name   string
		linked string // the output file in out/ that links to the victim
		argv   func(dir string, force bool) []string
	}{
		{"run", recorder.TraceFile, func(dir string, force bool) []string {
			return append([]string{"run", "-q", "-o", dir}, forceArg(force, "--", steady)...)
		}},
		{"attach", recorder.TraceFile, func(dir string, force bool) []string {
			// Refused before anything is attached; never let through here.
			return append([]string{"attach", "-p", strconv.Itoa(os.Getpid()), "--duration", "1ms", "-o", dir}, forceArg(force)...)
		}},
		{"report", recorder.JSONFile, func(dir string, force bool) []string {
			return append([]string{"report", rec, "-o", dir}, forceArg(force)...)
		}},
		{"check", recorder.TraceFile, func(dir string, force bool) []string {
			return append([]string{"check", "--max-leak", "0", "-o", dir}, forceArg(force, "--", steady)...)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t, tc.linked)
			r := vramprof(t, execOpts{dir: f.tmp}, tc.argv(f.link, false)...)
			oneLine(t, r, "output path is a symbolic link: -o "+f.link+" points to victimdir (give -o the directory's real path")
			r = vramprof(t, execOpts{dir: f.tmp}, tc.argv(f.link+"/", true)...)
			oneLine(t, r, "output path is a symbolic link")

			r = vramprof(t, execOpts{dir: f.tmp}, tc.argv(f.out, false)...)
			oneLine(t, r, "output directory holds an earlier recording: "+f.out+" already holds "+tc.linked+" (")
			assert.Contains(t, r.stderr, "pass --force to overwrite them")
			assertUntouched(t, f)
			if tc.name == "attach" {
				return // --force would attach to the test itself
			}
			r = vramprof(t, execOpts{dir: f.tmp}, tc.argv(f.out, true)...)
			require.Equal(t, 0, r.code, "--force; stderr:\n%s", r.stderr)
			assertUntouched(t, f)
			st, err := os.Lstat(filepath.Join(f.out, tc.linked))
			require.NoError(t, err)
			assert.True(t, st.Mode().IsRegular(), "the link was replaced by the output: %s", st.Mode())
		})
	}
}

// forceArg is args with --force first when force.
func forceArg(force bool, args ...string) []string {
	if force {
		return append([]string{"--force"}, args...)
	}
	return args
}

// TestReportSnapshotRefusesTerminal: `report --format snapshot` without -o
// prints a binary pickle; on a terminal it is refused in one line that says
// what to do (before: the pickle's bytes went to the terminal). Redirected,
// the pickle is written as before.
func TestReportSnapshotRefusesTerminal(t *testing.T) {
	master, slave := openPTY(t, 24, 80)
	cmd := exec.Command(binPath, "report", snapshotFixture, "--format", "snapshot")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = slave, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stderr: %s", stderr.String())
	assert.Equal(t, exitToolError, ee.ExitCode())
	assert.Equal(t, "vramprof: report: --format snapshot writes a binary pickle, not for a terminal: give -o DIR (writes DIR/snapshot.pickle), or redirect stdout to a file (> snapshot.pickle)\n", stderr.String())
	require.NoError(t, slave.Close())
	got := make([]byte, 4096)
	n, rerr := master.Read(got)
	assert.Zero(t, n, "nothing written to the terminal: %q", got[:n])
	assert.ErrorIs(t, rerr, syscall.EIO)

	r := vramprof(t, execOpts{}, "report", snapshotFixture, "--format", "snapshot")
	require.Equal(t, 0, r.code, r.stderr)
	require.NotEmpty(t, r.stdout)
	assert.Equal(t, byte(0x80), r.stdout[0], "a pickle (PROTO opcode) when redirected")
}

// TestDriverErrorNames: driver_only's runtime is invisible (linked in and
// stripped), so its two failed cudaMallocPitch calls are seen as the
// driver's cuMemAllocPitch_v2 returning CUresult codes: 2 is named
// CUDA_ERROR_OUT_OF_MEMORY (an oom finding), 1 CUDA_ERROR_INVALID_VALUE (a
// failed_call finding, not an oom). Before: both named as the runtime's
// cudaError_t, and every failure filed under the one oom finding.
func TestDriverErrorNames(t *testing.T) {
	probetest.RequirePrivilege(t)
	dir, truth, r := runScenario(t, "driver_only")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	var failed []probetest.Call
	for _, c := range truth.Calls {
		if c.Outcome == "failed" {
			failed = append(failed, c)
		}
	}
	require.Len(t, failed, 2, "truth: two failed pitched requests")
	require.Equal(t, []int32{2, 1}, []int32{failed[0].Ret, failed[1].Ret}, "truth: the runtime's codes (the driver's match them here)")

	data, err := os.ReadFile(filepath.Join(dir, "report.json"))
	require.NoError(t, err)
	var rep struct {
		Totals struct {
			FailedAllocations uint64 `json:"failed_allocations"`
			FailedBytes       uint64 `json:"failed_bytes"`
		} `json:"totals"`
		Processes []struct {
			FirstFailure *struct {
				API   string `json:"api"`
				Error string `json:"error"`
			} `json:"first_failure"`
		} `json:"processes"`
		Findings []struct {
			Kind     string `json:"kind"`
			Severity string `json:"severity"`
			Summary  string `json:"summary"`
			Bytes    uint64 `json:"bytes"`
		} `json:"findings"`
	}
	require.NoError(t, json.Unmarshal(data, &rep))
	assert.Equal(t, uint64(2), rep.Totals.FailedAllocations)
	assert.Equal(t, failed[0].Size+failed[1].Size, rep.Totals.FailedBytes, "width x height of each request")
	require.Len(t, rep.Processes, 1)
	if ff := rep.Processes[0].FirstFailure; assert.NotNil(t, ff) {
		assert.Equal(t, "cuMemAllocPitch_v2", ff.API)
		assert.Equal(t, "2 (CUDA_ERROR_OUT_OF_MEMORY)", ff.Error)
	}
	kinds := map[string]int{}
	for _, f := range rep.Findings {
		kinds[f.Kind]++
		assert.NotContains(t, f.Summary, "cudaError", "a driver code named as the runtime's: %q", f.Summary)
		switch f.Kind {
		case "oom":
			assert.Contains(t, f.Summary, fmt.Sprintf("a request for %d bytes", failed[0].Size))
			assert.Contains(t, f.Summary, "failed with error 2 (CUDA_ERROR_OUT_OF_MEMORY)")
		case "failed_call":
			assert.Equal(t, "high", f.Severity)
			assert.Contains(t, f.Summary, "1 allocation call failed with error 1 (CUDA_ERROR_INVALID_VALUE) (not out-of-memory)")
			assert.Contains(t, f.Summary, "cuMemAllocPitch_v2 of 0 bytes")
		}
	}
	assert.Equal(t, 1, kinds["oom"], "findings: %+v", rep.Findings)
	assert.Equal(t, 1, kinds["failed_call"], "findings: %+v", rep.Findings)
}
