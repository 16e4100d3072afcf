package recorder

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report"
)

// Options configures a Recorder.
type Options struct {
	// Dir is the output directory; it is created when missing.
	Dir string
	// Force overwrites an earlier recording's files in Dir (--force);
	// without it they are refused with ErrOutputExists.
	Force bool
	// Header starts the trace. Create stamps its Start (Clock), WallTime
	// and Host; the caller sets the rest (Tool, Mode, Command, PID).
	Header *event.Header
	// Clock returns the time of the records, in nanoseconds of the
	// clock the events are stamped with (CLOCK_MONOTONIC for the probes).
	// It stamps the header, the End record and the moments. Required.
	Clock func() uint64
	// MaxTrace, when not 0, bounds the trace on disk (--max-trace): the
	// flight recorder (flight.go). At least MinMaxTrace.
	MaxTrace uint64
	// MomentInterval is the rate limit of out-of-memory moment reports
	// (moment.go); 0: none but the cap.
	MomentInterval time.Duration
	// Note prints one line of progress for the user (a moment written, a
	// moment that failed); nil prints nothing.
	Note func(format string, args ...any)
	// Analysis are the options the outputs and the moments are analysed
	// with (--capacity).
	Analysis analysis.Options
	// TestLimit, when not nil, gives each pytest test's limit (check's
	// --max-peak-per-test and --limits): the outputs show it, with the
	// verdict, beside the test's peak.
	TestLimit TestLimitFunc
	// Observe, when not nil, sees every record before it is written, under
	// the recorder's lock: one call at a time, in trace order. It must not
	// call the Recorder. The live status line follows the device bytes
	// with it.
	Observe func(event.Record)
}

// Recorder writes a live recording into its output directory: the trace
// (or a flight recorder's segments), moment reports while it runs, and the
// outputs once it ends. It is a probes.Sink: Write and Flush are safe for
// concurrent use (the session's reader and the NVML sampler both write).
//
// Create it, feed it, then call Finish, or Abort to remove what it wrote.
type Recorder struct {
	dir        string
	createdDir bool
	opts       Options
	// out is the output directory, opened once (dir.go).
	out  *Dir
	file *os.File
	// mu serializes the trace between its writers, and guards moments'
	// and flight's fields.
	mu sync.Mutex
	w  *event.Writer
	// moments writes the moment reports (moment.go).
	moments *moments
	// flight keeps the trace within MaxTrace (flight.go); nil without it.
	flight *flight
}

// Create prepares the output directory, opens the trace, writes its header
// and starts taking moments (out-of-memory failures written to it, and
// SignalMoment's). On error nothing it created is left behind.
func Create(opts Options) (*Recorder, error) {
	if opts.Clock == nil {
		return nil, errors.New("recorder: no Clock")
	}
	if opts.Note == nil {
		opts.Note = func(string, ...any) {}
	}
	out, created, err := OpenDir(opts.Dir, opts.Force, RecordingFiles)
	if err != nil {
		return nil, err
	}
	r := &Recorder{dir: opts.Dir, createdDir: created, out: out, opts: opts}
	h := opts.Header
	h.Start = opts.Clock()
	h.WallTime = time.Now().UnixNano()
	h.Host, _ = os.Hostname()
	if opts.MaxTrace > 0 {
		if r.flight, err = newFlight(opts.MaxTrace); err != nil {
			r.Abort()
			return nil, err
		}
		if err := r.startFlight(h); err != nil {
			r.Abort()
			return nil, err
		}
	} else {
		r.file, err = r.out.createTrace()
		if err != nil {
			r.Abort()
			return nil, err
		}
		r.w, err = event.NewWriter(r.file, h) // it buffers; Flush writes through
		if err != nil {
			r.Abort()
			return nil, fmt.Errorf("write trace header: %w", err)
		}
	}
	r.startMoments()
	return r, nil
}

// Write appends rec to the trace: the flight recorder rotates its segments
// when one is full, and a failed out-of-memory allocation takes a moment.
func (r *Recorder) Write(rec event.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.opts.Observe != nil {
		r.opts.Observe(rec)
	}
	if fl := r.flight; fl != nil {
		fl.observe(rec)
		if err := fl.describe(r.w, rec); err != nil {
			return err
		}
	}
	if err := r.w.Write(rec); err != nil {
		return err
	}
	if r.flight != nil && r.flightFull() {
		if err := r.rotate(); err != nil {
			return fmt.Errorf("rotate trace: %w", err)
		}
	}
	if e, ok := isOOM(rec); ok {
		// A moment that cannot be taken never stops the recording: a
		// broken trace shows at the next write anyway.
		if err := r.noteOOM(e); err != nil {
			r.moments.note("oom moment: %v", err)
		}
	}
	return nil
}

// Flush writes the buffered records through to the file, so that "a crash
// loses at most the last second" holds for the bytes on disk, not only in
// our buffers.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w.Flush()
}

// Abort stops the moments and removes what the recorder created: no
// partial output is left behind as if it were whole. Nothing may be
// written any more.
func (r *Recorder) Abort() {
	r.stopMoments()
	if r.out != nil {
		_ = r.out.root.RemoveAll(MomentsDir)
	}
	if r.file != nil {
		_ = r.file.Close()
		_ = r.out.root.Remove(TraceFile)
	}
	if r.flight != nil {
		for _, name := range r.flight.kept {
			_ = r.out.root.Remove(name)
		}
	}
	if r.out != nil {
		_ = r.out.Close()
	}
	if r.createdDir {
		_ = os.Remove(r.dir) // only if empty
	}
}

// Finish ends the trace with end (stamped with the Clock unless its Time is
// set: run mode stamps the command's exit), replays it into
// the outputs and prints the summary to summary. Nothing may be written
// any more: stopped is the error of stopping the writers (the session,
// the sampler); when it is not nil, the trace is ended and stopped
// returned, without outputs.
func (r *Recorder) Finish(end *event.End, summary io.Writer, stopped error) error {
	// The moments queued are written before the trace is closed: each
	// reads its own prefix of it.
	r.stopMoments()
	if end.Time == 0 {
		end.Time = r.opts.Clock()
	}
	if err := r.w.Write(end); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	if err := r.w.Close(); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	// The analysis reads back the very file written, through a duplicate
	// of its descriptor: not whatever the directory's path, or the
	// trace's name in it, leads to now (a link put there meanwhile).
	var trace io.ReaderAt // nil: the flight recorder's segments
	if r.flight == nil && stopped == nil {
		fd, err := syscall.Dup(int(r.file.Fd()))
		if err != nil {
			_ = r.file.Close()
			_ = r.out.Close()
			return fmt.Errorf("read trace back: %w", err)
		}
		f := os.NewFile(uintptr(fd), r.file.Name())
		defer f.Close()
		trace = f
	}
	if err := r.file.Close(); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	defer r.out.Close()
	if stopped != nil {
		return stopped
	}
	r.out.path = r.dir // renamed once the command's PID was known (SetDir)
	var segments []string
	if r.flight != nil {
		segments = r.flight.kept
	}
	if err := Produce(r.out, trace, segments, summary, r.opts.Analysis, r.opts.TestLimit); err != nil {
		return err
	}
	if line := r.moments.summary(); line != "" {
		fmt.Fprintln(summary, line)
	}
	return nil
}

// SetDir records that the output directory was renamed to dir (run names
// it after the command's PID once it runs): the moment reports written
// from now on, and the summary, name it.
func (r *Recorder) SetDir(dir string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dir = dir
	r.out.path = dir
}

// Produce analyses the recording in od, writes the outputs into od and the
// summary to out. The recording is never read by its path: trace, when not
// nil, is the trace file written (read from its start), else segments are
// the flight recorder's segments in od (oldest first), read through od,
// the directory opened when the recording began, so a link put in the
// directory's place meanwhile leads nowhere (Dir). The outputs show each
// pytest test's limit that testLimit (nil: none) gives.
func Produce(od *Dir, trace io.ReaderAt, segments []string, out io.Writer, opts analysis.Options, testLimit TestLimitFunc) error {
	tests := newTestsTracker()
	res, err := od.analyze(trace, segments, opts, tests.feed(nil))
	if err != nil {
		return err // a trace we just closed cannot be cut short
	}
	if err := WriteOutputs(od, tests.report(res, testLimit)); err != nil {
		return err
	}
	dir := od.path
	if err := report.WriteSummary(out, res); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	traceName := TraceFile
	if len(segments) > 0 {
		traceName = fmt.Sprintf("%s (%d segments kept)", SegmentPattern, len(segments))
	}
	fmt.Fprintf(out, "\nwrote %s: %s, %s, %s, %s, %s\n", dir, traceName, ProfileFile, JSONFile, MarkdownFile, HTMLFile)
	fmt.Fprintf(out, "open the profile: go tool pprof -http=: %s\n", filepath.Join(dir, ProfileFile))
	return nil
}

// DefaultDir is the default output directory, ./vramprof-<pid>-<time>.
func DefaultDir(pid int) string {
	return fmt.Sprintf("vramprof-%d-%s", pid, time.Now().Format("20060102-150405"))
}
