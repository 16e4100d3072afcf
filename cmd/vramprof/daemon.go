//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/nvml"
	"github.com/vramprof/vramprof/report/exporter"
)

// sweepEvery is how often serve notices exited processes and drops the
// ones whose time is up: a fraction of the default grace period.
const sweepEvery = 2 * time.Second

// exec traces every CUDA process on the host (as attach --all) and serves
// their figures over HTTP (exporter.Serve) until ctx is done. Nothing is
// written to disk.
func (f *serveFlags) exec(ctx context.Context) (int, error) {
	if err := probes.CheckPrivileges(); err != nil {
		return 0, err
	}
	// Bind before loading anything: a taken port is the likelier error,
	// and cheaper to report.
	ln, err := net.Listen("tcp", f.Listen)
	if err != nil {
		return 0, fmt.Errorf("serve: %w", err)
	}
	defer ln.Close()

	x := exporter.New(exporter.Options{Grace: f.Grace, TTL: f.TTL, PerProcess: f.PerProcess,
		RuntimeDirs: f.RuntimeDirs, Note: printNote(f.Quiet),
		// A process a single-process session takes is left to it (the
		// session's sweep): its figures end, as at an exit.
		Held: func(pid uint32, start uint64) bool { return start != 0 && probes.HeldBy(pid, start) != 0 }})
	x.SetHeader(&event.Header{Tool: "vramprof " + version, Mode: "serve", Start: probes.MonotonicNow(),
		WallTime: time.Now().UnixNano()})
	stopNVML, _ := startNVML(f.NVML, nvml.Options{}, noteProcesses(x.Write, printNote(f.Quiet)))
	defer func() { _ = stopNVML() }()
	opts := f.probeFlags.options(true, printNote(f.Quiet))
	opts.Sink = x
	s, err := probes.NewSession(opts)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	if err := s.AttachAll(); err != nil {
		return 0, err
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	srvErr := make(chan error, 1)
	go func() {
		srvErr <- x.Serve(runCtx, ln, sweepEvery)
		cancel() // a server that failed ends the session
	}()
	if !f.Quiet {
		fmt.Fprintf(os.Stderr, "vramprof: serving http://%s/metrics and /debug/pprof/ (allocs, heap, peak; ?pid=N, ?seconds=N); tracing every CUDA process (%d now); Ctrl-C to stop\n",
			ln.Addr(), s.Stats().Targets.Load())
	}

	err = s.Run(runCtx)
	cancel()
	if serr := <-srvErr; serr != nil && err == nil {
		err = fmt.Errorf("serve: %w", serr)
	}
	return 0, errors.Join(err, s.Close())
}

// noteProcesses passes NVML's records to write and, once per device, says
// in one line on note (nil: nothing) why NVML gives no per-process figure
// for it, as run and attach say in their summary. The sampler writes from
// one goroutine.
func noteProcesses(write func(event.Record) error, note func(string)) func(event.Record) error {
	if note == nil {
		return write
	}
	noted := make(map[int32]bool)
	return func(rec event.Record) error {
		if d, ok := rec.(*event.DeviceInfo); ok && d.ProcessesNote != "" && !noted[d.Index] {
			noted[d.Index] = true
			note("NVML device " + analysis.DeviceName(d.Index) + ": " + d.ProcessesNote)
		}
		return write(rec)
	}
}
