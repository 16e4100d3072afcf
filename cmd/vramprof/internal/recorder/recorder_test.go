package recorder

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

// mustRecord records recs into a new recorder with opts (its Dir, Header
// and Clock filled in when empty) and finishes it; it returns the
// directory and the summary printed.
func mustRecord(tb testing.TB, opts Options, recs []event.Record) (string, string) {
	tb.Helper()
	if opts.Dir == "" {
		opts.Dir = filepath.Join(tb.TempDir(), "out")
	}
	if opts.Header == nil {
		opts.Header = &event.Header{Mode: "run", PID: 7, Command: []string{"train"}}
	}
	if opts.Clock == nil {
		opts.Clock = func() uint64 { return 1 << 40 } // after every event
	}
	r, err := Create(opts)
	require.NoError(tb, err)
	for _, rec := range recs {
		require.NoError(tb, r.Write(rec))
	}
	require.NoError(tb, r.Flush())
	var summary bytes.Buffer
	require.NoError(tb, r.Finish(&event.End{Reason: "exited"}, &summary, nil))
	return opts.Dir, summary.String()
}

// TestRecorder: a recording writes the trace and every output, and the
// report's totals are the stream's own.
func TestRecorder(t *testing.T) {
	const n, size = 40, 1 << 20
	var observed int
	dir, summary := mustRecord(t, Options{Observe: func(event.Record) { observed++ }}, workload(n, size))
	recs := workload(n, size)
	assert.Equal(t, len(recs), observed, "Observe sees every record written")

	for _, name := range []string{TraceFile, ProfileFile, JSONFile, MarkdownFile, HTMLFile} {
		assert.FileExists(t, filepath.Join(dir, name))
	}
	rep := mustReadJSON[totalsReport](t, filepath.Join(dir, JSONFile))
	assert.Equal(t, uint64(n), rep.Totals.Allocations)
	assert.Equal(t, uint64(n-n/4), rep.Totals.Frees)
	assert.Equal(t, uint64(n*size), rep.Totals.AllocatedBytes)
	assert.Equal(t, uint64(n/4*size), rep.Totals.LiveBytesAtEnd)
	assert.Equal(t, uint64(n/4*size), rep.Totals.PeakBytes, "the blocks kept: before the last one, 9 kept and one allocated before its free")
	assert.Contains(t, summary, "wrote "+dir+": "+TraceFile+", "+ProfileFile)

	// The replay of the trace gives the same figures: report -o is the
	// live run's outputs again.
	res, err := Analyze(filepath.Join(dir, TraceFile), analysis.Options{})
	require.NoError(t, err)
	assert.Equal(t, uint64(n/4*size), res.Totals.LiveBytesAtEnd)
}

// TestRecorderRefusesEarlier: a directory holding a recording is refused
// without Force and replaced with it.
func TestRecorderRefusesEarlier(t *testing.T) {
	dir, _ := mustRecord(t, Options{}, workload(4, 4096))
	_, err := Create(Options{Dir: dir, Header: &event.Header{}, Clock: newClock()})
	require.ErrorIs(t, err, ErrOutputExists)
	dir2, _ := mustRecord(t, Options{Dir: dir, Force: true}, workload(8, 4096))
	rep := mustReadJSON[totalsReport](t, filepath.Join(dir2, JSONFile))
	assert.Equal(t, uint64(8), rep.Totals.Allocations, "the new recording's")
}

// TestRecorderAbort: an aborted recording leaves nothing behind, not even
// the directory it created.
func TestRecorderAbort(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	r, err := Create(Options{Dir: dir, Header: &event.Header{}, Clock: newClock()})
	require.NoError(t, err)
	require.NoError(t, r.Write(alloc(10, 0x1000, 64)))
	r.Abort()
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestFlightRecorder: with MaxTrace, the trace is a ring of segments within
// the budget (plus the segment being written), and their replay restores
// what the dropped ones held: the same live bytes at the end as the whole
// stream, and only the events kept counted as allocations.
func TestFlightRecorder(t *testing.T) {
	const n, size = 6000, 1 << 16
	dir, summary := mustRecord(t, Options{MaxTrace: MinMaxTrace}, workload(n, size))
	_, err := os.Stat(filepath.Join(dir, TraceFile))
	require.ErrorIs(t, err, os.ErrNotExist, "segments instead of trace.vpt")
	segs := SegmentsOf(filepath.Join(dir, TraceFile))
	require.Greater(t, len(segs), 1)
	var total int64
	for _, s := range segs[:len(segs)-1] {
		st, err := os.Stat(s)
		require.NoError(t, err)
		total += st.Size()
	}
	assert.LessOrEqual(t, total, int64(MinMaxTrace), "the segments before the last within the budget")
	first := filepath.Base(segs[0])
	assert.NotEqual(t, "trace-000001.vpt", first, "the oldest segments were dropped")
	assert.Contains(t, summary, SegmentPattern)

	rep := mustReadJSON[totalsReport](t, filepath.Join(dir, JSONFile))
	assert.Equal(t, uint64(n/4*size), rep.Totals.LiveBytesAtEnd, "restored from the checkpoint")
	assert.Equal(t, "exited", rep.Run.EndReason)
}

// TestAnalyzeTruncated: a trace without its End record (the recorder was
// killed) is analysed whole and reported cut short.
func TestAnalyzeTruncated(t *testing.T) {
	path := filepath.Join(t.TempDir(), TraceFile)
	f, err := os.Create(path)
	require.NoError(t, err)
	w, err := event.NewWriter(f, &event.Header{Mode: "run", PID: 7, Start: 1})
	require.NoError(t, err)
	for _, rec := range workload(8, 4096) {
		require.NoError(t, w.Write(rec))
	}
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())
	res, err := Analyze(path, analysis.Options{})
	require.ErrorIs(t, err, ErrTruncated)
	require.NotNil(t, res)
	assert.Equal(t, uint64(2*4096), res.Totals.LiveBytesAtEnd)

	_, err = Analyze(filepath.Join(t.TempDir(), "missing.vpt"), analysis.Options{})
	require.ErrorIs(t, err, ErrInput)
}

// TestAnalyzeCutInsideRecord: a trace cut inside a record (here an event
// block) is analysed up to the record before the cut, and the error says
// where the cut record began, how many whole records came before it and
// how many bytes of it were dropped: all three from what was written.
func TestAnalyzeCutInsideRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), TraceFile)
	f, err := os.Create(path)
	require.NoError(t, err)
	w, err := event.NewWriter(f, &event.Header{Mode: "run", PID: 7, Start: 1})
	require.NoError(t, err)
	recs := workload(8, 4096) // a stack, then events
	const whole = 6           // the stack and five events, then a flush
	var boundary int64        // where the flush left the file
	for i, rec := range recs {
		require.NoError(t, w.Write(rec))
		if i == whole-1 {
			require.NoError(t, w.Flush())
			st, err := f.Stat()
			require.NoError(t, err)
			boundary = st.Size()
		}
	}
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Greater(t, int64(len(data)), boundary+10, "the rest is a later block")
	const dropped = 5
	require.NoError(t, os.WriteFile(path, data[:boundary+dropped], 0o644))

	_, err = Analyze(path, analysis.Options{})
	require.ErrorIs(t, err, ErrTruncated)
	assert.Contains(t, err.Error(), fmt.Sprintf("ends inside a record at byte %d, after %d whole records (the %d bytes after them dropped)",
		boundary, whole, dropped))
}

// TestReport: Report prints the format asked for, writes the outputs with
// Out, and refuses a --pid the recording has no events of as a usage
// error.
func TestReport(t *testing.T) {
	dir, _ := mustRecord(t, Options{}, workload(8, 4096))
	var stdout, stderr bytes.Buffer
	require.NoError(t, Report(ReportOptions{Input: dir, Format: "json"}, &stdout, &stderr))
	assert.Contains(t, stdout.String(), `"live_bytes_at_end": 8192`)

	out := filepath.Join(t.TempDir(), "again")
	stdout.Reset()
	require.NoError(t, Report(ReportOptions{Input: filepath.Join(dir, TraceFile), Out: out, Format: "text"}, &stdout, &stderr))
	for _, name := range []string{ProfileFile, JSONFile, MarkdownFile, HTMLFile} {
		assert.FileExists(t, filepath.Join(out, name))
	}
	_, err := os.Stat(filepath.Join(out, TraceFile))
	require.ErrorIs(t, err, os.ErrNotExist, "report writes no trace")

	err = Report(ReportOptions{Input: dir, Format: "snapshot", PID: 99, PIDSet: true}, &stdout, &stderr)
	require.ErrorIs(t, err, ErrUsage)
	assert.Contains(t, err.Error(), "--pid 99 has no device events")
	assert.Contains(t, err.Error(), "processes with device events: 7")
}
