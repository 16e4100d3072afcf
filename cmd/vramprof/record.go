//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/cmd/vramprof/internal/recorder"
	"github.com/vramprof/vramprof/probes"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/nvml"
	"github.com/vramprof/vramprof/report/status"
)

// recording is a live session feeding a recorder.Recorder: the probes'
// session and the NVML sampler write into it; finish (or abort) releases
// them.
type recording struct {
	rec     *recorder.Recorder
	session *probes.Session
	// stopNVML stops the NVML sampler (startNVML); nil until started.
	stopNVML func() error
	// started is when recording began, for the status line's clock.
	started time.Time
	// live follows live device bytes for the status line (report/status); nil
	// with -q, when no status is shown.
	live *status.Live
	// out receives the banner and the summary: stderr, or nothing with -q.
	out io.Writer
	// stopUSR1 stops taking moments on SIGUSR1 (momentsOnSIGUSR1); nil
	// until started.
	stopUSR1 func()
}

// The depth flag's bound is the probes' limit.
var _ = [1]struct{}{}[maxPythonDepth-probes.DefaultPythonDepth]

// options returns the probes' options of the flags (check sets allocs);
// note, when not nil, receives the probes' notes.
func (p *probeFlags) options(all bool, note func(string)) probes.Options {
	return probes.Options{All: all, NoPool: p.Pool == "off", Allocators: p.allocs,
		NoPython: p.Python.Mode == "off", PythonDepth: p.Python.Depth, Note: note}
}

// printNote prints a note as "vramprof: <note>" on stderr; it is nil with
// -q, and drops the note.
func printNote(quiet bool) func(string) {
	if quiet {
		return nil
	}
	return func(msg string) { fmt.Fprintf(os.Stderr, "vramprof: %s\n", msg) }
}

// startRecording checks privileges, creates the recorder (output directory
// dir, trace starting with h) with l's and r's settings, and loads the
// probes (opts) into a session writing to it, NVML sampling beside them.
func startRecording(dir string, h *event.Header, l *liveFlags, r *recordFlags, opts probes.Options) (*recording, error) {
	// Privilege first: without it, nothing else matters, and it is the
	// error worth reading.
	if err := probes.CheckPrivileges(); err != nil {
		return nil, err
	}
	rec := &recording{started: time.Now(), out: os.Stderr}
	ro := recorder.Options{Dir: dir, Force: l.Force, Header: h, Clock: probes.MonotonicNow, MaxTrace: l.maxTrace,
		MomentInterval: l.MomentInterval, Analysis: analysis.Options{Capacity: r.capacity}, TestLimit: r.testLimit}
	note := func(string, ...any) {}
	if r.Quiet {
		rec.out = io.Discard
	} else {
		note = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "vramprof: "+format+"\n", args...) }
		ro.Note = note
		rec.live = status.NewLive()
		ro.Observe = rec.live.Observe
	}
	h.Tool = "vramprof " + version
	var err error
	if rec.rec, err = recorder.Create(ro); err != nil {
		return nil, err
	}
	rec.stopUSR1 = momentsOnSIGUSR1(rec.rec, note)
	opts.Sink = rec.rec
	if rec.session, err = probes.NewSession(opts); err != nil {
		rec.abort()
		return nil, err
	}
	if rec.stopNVML, err = startNVML(r.NVML, nvml.Options{}, rec.rec.Write); err != nil {
		rec.abort()
		return nil, fmt.Errorf("write trace: %w", err)
	}
	return rec, nil
}

// startNVML samples device memory into write (nvml.Start) until stop is
// called, unless mode (--nvml) is off. No library, no driver or no device
// is not an error: write gets the record that says why NVML is
// unavailable, the report (or /metrics) says so in one line, and
// everything else works.
func startNVML(mode string, opts nvml.Options, write func(event.Record) error) (stop func() error, err error) {
	if mode == "off" {
		return func() error { return nil }, nil
	}
	return nvml.Start(opts, write)
}

// abort releases everything and removes what was created.
func (r *recording) abort() {
	if r.stopNVML != nil {
		_ = r.stopNVML()
	}
	if r.session != nil {
		_ = r.session.Close()
	}
	r.stopUSR1()
	r.rec.Abort()
}

// run runs the session until ctx is done or every target exited, with
// the live status line on stderr meanwhile (none with -q), cleared before
// it returns. shared says the traced command writes to the same terminal
// (run): the line is redrawn after its output.
func (r *recording) run(ctx context.Context, shared bool) error {
	if r.live != nil {
		stats := r.session.Stats()
		line := status.Start(status.Options{Out: os.Stderr, Shared: shared, Start: r.started, Live: r.live,
			Counts: func() status.Counts {
				return status.Counts{Events: stats.Events.Load(), Lost: stats.Lost.Load(), Procs: stats.Targets.Load()}
			}})
		defer line.Stop()
	}
	return r.session.Run(ctx)
}

// finish closes the session, ends the trace, replays it into the outputs
// and prints the summary (none with -q). It returns its error, else
// runErr, what run returned.
func (r *recording) finish(end *event.End, runErr error) error {
	end.StopsCounted, end.Stops = true, r.session.Stops()
	stopped := errors.Join(r.stopNVML(), r.session.Close())
	// No moment once the recording ends: a SIGUSR1 has its default
	// action again.
	r.stopUSR1()
	if err := r.rec.Finish(end, r.out, stopped); err != nil {
		return err
	}
	return runErr
}
