//go:build linux

package main

// A gate never passes on a recording it cannot trust: a trace cut short,
// its report.json, a moment report and a flight recorder's segments that
// do not follow each other give the verdict UNKNOWN (exit 2) with the
// reason, in every output of check. Limits and figures come from the
// scenarios' truth.

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// completeReport is the part of report.json that says whether the
// recording is whole.
type completeReport struct {
	Run struct {
		Complete          *bool    `json:"complete"`
		IncompleteReasons []string `json:"incomplete_reasons"`
	} `json:"run"`
}

// checkUnknown runs check with args and asserts the unknown verdict of an
// incomplete recording: exit 2, the reason on stdout, in the GitHub
// annotations and step summary, and a JUnit error.
func checkUnknown(t *testing.T, reason string, args ...string) result {
	t.Helper()
	tmp := t.TempDir()
	junit, summary := filepath.Join(tmp, "junit.xml"), filepath.Join(tmp, "summary.md")
	r := vramprof(t, execOpts{env: []string{"GITHUB_ACTIONS=true", "GITHUB_STEP_SUMMARY=" + summary}},
		append([]string{"check", "--junit", junit}, args...)...)
	assert.Equal(t, 2, r.code, "an incomplete recording: no verdict; stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "vramprof check: UNKNOWN: the recording is incomplete ("+reason)
	assert.Contains(t, r.stdout, "WARNING: incomplete recording: "+reason)
	assert.Contains(t, r.stdout, "::error title=vramprof check%3A complete::the recording is incomplete ("+reason)
	assert.Contains(t, r.stderr, "verdict unknown: the recording is incomplete ("+reason)
	assert.NotContains(t, r.stdout, "vramprof check: PASS")
	md, err := os.ReadFile(summary)
	require.NoError(t, err)
	assert.Contains(t, string(md), "## vramprof check: UNKNOWN: ")
	assert.Contains(t, string(md), "| complete | **UNKNOWN** |")
	cases := failedCases(mustReadJUnit(t, junit))
	assert.Contains(t, cases["complete"], "error: the recording is incomplete ("+reason)
	return r
}

// TestCheckCutTrace: spike recorded whole, then its trace cut after 2 KiB
// and at half its length (as a vramprof killed mid-run, or a full disk,
// leaves it). The
// whole recording fails a limit one byte below the truth's peak; the cut
// one, whose figures stop before the end, gets no verdict at that limit
// nor at 1 GiB over the truth, and neither does the report.json made from
// it, which says it is incomplete (as report.md and report.html do).
func TestCheckCutTrace(t *testing.T) {
	probetest.RequirePrivilege(t)
	dir, truth, r := runScenario(t, "spike")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	below := strconv.FormatUint(truth.Totals.PeakBytes-1, 10)
	above := strconv.FormatUint(truth.Totals.PeakBytes+1<<30, 10)
	whole := vramprof(t, execOpts{}, "check", "--max-peak", below, dir)
	require.Equal(t, 1, whole.code, "the whole recording fails; stdout:\n%s", whole.stdout)
	data, err := os.ReadFile(filepath.Join(dir, "trace.vpt"))
	require.NoError(t, err)
	const reason = "cut short: the trace ends without its End record"
	var cut string
	// Early (2 KiB: the first calls only, before the peak) and at half.
	for _, n := range []int{2048, len(data) / 2} {
		cut = filepath.Join(t.TempDir(), "cut")
		require.NoError(t, os.Mkdir(cut, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(cut, "trace.vpt"), data[:n], 0o644))
		for _, limit := range []string{below, above, "1GiB"} {
			checkUnknown(t, reason, "--max-peak", limit, cut)
		}
	}
	rep := mustReadJSON[completeReport](t, filepath.Join(dir, "report.json"))
	require.NotNil(t, rep.Run.Complete, "report.json run.complete")
	assert.True(t, *rep.Run.Complete, "the whole recording is complete")
	assert.Empty(t, rep.Run.IncompleteReasons)

	// Its report.json, made by `vramprof report`, says so, and check reads it.
	out := filepath.Join(t.TempDir(), "report")
	rr := vramprof(t, execOpts{}, "report", cut, "-o", out)
	require.FileExists(t, filepath.Join(out, "report.json"), "stderr:\n%s", rr.stderr)
	crep := mustReadJSON[completeReport](t, filepath.Join(out, "report.json"))
	require.NotNil(t, crep.Run.Complete, "report.json run.complete")
	assert.False(t, *crep.Run.Complete)
	require.Len(t, crep.Run.IncompleteReasons, 1)
	assert.Contains(t, crep.Run.IncompleteReasons[0], reason)
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "**Incomplete recording:** "+reason)
	html, err := os.ReadFile(filepath.Join(out, "report.html"))
	require.NoError(t, err)
	assert.Contains(t, string(html), "<dt>incomplete</dt>")
	assert.Contains(t, rr.stdout+rr.stderr, "incomplete:         "+reason, "the summary says it")
	for _, limit := range []string{below, above} {
		checkUnknown(t, reason, "--max-peak", limit, filepath.Join(out, "report.json"))
	}

	// As a baseline, it gives no verdict either.
	r = vramprof(t, execOpts{}, "check", "--baseline", filepath.Join(out, "report.json"), "--max-increase", "10", dir)
	assert.Equal(t, 2, r.code, "stdout:\n%s", r.stdout)
	assert.Contains(t, r.stdout, "vramprof check: UNKNOWN: the baseline is incomplete ("+reason)
}

// TestCheckDiskFull: spike recorded into a 96 KiB tmpfs fills it: the
// recording stops with the error, and the trace it leaves, cut where the
// disk filled, gets no verdict.
func TestCheckDiskFull(t *testing.T) {
	probetest.RequirePrivilege(t)
	full := filepath.Join(t.TempDir(), "full")
	require.NoError(t, os.Mkdir(full, 0o755))
	require.NoError(t, syscall.Mount("tmpfs", full, "tmpfs", 0, "size=96k"), "mount a small tmpfs")
	t.Cleanup(func() { _ = syscall.Unmount(full, syscall.MNT_DETACH) })
	dir := filepath.Join(full, "out")
	r := vramprof(t, execOpts{env: []string{"SPIKE_ITERATIONS=3000"}, dir: t.TempDir()},
		"run", "-q", "-o", dir, "--", probetest.Bin(t, "spike"))
	assert.Equal(t, 2, r.code, "stderr:\n%s", r.stderr)
	assert.Contains(t, r.stderr, "no space left on device")
	checkUnknown(t, "cut short: the trace ends without its End record", "--max-peak", "1GiB", dir)
}

// TestCheckMomentReport: oom's moment report (at the failed cudaMalloc)
// is the trace up to the moment, not the run: no verdict on it, where the
// whole recording fails a limit one byte below the truth's peak.
func TestCheckMomentReport(t *testing.T) {
	probetest.RequirePrivilege(t)
	dir, truth, r := runScenario(t, "oom", "FAKECUDA_CAPACITY=1073741824")
	require.Equal(t, 1, r.code, "stderr:\n%s", r.stderr)
	below := strconv.FormatUint(truth.Totals.PeakBytes-1, 10)
	whole := vramprof(t, execOpts{}, "check", "--max-peak", below, dir)
	require.Equal(t, 1, whole.code, "the whole recording fails; stdout:\n%s", whole.stdout)

	names := momentDirs(t, dir)
	require.Len(t, names, 1, "one oom, one moment")
	moment := filepath.Join(dir, "moments", names[0], "report.json")
	for _, limit := range []string{below, "80MiB", "1GiB"} {
		checkUnknown(t, "a moment report (oom 1, ", "--max-peak", limit, moment)
	}
	rep := mustReadJSON[completeReport](t, moment)
	require.NotNil(t, rep.Run.Complete, "report.json run.complete")
	assert.False(t, *rep.Run.Complete)
}

// TestFlightSegmentsFollowEachOther: spike, 3900 iterations, under
// --max-trace 1MiB fills segments 1 to 4 (none dropped) and reads back to
// the truth. Then a copy of the directory with the middle segment deleted,
// the oldest cut short, one replaced by the same segment of another run
// of the same program, or one duplicated: `report` refuses it with what is
// wrong and what to do, in one line, and `check` gives no verdict. Where
// the fix is to move the segments before the break away, doing so reads
// back to the truth.
func TestFlightSegmentsFollowEachOther(t *testing.T) {
	probetest.RequirePrivilege(t)
	record := func() (string, *probetest.Truth) {
		tmp := t.TempDir()
		truthPath, dir := filepath.Join(tmp, "truth.json"), filepath.Join(tmp, "out")
		r := vramprof(t, execOpts{env: []string{"SPIKE_ITERATIONS=3900", "VRAMPROF_TRUTH=" + truthPath}, dir: tmp},
			"run", "-q", "--max-trace", "1MiB", "-o", dir, "--", probetest.Bin(t, "spike"))
		require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
		names, _, _ := segmentFiles(t, dir)
		require.Equal(t, []string{"trace-000001.vpt", "trace-000002.vpt", "trace-000003.vpt", "trace-000004.vpt"}, names,
			"3900 iterations fill four segments of 256 KiB (3300 to 4400 do)")
		return dir, probetest.MustReadTruth(t, truthPath)
	}
	dir, truth := record()
	other, _ := record()
	intact := filepath.Join(t.TempDir(), "intact")
	r := vramprof(t, execOpts{}, "report", dir, "-o", intact)
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	rep := mustReadReport(t, filepath.Join(intact, "report.json"))
	assert.Equal(t, truth.Totals.Allocations, val(t, "allocations", rep.Totals.Allocations))
	assert.Equal(t, truth.Totals.Frees, val(t, "frees", rep.Totals.Frees))
	assert.Equal(t, truth.Totals.AllocatedBytes, val(t, "allocated_bytes", rep.Totals.AllocatedBytes))
	assert.Equal(t, truth.Totals.PeakBytes, val(t, "peak_bytes", rep.Totals.PeakBytes))

	seg := func(dir string, n int) string { return filepath.Join(dir, "trace-00000"+strconv.Itoa(n)+".vpt") }
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, d string)
		want   []string
		// moveFirst: the fix the error gives is moving trace-000001.vpt away.
		moveFirst bool
	}{
		{"middle deleted", func(t *testing.T, d string) { require.NoError(t, os.Remove(seg(d, 2))) },
			[]string{"segment 2 is missing between trace-000001.vpt (segment 1) and trace-000003.vpt (segment 3): put it back, " +
				"or move trace-000001.vpt and the segments before it out of"}, true},
		{"oldest cut", func(t *testing.T, d string) {
			st, err := os.Stat(seg(d, 1))
			require.NoError(t, err)
			// Its last byte: always inside a record (half its size may
			// fall between two, a segment that ends whole and short).
			require.NoError(t, os.Truncate(seg(d, 1), st.Size()-1))
		}, []string{"trace-000001.vpt ends inside a record at byte", "yet trace-000002.vpt follows it: the segment was cut short",
			"or move trace-000001.vpt and the segments before it out of"}, true},
		{"foreign", func(t *testing.T, d string) {
			data, err := os.ReadFile(seg(other, 3))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(seg(d, 3), data, 0o644))
		}, []string{"trace-000003.vpt belongs to another recording (recording ", "the newest segment, trace-000004.vpt, is of recording ",
			"remove it from"}, false},
		{"duplicated", func(t *testing.T, d string) {
			data, err := os.ReadFile(seg(d, 2))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(seg(d, 5), data, 0o644))
		}, []string{"trace-000005.vpt repeats segment 2 of the recording (trace-000004.vpt is segment 4): remove the copy"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "rec")
			require.NoError(t, os.CopyFS(d, os.DirFS(dir)))
			tc.tamper(t, d)
			out := filepath.Join(t.TempDir(), "report")
			r := vramprof(t, execOpts{}, "report", d, "-o", out)
			assert.Equal(t, 2, r.code, "refused; stdout:\n%s", r.stdout)
			assert.Contains(t, r.stderr, "trace segments do not follow each other")
			for _, w := range tc.want {
				assert.Contains(t, r.stderr, w)
			}
			lines := slices.DeleteFunc(strings.Split(r.stderr, "\n"), func(s string) bool { return s == "" })
			assert.Len(t, lines, 1, "one line:\n%s", r.stderr)
			assert.NoFileExists(t, filepath.Join(out, "report.json"), "no figures written")

			cr := checkUnknown(t, "cannot read recording: read trace", "--max-peak", "1GiB", d)
			assert.Contains(t, cr.stdout, "figures: none")
			for _, w := range tc.want {
				assert.Contains(t, cr.stdout, w)
			}

			if tc.moveFirst {
				// The fix it gives: move the segments before the break
				// away; the checkpoint after it restores the truth.
				require.NoError(t, os.Rename(seg(d, 1), filepath.Join(t.TempDir(), "moved.vpt")))
				fixed := filepath.Join(t.TempDir(), "fixed")
				r := vramprof(t, execOpts{}, "report", d, "-o", fixed)
				require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
				rep := mustReadReport(t, filepath.Join(fixed, "report.json"))
				assert.Equal(t, truth.Totals.Allocations, val(t, "allocations", rep.Totals.Allocations))
				assert.Equal(t, truth.Totals.PeakBytes, val(t, "peak_bytes", rep.Totals.PeakBytes))
			}
		})
	}
}
