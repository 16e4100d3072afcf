package recorder

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

// mustRecording is a recorder without a session: a trace in a new output
// directory, fed by the test. Its moments are stopped at cleanup.
func mustRecording(tb testing.TB, interval time.Duration) (*Recorder, *Recorder) {
	tb.Helper()
	r, err := Create(Options{Dir: filepath.Join(tb.TempDir(), "out"), Header: &event.Header{Mode: "run", PID: 7},
		Clock: newClock(), MomentInterval: interval})
	require.NoError(tb, err)
	tb.Cleanup(func() {
		r.stopMoments()
		_ = r.file.Close()
		_ = r.out.Close()
	})
	return r, r
}

// momentReport is the part of a moment's report.json these tests read.
type momentReport struct {
	Totals struct {
		LiveBytesAtEnd    *uint64 `json:"live_bytes_at_end"`
		FailedAllocations *uint64 `json:"failed_allocations"`
	} `json:"totals"`
	Run struct {
		Moment *struct {
			Request *struct {
				Bytes uint64 `json:"bytes"`
			} `json:"request"`
		} `json:"moment"`
	} `json:"run"`
}

// oomEvent is a cudaMalloc of size failing with out-of-memory at t.
func oomEvent(t, size uint64) *event.Event {
	return &event.Event{Time: t, Size: size, PID: 7, TID: 7, Ret: 2, Kind: event.KindAlloc,
		Layer: event.LayerSegment, API: event.APICudaMalloc}
}

// TestMomentRule: the first out-of-memory failure gets a moment; within the
// interval none does; a nested failure, a failure of another kind and a
// pinned host failure never do; at most maxOOMMoments in all; the rest are
// counted.
func TestMomentRule(t *testing.T) {
	t.Run("interval", func(t *testing.T) {
		r, sink := mustRecording(t, time.Hour)
		require.NoError(t, sink.Write(&event.Event{Time: 10, Size: 64, Addr: 0x1000, PID: 7, TID: 7, Kind: event.KindAlloc,
			Layer: event.LayerSegment, API: event.APICudaMalloc}))
		nested := oomEvent(20, 1<<30)
		nested.Flags = event.FlagNested
		require.NoError(t, sink.Write(nested))
		other := oomEvent(21, 1<<30)
		other.Ret = 1 // cudaErrorInvalidValue: a failed call, no OOM
		require.NoError(t, sink.Write(other))
		host := oomEvent(22, 1<<30)
		host.Kind = event.KindHostAlloc
		require.NoError(t, sink.Write(host))
		for i := range 5 {
			require.NoError(t, sink.Write(oomEvent(uint64(30+i), 1<<30)))
		}
		r.stopMoments()
		m := r.moments
		require.Len(t, m.written, 1)
		assert.Regexp(t, `^oom-1-[0-9]{8}-[0-9]{6}$`, filepath.Base(m.written[0]))
		assert.Equal(t, uint64(4), m.skippedTotal)
		assert.Equal(t, uint64(4), m.skipped, "all after the last one")
		assert.Contains(t, m.summary(), "; 4 out-of-memory failures had no moment of their own (at most one per 1h0m0s, 10 in all), 4 of them after the last one")

		// The moment's report: the trace up to the first OOM event.
		rep := mustReadJSON[momentReport](t, filepath.Join(m.written[0], "report.json"))
		require.NotNil(t, rep.Run.Moment)
		assert.Equal(t, uint64(1<<30), rep.Run.Moment.Request.Bytes)
		assert.Equal(t, uint64(64), *rep.Totals.LiveBytesAtEnd)
		assert.Equal(t, uint64(2), *rep.Totals.FailedAllocations, "the invalid value before it, and it (a nested call is in the books, pinned host its own space)")
	})
	t.Run("cap", func(t *testing.T) {
		r, sink := mustRecording(t, 0)
		for i := range maxOOMMoments + 5 {
			require.NoError(t, sink.Write(oomEvent(uint64(10+i), 1<<30)))
			if i < maxOOMMoments {
				// Let the worker keep up: the queue holds momentQueue.
				require.Eventually(t, func() bool {
					r.mu.Lock()
					defer r.mu.Unlock()
					return len(r.moments.queue) == 0
				}, 10*time.Second, time.Millisecond)
			}
		}
		r.stopMoments()
		m := r.moments
		require.Len(t, m.written, maxOOMMoments)
		assert.Equal(t, uint64(5), m.skippedTotal)
		ents, err := os.ReadDir(filepath.Join(r.dir, MomentsDir))
		require.NoError(t, err)
		assert.Len(t, ents, maxOOMMoments)
	})
	t.Run("queue full", func(t *testing.T) {
		r, sink := mustRecording(t, 0)
		require.NoError(t, sink.Write(oomEvent(10, 1<<30))) // moment 1
		// A worker slow to write: parked on a request whose trace is a
		// pipe nobody writes (it takes requests without the lock, so it
		// must be busy, not only locked out), then the queue filled.
		// With the queue full, the next OOM is skipped and counted, a
		// SIGUSR1 refused.
		pr, pw, err := os.Pipe()
		require.NoError(t, err)
		r.mu.Lock()
		r.moments.queue <- momentRequest{kind: "usr1", index: 98, traceBytes: 1, segments: []*os.File{pr}}
		r.mu.Unlock()
		require.Eventually(t, func() bool { return len(r.moments.queue) == 0 }, 10*time.Second, time.Millisecond,
			"the worker takes moment 1, then the parking request")
		r.mu.Lock()
		for len(r.moments.queue) < cap(r.moments.queue) {
			r.moments.queue <- momentRequest{kind: "usr1", index: 99, traceBytes: -1}
		}
		require.NoError(t, r.noteOOM(oomEvent(11, 1<<30)))
		err = r.takeMoment("usr1", nil)
		skipped, oomN := r.moments.skippedTotal, r.moments.oomN
		r.mu.Unlock()
		require.NoError(t, pw.Close()) // the parked request ends (an empty trace)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "earlier moments are still being written")
		assert.Equal(t, uint64(1), skipped, "the OOM that found the queue full")
		assert.Equal(t, 1, oomN)
	})
}

// TestSignalMoment: SignalMoment (what the command line calls on SIGUSR1)
// writes the trace so far as a moment of its own kind, numbered from 1,
// without a rate limit; once the moments are stopped it takes none.
func TestSignalMoment(t *testing.T) {
	r, sink := mustRecording(t, time.Hour)
	require.NoError(t, sink.Write(alloc(10, 0x1000, 3<<20)))
	require.NoError(t, r.SignalMoment())
	require.NoError(t, sink.Write(alloc(20, 0x2000, 1<<20)))
	require.NoError(t, r.SignalMoment())
	r.stopMoments()
	require.NoError(t, r.SignalMoment(), "after the end: nothing, no error")

	require.Len(t, r.moments.written, 2)
	for i, want := range []uint64{3 << 20, 4 << 20} { // the bytes live at each moment
		dir := r.moments.written[i]
		assert.Regexp(t, `^`+analysis.MomentSignal+`-`+strconv.Itoa(i+1)+`-`, filepath.Base(dir))
		rep := mustReadJSON[momentReport](t, filepath.Join(dir, JSONFile))
		require.NotNil(t, rep.Totals.LiveBytesAtEnd)
		assert.Equal(t, want, *rep.Totals.LiveBytesAtEnd)
	}
}
