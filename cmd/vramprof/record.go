//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/nvml"
	"github.com/vramprof/vramprof/report"
)

// recording is a live session writing its trace into an output directory.
// It owns the session, the trace file and its writer; finish (or abort)
// releases them.
type recording struct {
	dir        string
	createdDir bool
	// out is the output directory, opened once (outputs.go).
	out  *outputDir
	file *os.File
	// mu serializes the trace between the session's reader and the NVML
	// sampler, the two goroutines that write to it.
	mu      sync.Mutex
	w       *event.Writer
	session *probes.Session
	// nvml samples device memory beside the probes; nil when off or
	// unavailable. nvmlDone is closed when its goroutine has returned.
	nvml     *nvml.Sampler
	stopNVML context.CancelFunc
	nvmlDone chan struct{}
	// started is when recording began, for the status line's clock.
	started time.Time
	// live follows live device bytes for the status line (status.go); nil
	// when no status is shown.
	live *liveBytes
	// analysis are the options the outputs are analysed with (--capacity).
	analysis analysis.Options
	// moments writes the moment reports (moment.go); nil until
	// startMoments. Guarded by mu.
	moments *moments
	// flight keeps the trace within --max-trace (flight.go); nil without
	// it. Guarded by mu.
	flight *flight
}

// startRecording prepares dir, opens its trace and loads the probes.
// opts configures the session; its Sink is the trace. nvmlMode is the
// --nvml flag: "auto" samples device memory when NVML works, "off" never.
// withStatus feeds the live status line (startStatus) from the records.
// maxTrace, when not 0, bounds the trace on disk (--max-trace, flight.go).
func startRecording(dir string, force bool, h *event.Header, opts probes.Options, nvmlMode string, withStatus bool, maxTrace uint64) (*recording, error) {
	// Privilege first: without it, nothing else matters, and it is the
	// error worth reading.
	if err := probes.CheckPrivileges(); err != nil {
		return nil, err
	}
	out, created, err := ensureDir(dir, force, recordingFiles)
	if err != nil {
		return nil, err
	}
	r := &recording{dir: dir, createdDir: created, out: out, started: time.Now()}
	if withStatus {
		r.live = newLiveBytes()
	}
	h.Tool = "vramprof " + version
	h.Start = probes.MonotonicNow()
	h.WallTime = time.Now().UnixNano()
	h.Host, _ = os.Hostname()
	if maxTrace > 0 {
		r.flight = newFlight(maxTrace)
		if err := r.startFlight(h); err != nil {
			r.abort()
			return nil, err
		}
	} else {
		r.file, err = r.out.createTrace()
		if err != nil {
			r.abort()
			return nil, err
		}
		r.w, err = event.NewWriter(r.file, h) // it buffers; Flush writes through
		if err != nil {
			r.abort()
			return nil, fmt.Errorf("write trace header: %w", err)
		}
	}
	opts.Sink = traceSink{r}
	r.session, err = probes.NewSession(opts)
	if err != nil {
		r.abort()
		return nil, err
	}
	if err := r.startNVML(nvmlMode); err != nil {
		r.abort()
		return nil, fmt.Errorf("write trace: %w", err)
	}
	return r, nil
}

// traceSink flushes through to the file, so that "a crash loses at most the
// last second" holds for the bytes on disk, not only in our buffers.
type traceSink struct{ r *recording }

func (s traceSink) Write(rec event.Record) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if s.r.live != nil {
		s.r.live.observe(rec)
	}
	if fl := s.r.flight; fl != nil {
		fl.observe(rec)
	}
	if err := s.r.w.Write(rec); err != nil {
		return err
	}
	if s.r.flight != nil && s.r.flightFull() {
		if err := s.r.rotate(); err != nil {
			return fmt.Errorf("rotate trace: %w", err)
		}
	}
	if e, ok := isOOM(rec); ok {
		// A moment that cannot be taken never stops the recording: a
		// broken trace shows at the next write anyway.
		if err := s.r.noteOOM(e); err != nil {
			s.r.moments.note("oom moment: %v", err)
		}
	}
	return nil
}

func (s traceSink) Flush() error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	return s.r.w.Flush()
}

// startNVML starts sampling device memory into the trace (--nvml auto). No
// library, no driver or no device is not an error: the trace records why
// NVML is unavailable, the report says so in one line, and everything else
// works.
func (r *recording) startNVML(mode string) error {
	if mode == "off" {
		return nil
	}
	sink := traceSink{r}
	s, err := nvml.Open(nvml.Options{})
	if err != nil {
		return sink.Write(nvml.Status(probes.MonotonicNow(), err))
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.nvml, r.stopNVML, r.nvmlDone = s, cancel, make(chan struct{})
	go func() {
		defer close(r.nvmlDone)
		s.Run(ctx, nvml.DefaultInterval, func(rec event.Record) { _ = sink.Write(rec) })
	}()
	return nil
}

// closeNVML stops the sampler and waits for its last record.
func (r *recording) closeNVML() error {
	if r.nvml == nil {
		return nil
	}
	r.stopNVML()
	<-r.nvmlDone
	err := r.nvml.Close()
	r.nvml = nil
	return err
}

// abort releases everything and removes what was created: no partial
// output is left behind as if it were whole.
func (r *recording) abort() {
	_ = r.closeNVML()
	if r.session != nil {
		_ = r.session.Close()
	}
	r.stopMoments()
	if r.out != nil {
		_ = r.out.root.RemoveAll(momentsDir)
	}
	if r.file != nil {
		_ = r.file.Close()
		_ = r.out.root.Remove(traceFile)
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

// finish closes the session, ends the trace, replays it into the outputs and
// prints the summary to out.
func (r *recording) finish(end *event.End, out io.Writer) error {
	closeErr := errors.Join(r.closeNVML(), r.session.Close())
	// The moments queued are written before the trace is closed: each
	// reads its own prefix of it.
	r.stopMoments()
	end.Time = probes.MonotonicNow()
	if err := r.w.Write(end); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	if err := r.w.Close(); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	if err := r.file.Close(); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	defer r.out.Close()
	if closeErr != nil {
		return closeErr
	}
	r.out.path = r.dir // renamed once the command's PID was known (run.go)
	if err := produce(r.out, filepath.Join(r.dir, traceFile), out, r.analysis); err != nil {
		return err
	}
	if line := r.moments.summary(); line != "" {
		fmt.Fprintln(out, line)
	}
	return nil
}

// setDir records that the output directory was renamed to dir: the
// moment reports written from now on name it.
func (r *recording) setDir(dir string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dir = dir
	r.out.path = dir
}

// produce analyses a trace, writes the outputs into od and the summary to
// out.
func produce(od *outputDir, tracePath string, out io.Writer, opts analysis.Options) error {
	res, err := analyze(tracePath, opts)
	if err != nil {
		return err // a trace we just closed cannot be cut short
	}
	if err := writeOutputs(od, res); err != nil {
		return err
	}
	dir := od.path
	if err := report.WriteSummary(out, res); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	trace := traceFile
	if segs := segmentsOf(tracePath); len(segs) > 0 {
		trace = fmt.Sprintf("%s (%d segments kept)", segmentPattern, len(segs))
	}
	fmt.Fprintf(out, "\nwrote %s: %s, %s, %s, %s, %s\n", dir, trace, profileFile, jsonFile, mdFile, htmlFile)
	fmt.Fprintf(out, "open the profile: go tool pprof -http=: %s\n", filepath.Join(dir, profileFile))
	return nil
}

// defaultDir is the default output directory, ./vramprof-<pid>-<time>.
func defaultDir(pid int) string {
	return fmt.Sprintf("vramprof-%d-%s", pid, time.Now().Format("20060102-150405"))
}

// runUntil runs the session until ctx is done or every target exited.
func (r *recording) run(ctx context.Context) error {
	return r.session.Run(ctx)
}
