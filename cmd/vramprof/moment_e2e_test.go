//go:build linux

package main

// Moment reports (moment.go): the full outputs at an out-of-memory failure
// and on SIGUSR1, written into DIR/moments/ while the recording goes on.
// Expected figures come from the scenarios' truth.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	gprofile "github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/cmd/vramprof/internal/recorder"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
)

// momentReport is the part of a moment's report.json these tests read.
type momentReport struct {
	Report
	Run struct {
		EndReason string   `json:"end_reason"`
		Events    uint64   `json:"events"`
		Unknown   []string `json:"unknown"`
		Moment    *struct {
			Kind    string `json:"kind"`
			Index   int    `json:"index"`
			TimeNs  uint64 `json:"time_ns"`
			Request *struct {
				API   string `json:"api"`
				Bytes uint64 `json:"bytes"`
				PID   uint32 `json:"pid"`
				Error string `json:"error"`
			} `json:"request"`
			SkippedOOMs uint64 `json:"skipped_ooms"`
			TraceBytes  int64  `json:"trace_bytes"`
		} `json:"moment"`
	} `json:"run"`
}

func mustReadMoment(t *testing.T, path string) *momentReport {
	t.Helper()
	m := mustReadJSON[momentReport](t, path)
	require.NotNil(t, m.Run.Moment, "%s: run.moment", path)
	return m
}

// momentDirs lists DIR/moments, sorted.
func momentDirs(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "moments"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		require.True(t, e.IsDir(), "moments/%s is a directory", e.Name())
		out = append(out, e.Name())
	}
	sort.Slice(out, func(i, j int) bool { return momentIndex(t, out[i]) < momentIndex(t, out[j]) })
	return out
}

var momentName = regexp.MustCompile(`^(oom|usr1)-([0-9]+)-[0-9]{8}-[0-9]{6}$`)

func momentIndex(t *testing.T, name string) int {
	m := momentName.FindStringSubmatch(name)
	require.NotNil(t, m, "moment directory name %q", name)
	n, err := strconv.Atoi(m[2])
	require.NoError(t, err)
	return n
}

// truthAtFirstFailure replays the truth's calls up to its first failed
// allocation: the bytes live then, the successful allocations before it and
// the size it asked for.
func truthAtFirstFailure(t *testing.T, truth *probetest.Truth) (live, allocs, size uint64) {
	t.Helper()
	held := map[uint64]uint64{}
	for _, c := range truth.Calls {
		switch {
		case c.API == "cudaMalloc" && c.Outcome == "failed":
			return live, allocs, c.Size
		case c.API == "cudaMalloc" && c.Outcome == "ok":
			held[c.Ptr] = c.Size
			live += c.Size
			allocs++
		case c.API == "cudaFree" && c.Outcome == "ok":
			live -= held[c.Ptr]
			delete(held, c.Ptr)
		}
	}
	t.Fatal("truth: no failed allocation")
	return 0, 0, 0
}

// momentFiles are the files of a moment directory: the outputs but the
// trace (the moment's trace is the first trace_bytes of DIR/trace.vpt).
var momentFiles = []string{"profile.pb.gz", "report.html", "report.json", "report.md"}

// TestMomentOOM runs the oom scenario: at its failed cudaMalloc a moment
// report appears whose failed request and live bytes are the truth's at the
// failure, and the outputs at exit are still complete and exact.
func TestMomentOOM(t *testing.T) {
	probetest.RequirePrivilege(t)
	dir, truth, r := runScenario(t, "oom", "FAKECUDA_CAPACITY=1073741824")
	require.Equal(t, 1, r.code, "exit code; stderr:\n%s", r.stderr)
	assertDirHolds(t, dir, withMoments(outputFiles))
	rep := mustReadReport(t, filepath.Join(dir, "report.json"))
	checkReport(t, rep, truth) // the main outputs at exit, as without moments
	assert.Equal(t, "exited", rep.Run.EndReason)

	names := momentDirs(t, dir)
	require.Len(t, names, 1, "one oom, one moment")
	require.Regexp(t, `^oom-1-`, names[0])
	md := filepath.Join(dir, "moments", names[0])
	assertDirHolds(t, md, momentFiles)
	m := mustReadMoment(t, filepath.Join(md, "report.json"))

	live, allocs, size := truthAtFirstFailure(t, truth)
	require.Equal(t, uint64(402653184), size, "truth: 384 MiB failed")
	mo := m.Run.Moment
	assert.Equal(t, "oom", mo.Kind)
	assert.Equal(t, 1, mo.Index)
	assert.Zero(t, mo.SkippedOOMs)
	require.NotNil(t, mo.Request, "run.moment.request")
	assert.Equal(t, size, mo.Request.Bytes, "failed request bytes")
	assert.Equal(t, "cudaMalloc", mo.Request.API)
	assert.Equal(t, truth.PID, mo.Request.PID)
	assert.Equal(t, "2 (cudaErrorMemoryAllocation)", mo.Request.Error)
	assert.Equal(t, "oom moment", m.Run.EndReason, "run.end_reason")
	assert.Contains(t, m.Run.Unknown, "exit_code", "a moment has no exit code yet")

	tt := m.Totals
	assert.Equal(t, live, val(t, "live_bytes_at_end", tt.LiveBytesAtEnd), "live bytes at the failure")
	assert.Equal(t, live, val(t, "peak_bytes", tt.PeakBytes), "peak so far")
	assert.Equal(t, allocs, val(t, "allocations", tt.Allocations), "allocations before the failure")
	assert.Equal(t, uint64(1), val(t, "failed_allocations", tt.FailedAllocations))
	assert.Zero(t, val(t, "frees", tt.Frees), "frees before the failure")
	var oom []uint64
	for _, f := range m.Findings {
		if f.Kind == "oom" {
			oom = append(oom, f.Bytes)
		}
	}
	assert.Equal(t, []uint64{size}, oom, "the moment's oom finding")
	f, err := os.Open(filepath.Join(md, "profile.pb.gz"))
	require.NoError(t, err)
	defer f.Close()
	p, err := gprofile.Parse(f)
	require.NoError(t, err)
	require.NoError(t, p.CheckValid())
	var peak int64
	for _, s := range p.Sample {
		peak += s.Value[5] // peak_space/bytes
	}
	assert.Equal(t, int64(live), peak, "the moment's profile: peak_space")
	mdText, err := os.ReadFile(filepath.Join(md, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(mdText), "(run, ")
	assert.Contains(t, string(mdText), "oom moment 1, recording went on)")
	assert.Contains(t, string(mdText), "the failed request: cudaMalloc of 402653184 bytes")
	html, err := os.ReadFile(filepath.Join(md, "report.html"))
	require.NoError(t, err)
	assert.Contains(t, string(html), "<dt>moment</dt>")
	assert.Contains(t, r.stderr, "oom moment: wrote "+md)
	assert.Contains(t, r.stderr, "moment reports: 1 in "+filepath.Join(dir, "moments"))
}

// withMoments is files and the moments directory, sorted.
func withMoments(files []string) []string {
	out := append(append([]string(nil), files...), "moments")
	sort.Strings(out)
	return out
}

// TestMomentSIGUSR1 sends SIGUSR1 to `vramprof attach` while longrun is in
// its phase 2: a moment report appears that is the analysis of a prefix of
// the final trace, and the recording goes on to the truth's final counts.
func TestMomentSIGUSR1(t *testing.T) {
	probetest.RequirePrivilege(t)
	lr := startLongrun(t)
	a := startAttach(t, lr.pid)
	require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1)) // phase 2: 20 steps, 20 ms apart
	time.Sleep(150 * time.Millisecond)
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGUSR1))
	lr.expect(t, "done")
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, a.wait(t, 20*time.Second), "exit code; stderr:\n%s", a.stderr.String())
	assertDirHolds(t, a.dir, withMoments(outputFiles))

	// Recording went on: the final outputs hold all of phase 2.
	truth := probetest.MustReadTruth(t, lr.truth)
	rep := mustReadReport(t, filepath.Join(a.dir, "report.json"))
	tt, want := rep.Totals, truth.Totals
	assert.Equal(t, want.Allocations, val(t, "allocations", tt.Allocations), "allocations")
	assert.Equal(t, want.Frees, val(t, "frees", tt.Frees), "frees")
	assert.Equal(t, want.AllocatedBytes, val(t, "allocated_bytes", tt.AllocatedBytes), "allocated_bytes")
	assert.Equal(t, want.LiveBytesAtEnd, val(t, "live_bytes_at_end", tt.LiveBytesAtEnd), "live_bytes_at_end")
	assert.Zero(t, val(t, "lost_events", tt.LostEvents), "lost_events")
	assert.Equal(t, "interrupted", rep.Run.EndReason)

	names := momentDirs(t, a.dir)
	require.Len(t, names, 1, "one SIGUSR1, one moment; stderr:\n%s", a.stderr.String())
	require.Regexp(t, `^usr1-1-`, names[0])
	md := filepath.Join(a.dir, "moments", names[0])
	assertDirHolds(t, md, momentFiles)
	m := mustReadMoment(t, filepath.Join(md, "report.json"))
	assert.Equal(t, "SIGUSR1 moment", m.Run.EndReason)
	assert.Equal(t, "usr1", m.Run.Moment.Kind)
	assert.Nil(t, m.Run.Moment.Request)

	// The moment is the analysis of the final trace's first trace_bytes:
	// a record boundary, whose replay gives the moment's figures.
	trace, err := os.ReadFile(filepath.Join(a.dir, "trace.vpt"))
	require.NoError(t, err)
	n := m.Run.Moment.TraceBytes
	require.Positive(t, n)
	require.Less(t, n, int64(len(trace)), "the moment is a strict prefix of the trace")
	prefix := filepath.Join(t.TempDir(), "prefix.vpt")
	require.NoError(t, os.WriteFile(prefix, trace[:n], 0o644))
	res, err := recorder.Analyze(prefix, analysis.Options{})
	require.ErrorIs(t, err, recorder.ErrTruncated, "a prefix has no End record")
	require.NotNil(t, res)
	assert.Equal(t, m.Run.Events, res.Run.Events, "events in the prefix")
	assert.Equal(t, *m.Totals.Allocations, res.Totals.Allocations, "allocations in the prefix")
	assert.Equal(t, *m.Totals.Frees, res.Totals.Frees, "frees in the prefix")
	assert.Equal(t, *m.Totals.LiveBytesAtEnd, res.Totals.LiveBytesAtEnd, "live bytes in the prefix")
	final := mustReadJSON[momentReport](t, filepath.Join(a.dir, "report.json"))
	assert.Nil(t, final.Run.Moment, "the final report is no moment")
	assert.Less(t, m.Run.Events, final.Run.Events, "SIGUSR1 came mid-run: events followed it")
	assert.Less(t, *m.Totals.Allocations, want.Allocations, "allocations followed the moment")
	t.Logf("moment: %d of %d bytes, %d of %d events, %d of %d allocations",
		n, len(trace), m.Run.Events, final.Run.Events, *m.Totals.Allocations, want.Allocations)

	// The prefix's records are the final trace's first records.
	finalRecs := readRecords(t, bytes.NewReader(trace), -1)
	prefixRecs := readRecords(t, bytes.NewReader(trace[:n]), -1)
	require.NotEmpty(t, prefixRecs)
	assert.Equal(t, finalRecs[:len(prefixRecs)], prefixRecs)
}

// readRecords reads a trace's records, rendered as text (the reader reuses
// its records).
func readRecords(t *testing.T, r io.Reader, max int) []string {
	t.Helper()
	tr, err := event.NewReader(r)
	require.NoError(t, err)
	var out []string
	for max < 0 || len(out) < max {
		rec, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		out = append(out, fmt.Sprintf("%T %+v", rec, rec))
	}
	require.False(t, tr.Truncated())
	return out
}

// TestMomentRateLimit runs oom_loop, 300 failed 1 GiB requests 5 ms apart
// (1.5 s or more): with the default interval (a minute) the first failure
// alone gets a moment; with 300ms, a bounded number do, and every failure
// without one is counted, in the next moment report or the exit summary.
func TestMomentRateLimit(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tc := range []struct {
		name     string
		interval string // --moment-interval; "" for the default
	}{
		{name: "default"},
		{name: "300ms", interval: "300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bin := probetest.Bin(t, "oom_loop")
			tmp := t.TempDir()
			truthPath := filepath.Join(tmp, "truth.json")
			dir := filepath.Join(tmp, "out")
			args := []string{"run", "-o", dir}
			if tc.interval != "" {
				args = append(args, "--moment-interval", tc.interval)
			}
			start := time.Now()
			r := vramprof(t, execOpts{env: []string{"VRAMPROF_TRUTH=" + truthPath}, dir: tmp}, append(args, "--", bin)...)
			elapsed := time.Since(start)
			require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
			truth := probetest.MustReadTruth(t, truthPath)
			failures := truth.Totals.FailedAllocations
			require.Equal(t, uint64(300), failures, "truth: failed requests")
			rep := mustReadReport(t, filepath.Join(dir, "report.json"))
			assert.Equal(t, failures, val(t, "failed_allocations", rep.Totals.FailedAllocations))
			assert.Zero(t, val(t, "lost_events", rep.Totals.LostEvents), "lost_events while moments were written")
			assert.Equal(t, truth.Totals.Allocations, val(t, "allocations", rep.Totals.Allocations))
			assert.Equal(t, truth.Totals.Frees, val(t, "frees", rep.Totals.Frees))

			names := momentDirs(t, dir)
			require.NotEmpty(t, names)
			var skipped uint64
			for i, name := range names {
				require.Regexp(t, `^oom-`+strconv.Itoa(i+1)+`-`, name)
				m := mustReadMoment(t, filepath.Join(dir, "moments", name, "report.json"))
				require.NotNil(t, m.Run.Moment.Request)
				assert.Equal(t, uint64(1<<30), m.Run.Moment.Request.Bytes, "%s: failed request", name)
				assert.Equal(t, uint64(512<<20), val(t, "live_bytes_at_end", m.Totals.LiveBytesAtEnd), "%s: live at the failure", name)
				// Failures so far: this one, the earlier moments' and
				// every one skipped up to it.
				assert.Equal(t, uint64(i+1)+skipped+m.Run.Moment.SkippedOOMs, val(t, "failed_allocations", m.Totals.FailedAllocations),
					"%s: failed allocations so far", name)
				skipped += m.Run.Moment.SkippedOOMs
			}
			// The exit summary counts the rest.
			sum := regexp.MustCompile(`; ([0-9]+) out-of-memory failures had no moment of their own \(at most one per (\S+), 10 in all\), ([0-9]+) of them after the last one`).
				FindStringSubmatch(r.stderr)
			require.NotNil(t, sum, "exit summary; stderr:\n%s", r.stderr)
			total, _ := strconv.ParseUint(sum[1], 10, 64)
			after, _ := strconv.ParseUint(sum[3], 10, 64)
			assert.Equal(t, failures-uint64(len(names)), total, "failures without a moment")
			assert.Equal(t, total, skipped+after, "skipped counts: in the moment reports, then in the summary")

			switch tc.interval {
			case "":
				assert.Len(t, names, 1, "first failure only")
				assert.Equal(t, "1m0s", sum[2])
			default:
				// At most one per 300ms over the run, never more than 10.
				bound := int(elapsed/(300*time.Millisecond)) + 1
				assert.GreaterOrEqual(t, len(names), 2, "1.5 s of failures, one moment per 300ms")
				assert.LessOrEqual(t, len(names), min(bound, 10), "moments over %s", elapsed)
			}
			t.Logf("%s: %d moments, %d failures skipped (%d after the last), in %s", tc.name, len(names), total, after, elapsed)
		})
	}
}

// TestMomentIntervalFlag: a negative --moment-interval is a usage error.
func TestMomentIntervalFlag(t *testing.T) {
	for _, cmd := range []string{"run", "attach"} {
		args := []string{cmd, "--moment-interval", "-1s"}
		if cmd == "run" {
			args = append(args, "--", "true")
		} else {
			args = append(args, "-p", "1")
		}
		r := vramprof(t, execOpts{dir: t.TempDir()}, args...)
		assert.Equal(t, exitToolError, r.code, "%s: stderr:\n%s", cmd, r.stderr)
		assert.Contains(t, r.stderr, cmd+": --moment-interval -1s is negative")
	}
}
