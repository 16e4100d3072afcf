//go:build linux

package main

import (
	"context"
	"fmt"
	"os"

	"github.com/vramprof/vramprof/probes"
	"github.com/vramprof/vramprof/probes/event"
)

// attach traces a running process until ctx is done (Ctrl-C, SIGTERM), the
// duration passes or the process exits, and always writes its outputs.
func attach(ctx context.Context, o *attachOptions) error {
	dir := o.out
	if dir == "" {
		dir = defaultDir(o.pid)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", o.pid)); err != nil {
		return fmt.Errorf("%w: %d", probes.ErrNoProcess, o.pid)
	}
	rec, err := startRecording(dir, &event.Header{Mode: "attach", PID: uint32(o.pid)})
	if err != nil {
		return err
	}
	if err := rec.session.Attach(o.pid, o.wait); err != nil {
		rec.abort()
		return err
	}
	if !o.wait {
		fmt.Fprintf(os.Stderr, "vramprof: tracing pid %d; Ctrl-C to stop\n", o.pid)
	} else {
		fmt.Fprintf(os.Stderr, "vramprof: watching pid %d for CUDA; Ctrl-C to stop\n", o.pid)
	}
	end := &event.End{Reason: "interrupted"}
	runCtx := ctx
	if o.duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	runErr := rec.run(runCtx)
	switch {
	case ctx.Err() != nil:
		end.Reason = "interrupted"
	case runCtx.Err() != nil:
		end.Reason = "duration"
	default:
		end.Reason = "target exited"
	}
	if err := rec.finish(end, os.Stderr); err != nil {
		return err
	}
	return runErr
}
