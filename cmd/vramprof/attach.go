//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/vramprof/vramprof/probes"
	"github.com/vramprof/vramprof/probes/event"
)

// attachOptions are the flags of `vramprof attach`.
type attachOptions struct {
	pid      int
	out      string
	duration time.Duration
	wait     bool
}

func parseAttach(args []string) (*attachOptions, error) {
	fs := flag.NewFlagSet("attach", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	o := &attachOptions{}
	fs.IntVar(&o.pid, "p", 0, "PID of the process to trace (required)")
	fs.StringVar(&o.out, "o", "", "output directory (default ./vramprof-<pid>-<time>)")
	fs.DurationVar(&o.duration, "duration", 0, "stop after this long (default: until Ctrl-C or the process exits)")
	fs.BoolVar(&o.wait, "wait", false, "wait for a process that has not loaded CUDA yet")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: vramprof attach -p PID [-o DIR] [--duration D] [--wait]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, usageError(err)
	}
	if fs.NArg() > 0 {
		return nil, usageError(fmt.Errorf("attach: unexpected argument %q; usage: vramprof attach -p PID [-o DIR]", fs.Arg(0)))
	}
	if o.pid <= 0 {
		return nil, usageError(errors.New("attach: -p PID is required (a positive process ID)"))
	}
	if o.duration < 0 {
		return nil, usageError(fmt.Errorf("attach: --duration %s is negative", o.duration))
	}
	return o, nil
}

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
