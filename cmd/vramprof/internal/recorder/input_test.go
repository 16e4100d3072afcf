package recorder

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	pysnapshot "github.com/vramprof/vramprof/profile/snapshot"
)

// secret is what a file vramprof must never quote holds (a shadow file's
// first line).
const secret = "root:$6$s3cr3tSALT$hash:19000:0:99999:7:::\n"

// startRecording creates a recorder in a new directory and writes
// workload(8, 4096) into it: 8 allocations, 6 frees, 2 x 4096 bytes live
// at the end.
func startRecording(t *testing.T, opts Options) (*Recorder, string) {
	t.Helper()
	opts.Dir = filepath.Join(t.TempDir(), "out")
	opts.Header = &event.Header{Mode: "run", PID: 7, Command: []string{"train"}}
	opts.Clock = func() uint64 { return 1 << 40 }
	r, err := Create(opts)
	require.NoError(t, err)
	for _, rec := range workload(8, 4096) {
		require.NoError(t, r.Write(rec))
	}
	require.NoError(t, r.Flush())
	return r, opts.Dir
}

// assertWorkload8 checks a report.json against workload(8, 4096)'s truth.
func assertWorkload8(t *testing.T, path string) {
	t.Helper()
	rep := mustReadJSON[totalsReport](t, path)
	assert.Equal(t, uint64(8), rep.Totals.Allocations)
	assert.Equal(t, uint64(6), rep.Totals.Frees)
	assert.Equal(t, uint64(2*4096), rep.Totals.LiveBytesAtEnd)
}

// TestFinishReadsTheTraceWritten: the output directory swapped for a link
// while the recording runs (to a directory with a planted trace, or whose
// trace.vpt is a link to a secret) changes nothing: Finish reads back the
// trace it wrote and writes the outputs into the directory it opened,
// which now has another name; the link's target gets nothing.
func TestFinishReadsTheTraceWritten(t *testing.T) {
	planted, _ := mustRecord(t, Options{}, workload(40, 1<<20))
	secretDir := t.TempDir()
	secretFile := filepath.Join(t.TempDir(), "shadow")
	require.NoError(t, os.WriteFile(secretFile, []byte(secret), 0o600))
	require.NoError(t, os.Symlink(secretFile, filepath.Join(secretDir, TraceFile)))

	for _, tt := range []struct{ name, target string }{
		{"planted trace", planted},
		{"link to a secret", secretDir},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before, err := os.ReadFile(filepath.Join(tt.target, TraceFile))
			require.NoError(t, err)
			r, dir := startRecording(t, Options{})
			moved := dir + ".moved"
			require.NoError(t, os.Rename(dir, moved))
			require.NoError(t, os.Symlink(tt.target, dir))

			var summary bytes.Buffer
			require.NoError(t, r.Finish(&event.End{Reason: "exited"}, &summary, nil))
			assertWorkload8(t, filepath.Join(moved, JSONFile))
			after, err := os.ReadFile(filepath.Join(tt.target, TraceFile))
			require.NoError(t, err)
			assert.Equal(t, before, after, "the link's target is untouched")
			if tt.target == secretDir {
				assert.NoFileExists(t, filepath.Join(tt.target, JSONFile))
			}
		})
	}
}

// TestFinishRefusesLinkedSegment: a flight recorder's segment replaced in
// its directory by a link to a secret is refused with ErrInput, and the
// error quotes nothing of the secret.
func TestFinishRefusesLinkedSegment(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "shadow")
	require.NoError(t, os.WriteFile(secretFile, []byte(secret), 0o600))
	r, dir := startRecording(t, Options{MaxTrace: MinMaxTrace})
	segs, _ := filepath.Glob(filepath.Join(dir, SegmentPattern))
	require.NotEmpty(t, segs)
	require.NoError(t, os.Remove(segs[0]))
	require.NoError(t, os.Symlink(secretFile, segs[0]))

	err := r.Finish(&event.End{Reason: "exited"}, io.Discard, nil)
	require.ErrorIs(t, err, ErrInput)
	assert.NotContains(t, err.Error(), "root")
	assert.NotContains(t, err.Error(), "s3cr3t")
	got, rerr := os.ReadFile(secretFile)
	require.NoError(t, rerr)
	assert.Equal(t, secret, string(got))
}

// reportJSON runs Report on input with --format json and returns the
// report, failing the test if it does not return within a minute (a FIFO
// opened twice blocks forever).
func reportJSON(t *testing.T, o ReportOptions) []byte {
	t.Helper()
	o.Format = "json"
	var stdout bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- Report(o, &stdout, io.Discard) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("report blocked on its input")
	}
	return stdout.Bytes()
}

// pipeOf returns the path of a pipe's read end (as a shell's <(cat file)
// gives) that a goroutine fills with file's bytes.
func pipeOf(t *testing.T, file string) string {
	t.Helper()
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { _ = pr.Close() })
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	go func() {
		_, _ = pw.Write(data)
		_ = pw.Close()
	}()
	return "/proc/self/fd/" + strconv.Itoa(int(pr.Fd()))
}

// TestReportReadsAStream: `report <(cat trace.vpt)` and a FIFO are read
// once, as a stream: the report is the trace's (its truth), and a snapshot
// pickle streamed is recognized by its first bytes.
func TestReportReadsAStream(t *testing.T) {
	r, dir := startRecording(t, Options{})
	require.NoError(t, r.Finish(&event.End{Reason: "exited"}, io.Discard, nil))
	trace := filepath.Join(dir, TraceFile)

	check := func(t *testing.T, out []byte) {
		path := filepath.Join(t.TempDir(), "report.json")
		require.NoError(t, os.WriteFile(path, out, 0o644))
		assertWorkload8(t, path)
	}
	t.Run("pipe", func(t *testing.T) {
		check(t, reportJSON(t, ReportOptions{Input: pipeOf(t, trace)}))
	})
	t.Run("fifo", func(t *testing.T) {
		fifo := filepath.Join(t.TempDir(), "fifo")
		require.NoError(t, syscall.Mkfifo(fifo, 0o600))
		data, err := os.ReadFile(trace)
		require.NoError(t, err)
		go func() {
			f, err := os.OpenFile(fifo, os.O_WRONLY, 0) // waits for the reader
			if err == nil {
				_, _ = f.Write(data)
				_ = f.Close()
			}
		}()
		check(t, reportJSON(t, ReportOptions{Input: fifo}))
	})
	t.Run("snapshot pipe", func(t *testing.T) {
		// The fixture's scenario (profile/snapshot/testdata/make_fixtures.py):
		// segments A (2 MiB, before the trace), B (20 MiB) and C (2 MiB on
		// device 1, freed); the peak while C lived, 24 MiB; A and B live.
		pickle := filepath.Join("..", "..", "..", "..", "profile", "snapshot", "testdata", "current.pickle")
		var rep totalsReport
		require.NoError(t, json.Unmarshal(reportJSON(t, ReportOptions{Input: pipeOf(t, pickle)}), &rep))
		const mib = 1 << 20
		assert.Equal(t, uint64(3), rep.Totals.Allocations, "segments A, B, C")
		assert.Equal(t, uint64(1), rep.Totals.Frees, "C")
		assert.Equal(t, uint64(24*mib), rep.Totals.AllocatedBytes)
		assert.Equal(t, uint64(24*mib), rep.Totals.PeakBytes)
		assert.Equal(t, uint64(22*mib), rep.Totals.LiveBytesAtEnd, "A and B")
	})
	t.Run("snapshot format from a pipe", func(t *testing.T) {
		var stdout bytes.Buffer
		require.NoError(t, Report(ReportOptions{Input: pipeOf(t, trace), Format: "snapshot"}, &stdout, io.Discard))
		s, err := pysnapshot.Decode(&stdout)
		require.NoError(t, err)
		require.Len(t, s.Segments, 2, "the two allocations live at the end")
		assert.Equal(t, uint64(4096), s.Segments[0].TotalSize)
	})
}

// TestLoadFiguresReadsAStream: check and diff read a trace, or a
// report.json, through a pipe once, with the recording's figures:
// workload(8, 4096) allocates 8 blocks and keeps 2 of 4096 bytes.
func TestLoadFiguresReadsAStream(t *testing.T) {
	r, dir := startRecording(t, Options{})
	require.NoError(t, r.Finish(&event.End{Reason: "exited"}, io.Discard, nil))
	for _, name := range []string{TraceFile, JSONFile} {
		s, err := LoadFigures(pipeOf(t, filepath.Join(dir, name)))
		require.NoError(t, err, name)
		assert.Equal(t, uint64(8), s.Allocations, name)
		assert.Equal(t, uint64(2*4096), s.LiveEnd, name)
		assert.False(t, s.Truncated, name)
	}
}

// TestFinishClosesWhenDupFails: with no descriptor left to duplicate the
// trace for reading back, Finish fails and closes the trace and the
// output directory all the same.
func TestFinishClosesWhenDupFails(t *testing.T) {
	r, _ := startRecording(t, Options{})
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	low := lim
	low.Cur = 256
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	var fill []*os.File
	t.Cleanup(func() {
		for _, f := range fill {
			_ = f.Close()
		}
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	})
	for len(fill) < int(low.Cur) { // every descriptor below the limit taken
		f, err := os.Open(os.DevNull)
		if err != nil {
			require.ErrorIs(t, err, syscall.EMFILE)
			break
		}
		fill = append(fill, f)
	}
	err := r.Finish(&event.End{Reason: "exited"}, io.Discard, nil)
	require.ErrorIs(t, err, syscall.EMFILE)
	assert.Contains(t, err.Error(), "read trace back")
	assert.ErrorIs(t, r.file.Close(), os.ErrClosed, "the trace is closed")
	_, err = r.out.root.Stat(".")
	assert.Error(t, err, "the output directory is closed")
}
