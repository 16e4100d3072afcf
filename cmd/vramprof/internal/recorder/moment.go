package recorder

// Moment reports: the full outputs of a recording at the moment it matters,
// written while the recording goes on. A run that dies of out-of-memory
// hours in wants the picture at the failure, not only at the end, and a
// user watching a long run wants one on demand (SIGUSR1, which the command
// line turns into a call of Recorder.SignalMoment).
//
// How: at a moment, the trace sink (under the recording's lock, so between
// two records) flushes the trace to the file and notes its length. A worker
// goroutine later reads that prefix of trace.vpt (a trace cut at a record
// boundary reads whole), closes it with an End record of its own (never
// written to the trace) and writes the outputs into
// DIR/moments/<kind>-<n>-<time>/. The reader never waits for the analysis:
// a moment costs the sink one flush, and a moment that finds the worker's
// queue full is skipped and counted, never waited for.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report"
)

// The rate limit of out-of-memory moments. A training loop that catches the
// OOM and retries, or a caching allocator that frees its cache and asks
// again, fails many times a second: the first failure gets a moment, later
// ones get one only when the interval (--moment-interval, default
// defaultMomentInterval) has passed since the last oom moment, and never
// more than maxOOMMoments in a recording. The failures left without one are
// counted, and the count is carried in the next moment report
// (run.moment.skipped_ooms) and in the summary at exit. SIGUSR1 moments are
// the user's: not limited, but one waits for the queue like any other.
const (
	// maxOOMMoments bounds the disk a recording's oom moments take
	// whatever the interval: about 10 times the main outputs.
	maxOOMMoments = 10
	// momentQueue is how many moments may wait for the worker; one more is
	// skipped (an OOM) or refused with a note (SIGUSR1). Each costs an
	// analysis of the trace so far: a deep queue would only delay the
	// final outputs.
	momentQueue = 4
)

// momentRequest is one moment, taken by the sink and written by the worker.
type momentRequest struct {
	kind  string // analysis.MomentOOM or analysis.MomentSignal
	index int
	// traceBytes is the length of the trace at the moment, a record
	// boundary: the report covers exactly those bytes.
	traceBytes int64
	time       uint64 // Options.Clock at the moment
	request    *event.Event
	skipped    uint64
	// segments are a flight recorder's segments kept at the moment,
	// opened then (flight.go), oldest first: traceBytes is the last one's
	// length. nil without --max-trace.
	segments []*os.File
}

// moments takes and writes the moment reports of a recording. Its fields
// but the worker's are guarded by Recorder.mu.
type moments struct {
	interval time.Duration
	// note prints one line for the user (stderr, or nothing with -q).
	note func(format string, args ...any)

	queue   chan momentRequest
	closed  bool
	oomN    int       // oom moments taken
	usr1N   int       // SIGUSR1 moments taken
	lastOOM time.Time // when the last oom moment was taken
	skipped uint64    // OOMs without a moment since the last oom moment
	// skippedTotal counts every OOM without a moment of its own.
	skippedTotal uint64

	wg sync.WaitGroup // the worker

	// written lists the moment directories written (the worker's alone
	// until wg is done).
	written []string
}

// startMoments turns moment reports on: OOM moments from the sink, signal
// moments from SignalMoment, until Finish or Abort. Options.MomentInterval
// is the rate limit; Options.Note prints progress lines.
func (r *Recorder) startMoments() {
	m := &moments{interval: r.opts.MomentInterval, note: r.opts.Note, queue: make(chan momentRequest, momentQueue)}
	r.mu.Lock()
	r.moments = m
	r.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for req := range m.queue {
			dir, err := r.writeMoment(req)
			if err != nil {
				m.note("%s moment %d: %v", req.kind, req.index, err)
				continue
			}
			m.written = append(m.written, dir)
			m.note("%s: wrote %s", momentReason(req.kind), dir)
		}
	}()
}

// SignalMoment takes a moment report on the user's request (SIGUSR1):
// the trace so far, written under DIR/moments like an out-of-memory one,
// without a rate limit. It returns an error when earlier moments are still
// waiting to be written; after Finish or Abort it does nothing. Safe for
// concurrent use with Write.
func (r *Recorder) SignalMoment() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.takeMoment(analysis.MomentSignal, nil)
}

// stopMoments stops taking moments and waits for the ones queued to be
// written. The sink must not be written to any more (the session and the
// sampler are closed).
func (r *Recorder) stopMoments() {
	r.mu.Lock()
	m := r.moments
	if m == nil || m.closed {
		r.mu.Unlock()
		return
	}
	m.closed = true
	close(m.queue)
	r.mu.Unlock()
	m.wg.Wait()
}

// isOOM reports whether rec is an allocation of device memory that failed
// because the memory ran out. A call nested in another traced call (the
// driver under the runtime) is left to the outer call, which fails next:
// the moment is taken once the request the program made has failed.
func isOOM(rec event.Record) (*event.Event, bool) {
	e, ok := rec.(*event.Event)
	if !ok || e.OK() || e.Flags&event.FlagNested != 0 || e.Layer != event.LayerSegment {
		return nil, false
	}
	switch e.Kind {
	case event.KindAlloc, event.KindCreate:
		return e, analysis.IsOutOfMemory(e.Ret)
	}
	return nil, false
}

// noteOOM applies the rate limit to a failed allocation just written to the
// trace, and takes an oom moment when it allows one. r.mu is held.
func (r *Recorder) noteOOM(e *event.Event) error {
	m := r.moments
	if m == nil || m.closed {
		return nil
	}
	now := time.Now()
	if m.oomN >= maxOOMMoments || m.oomN > 0 && now.Sub(m.lastOOM) < m.interval {
		m.skipped++
		m.skippedTotal++
		return nil
	}
	req := *e
	return r.takeMoment(analysis.MomentOOM, &req)
}

// takeMoment flushes the trace and queues a moment of it. r.mu is held, so
// the trace ends at a record boundary.
func (r *Recorder) takeMoment(kind string, request *event.Event) error {
	m := r.moments
	if m == nil || m.closed {
		return nil
	}
	if len(m.queue) == cap(m.queue) {
		if kind == analysis.MomentOOM {
			m.skipped++
			m.skippedTotal++
			return nil
		}
		return errors.New("earlier moments are still being written; try again later")
	}
	if err := r.w.Flush(); err != nil {
		return err
	}
	n, err := r.file.Seek(0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("trace length: %w", err)
	}
	req := momentRequest{kind: kind, traceBytes: n, time: r.opts.Clock(), request: request}
	if r.flight != nil {
		if req.segments, err = r.openSegments(); err != nil {
			return err
		}
	}
	if kind == analysis.MomentOOM {
		m.oomN++
		m.lastOOM = time.Now()
		req.index = m.oomN
		req.skipped, m.skipped = m.skipped, 0
	} else {
		m.usr1N++
		req.index = m.usr1N
		req.skipped = m.skipped
	}
	m.queue <- req // room checked above; only this lock's holder sends
	return nil
}

// momentReason is the End reason of a moment report of kind.
func momentReason(kind string) string {
	if kind == analysis.MomentOOM {
		return analysis.MomentOOMReason
	}
	return analysis.MomentSignalReason
}

// momentTimeLayout is the time in a moment report's directory name: local
// time to the second, sorting as it reads.
const momentTimeLayout = "20060102-150405"

// MomentName is the name of a moment report's directory under MomentsDir:
// "<kind>-<n>-<time>" (oom-1-20260101-120000), kind analysis.MomentOOM or
// analysis.MomentSignal, n counted per kind from 1.
func MomentName(kind, n, time string) string {
	return kind + "-" + n + "-" + time
}

// writeMoment analyses the trace up to req and writes the outputs into a
// new directory under DIR/moments; it returns that directory's path.
func (r *Recorder) writeMoment(req momentRequest) (string, error) {
	rep, err := r.analyzeMoment(req)
	if err != nil {
		return "", err
	}
	name := MomentName(req.kind, strconv.Itoa(req.index), time.Now().Format(momentTimeLayout))
	r.mu.Lock() // r.out.path changes when run renames the directory
	od, err := r.out.Subdir(MomentsDir, name)
	r.mu.Unlock()
	if err != nil {
		return "", err
	}
	defer od.Close()
	if err := WriteOutputs(od, rep); err != nil {
		return "", err
	}
	return od.path, nil
}

// analyzeMoment reads the trace up to the moment req, which the recording
// goes on appending to, and closes it at the moment: the first
// req.traceBytes of trace.vpt, or a flight recorder's segments kept at the
// moment, the last one up to req.traceBytes; with its pytest tests.
func (r *Recorder) analyzeMoment(req momentRequest) (*report.Report, error) {
	name, segs, names := "trace", []io.Reader(nil), []string{TraceFile}
	if req.segments != nil {
		defer closeAll(req.segments)
		name = "trace segments"
		segs, names = make([]io.Reader, len(req.segments)), make([]string, len(req.segments))
		for i, f := range req.segments {
			segs[i], names[i] = f, f.Name()
		}
	} else {
		f, err := r.out.root.Open(TraceFile)
		if err != nil {
			return nil, fmt.Errorf("open trace: %w", err)
		}
		defer f.Close()
		segs = []io.Reader{f}
	}
	last := len(segs) - 1
	segs[last] = io.LimitReader(segs[last], req.traceBytes)
	a := analysis.New(r.opts.Analysis)
	tests := newTestsTracker()
	rr, err := replaySegmentsTo(tests.feed(a.Add), name, segs, names)
	if err != nil {
		return nil, err
	}
	if rr.truncated {
		// The prefix ends where a flush did: never inside a record.
		if req.segments != nil {
			return nil, fmt.Errorf("read trace: the first %d bytes of the last segment end inside a record", req.traceBytes)
		}
		return nil, fmt.Errorf("read trace: the first %d bytes end inside a record", req.traceBytes)
	}
	res, err := r.finishMoment(a, req)
	if err != nil {
		return nil, err
	}
	return tests.report(res, r.opts.TestLimit), nil
}

// finishMoment closes an analysis at the moment req.
func (r *Recorder) finishMoment(a *analysis.Analyzer, req momentRequest) (*analysis.Result, error) {
	if err := a.Add(&event.End{Time: req.time, Reason: momentReason(req.kind)}); err != nil {
		return nil, fmt.Errorf("analyze trace: %w", err)
	}
	res := a.Finish()
	res.Run.Moment = &analysis.Moment{Kind: req.kind, Index: req.index, Time: req.time, Request: req.request,
		SkippedOOMs: req.skipped, TraceBytes: uint64(req.traceBytes)}
	return res, nil
}

// summary says, at exit, which moment reports were written and how many
// OOMs had none; "" when there were no moments. stopMoments has returned.
func (m *moments) summary() string {
	if m == nil || len(m.written) == 0 && m.skippedTotal == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "moment reports: %d", len(m.written))
	if len(m.written) > 0 {
		names := make([]string, len(m.written))
		for i, d := range m.written {
			names[i] = filepath.Base(d)
		}
		fmt.Fprintf(&b, " in %s (%s)", filepath.Dir(m.written[0]), strings.Join(names, ", "))
	}
	if m.skippedTotal > 0 {
		fmt.Fprintf(&b, "; %d out-of-memory failures had no moment of their own (at most one per %s, %d in all), %d of them after the last one",
			m.skippedTotal, m.interval, maxOOMMoments, m.skipped)
	}
	return b.String()
}
