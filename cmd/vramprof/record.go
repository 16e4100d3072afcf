//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/nvml"
	"github.com/vramprof/vramprof/report/recorder"
	"github.com/vramprof/vramprof/report/status"
)

// recording is a live session feeding a recorder.Recorder: the probes'
// session and the NVML sampler write into it; finish (or abort) releases
// them.
type recording struct {
	rec     *recorder.Recorder
	session *probes.Session
	// nvml samples device memory beside the probes; nil when off or
	// unavailable. nvmlDone is closed when its goroutine has returned.
	nvml     *nvml.Sampler
	stopNVML context.CancelFunc
	nvmlDone chan struct{}
	// started is when recording began, for the status line's clock.
	started time.Time
	// live follows live device bytes for the status line (report/status); nil
	// when no status is shown.
	live *status.Live
}

// recordOptions are the flags run and attach share.
type recordOptions struct {
	dir      string
	force    bool
	header   *event.Header
	probes   probes.Options
	nvmlMode string // --nvml: "auto" samples device memory when NVML works, "off" never
	quiet    bool   // no status line, no notes
	maxTrace uint64
	moments  time.Duration
	analysis analysis.Options
}

// startRecording checks privileges, creates the recorder (output
// directory, trace) and loads the probes into a session writing to it.
func startRecording(o recordOptions) (*recording, error) {
	// Privilege first: without it, nothing else matters, and it is the
	// error worth reading.
	if err := probes.CheckPrivileges(); err != nil {
		return nil, err
	}
	r := &recording{started: time.Now()}
	ro := recorder.Options{Dir: o.dir, Force: o.force, Header: o.header, Clock: probes.MonotonicNow,
		MaxTrace: o.maxTrace, MomentInterval: o.moments, Note: noteFunc(o.quiet), Analysis: o.analysis}
	if !o.quiet {
		r.live = status.NewLive()
		ro.Observe = r.live.Observe
	}
	o.header.Tool = "vramprof " + version
	var err error
	if r.rec, err = recorder.Create(ro); err != nil {
		return nil, err
	}
	o.probes.Sink = r.rec
	r.session, err = probes.NewSession(o.probes)
	if err != nil {
		r.abort()
		return nil, err
	}
	if err := r.startNVML(o.nvmlMode); err != nil {
		r.abort()
		return nil, fmt.Errorf("write trace: %w", err)
	}
	return r, nil
}

// startNVML starts sampling device memory into the trace (--nvml auto). No
// library, no driver or no device is not an error: the trace records why
// NVML is unavailable, the report says so in one line, and everything else
// works.
func (r *recording) startNVML(mode string) error {
	if mode == "off" {
		return nil
	}
	s, err := nvml.Open(nvml.Options{})
	if err != nil {
		return r.rec.Write(nvml.Status(probes.MonotonicNow(), err))
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.nvml, r.stopNVML, r.nvmlDone = s, cancel, make(chan struct{})
	go func() {
		defer close(r.nvmlDone)
		s.Run(ctx, nvml.DefaultInterval, func(rec event.Record) { _ = r.rec.Write(rec) })
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

// abort releases everything and removes what was created.
func (r *recording) abort() {
	_ = r.closeNVML()
	if r.session != nil {
		_ = r.session.Close()
	}
	r.rec.Abort()
}

// finish closes the session, ends the trace, replays it into the outputs and
// prints the summary to out.
func (r *recording) finish(end *event.End, out io.Writer) error {
	return r.rec.Finish(end, out, errors.Join(r.closeNVML(), r.session.Close()))
}

// run runs the session until ctx is done or every target exited.
func (r *recording) run(ctx context.Context) error {
	return r.session.Run(ctx)
}
