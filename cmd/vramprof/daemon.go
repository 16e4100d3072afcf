//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/vramprof/vramprof/probes"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/nvml"
	"github.com/vramprof/vramprof/report/exporter"
)

// sweepEvery is how often serve notices exited processes and drops the
// ones whose time is up: a fraction of the default grace period.
const sweepEvery = 2 * time.Second

// serve traces every CUDA process on the host (as attach --all) and serves
// their figures over HTTP until ctx is done. Nothing is written to disk.
func serve(ctx context.Context, o *serveOptions) error {
	if err := probes.CheckPrivileges(); err != nil {
		return err
	}
	// Bind before loading anything: a taken port is the likelier error,
	// and cheaper to report.
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer ln.Close()

	var out io.Writer = os.Stderr
	if o.quiet {
		out = io.Discard
	}
	x := exporter.New(exporter.Options{Grace: o.grace, TTL: o.ttl})
	x.SetHeader(&event.Header{Tool: "vramprof " + version, Mode: "serve", Start: probes.MonotonicNow(),
		WallTime: time.Now().UnixNano()})
	stopNVML := serveNVML(o.nvml, nvml.Options{}, x)
	defer func() { _ = stopNVML() }()
	opts := probes.Options{All: true, Sink: x, NoPool: o.pool == "off", Allocators: o.allocs}
	if !o.quiet {
		opts.Note = func(msg string) { fmt.Fprintf(os.Stderr, "vramprof: %s\n", msg) }
	}
	s, err := probes.NewSession(o.python.options(opts))
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.AttachAll(); err != nil {
		return err
	}

	srv := &http.Server{Handler: x.Handler(), ReadHeaderTimeout: 10 * time.Second}
	srvErr := make(chan error, 1)
	go func() { srvErr <- srv.Serve(ln) }()
	fmt.Fprintf(out, "vramprof: serving http://%s/metrics and /debug/pprof/{inuse,peak,alloc}?pid=N; tracing every CUDA process (%d now); Ctrl-C to stop\n",
		ln.Addr(), s.Stats().Targets.Load())

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		t := time.NewTicker(sweepEvery)
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
				x.Sweep()
			}
		}
	}()
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(runCtx) }()

	select {
	case err = <-runErr:
	case err = <-srvErr:
		err = fmt.Errorf("serve: %w", err)
		cancel()
		<-runErr
	}
	cancel()
	shutCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if serr := srv.Shutdown(shutCtx); serr != nil && err == nil && !errors.Is(serr, http.ErrServerClosed) {
		err = fmt.Errorf("serve: %w", serr)
	}
	return errors.Join(err, s.Close())
}

// serveNVML samples device memory into x (--nvml auto) until the returned
// stop is called; stop waits for the sampler and closes it. No library, no
// driver or no device is not an error: x is told why (an NVMLStatus
// record), and serves that reason instead of device figures. With mode
// "off" nothing is sampled and x serves no NVML metric.
func serveNVML(mode string, opts nvml.Options, x *exporter.Exporter) (stop func() error) {
	if mode == "off" {
		return func() error { return nil }
	}
	s, err := nvml.Open(opts)
	if err != nil {
		_ = x.Write(nvml.Status(probes.MonotonicNow(), err))
		return func() error { return nil }
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, nvml.DefaultInterval, func(rec event.Record) { _ = x.Write(rec) })
	}()
	return func() error {
		cancel()
		<-done
		return s.Close()
	}
}
