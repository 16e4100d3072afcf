//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report/recorder"
)

// attach traces a running process until ctx is done (Ctrl-C, SIGTERM), the
// duration passes or the process exits, and always writes its outputs.
func attach(ctx context.Context, o *attachOptions) error {
	dir := o.out
	if dir == "" {
		dir = recorder.DefaultDir(o.pid) // vramprof-0-<time> for --all
	}
	if !o.all {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", o.pid)); err != nil {
			return fmt.Errorf("%w: %d", probes.ErrNoProcess, o.pid)
		}
		// Before the output directory: the other session's may be the
		// same one (the default name changes once a second).
		if err := probes.CheckTraced(o.pid); err != nil {
			return err
		}
	}
	h := &event.Header{Mode: "attach", PID: uint32(o.pid)}
	if o.all {
		h.Command = []string{"--all"}
	}
	opts := probes.Options{All: o.all, NoPool: o.pool == "off", Allocators: o.allocs}
	if !o.quiet {
		opts.Note = func(msg string) { fmt.Fprintf(os.Stderr, "vramprof: %s\n", msg) }
	}
	rec, err := startRecording(recordOptions{dir: dir, force: o.force, header: h, probes: o.python.options(opts),
		nvmlMode: o.nvml, quiet: o.quiet, maxTrace: o.maxTrace, moments: o.momentInterval,
		analysis: analysis.Options{Capacity: o.capacity}})
	if err != nil {
		return err
	}
	switch {
	case o.all:
		err = rec.session.AttachAll()
	default:
		err = rec.session.Attach(o.pid, o.wait)
	}
	if err != nil {
		rec.abort()
		return err
	}
	var out io.Writer = os.Stderr // the banner and the summary
	if o.quiet {
		out = io.Discard
	}
	switch {
	case o.all:
		fmt.Fprintf(out, "vramprof: tracing every CUDA process (%d now); Ctrl-C to stop\n", rec.session.Stats().Targets.Load())
	case o.wait:
		fmt.Fprintf(out, "vramprof: watching pid %d for CUDA; Ctrl-C to stop\n", o.pid)
	default:
		fmt.Fprintf(out, "vramprof: tracing pid %d; Ctrl-C to stop\n", o.pid)
	}
	end := &event.End{Reason: "interrupted"}
	runCtx := ctx
	if o.duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	st := startStatus(rec, o.quiet, false)
	defer st.stop()
	runErr := rec.run(runCtx)
	st.stop() // before the summary: clear the line
	switch {
	case ctx.Err() != nil:
		end.Reason = "interrupted"
	case runCtx.Err() != nil:
		end.Reason = "duration"
	default:
		end.Reason = "target exited"
		if !o.all {
			end.Reason, end.ExitCode = targetEnd(rec.session, o.pid)
		}
	}
	if err := rec.finish(end, out); err != nil {
		return err
	}
	return runErr
}

// targetEnd says how the attached process ended, and its exit code as a
// shell gives it (128+N for signal N): attach is not its parent, so the
// status comes from the exit tracepoint.
func targetEnd(s *probes.Session, pid int) (string, int) {
	ws, ok := s.ExitStatus(uint32(pid))
	switch {
	case !ok:
		return "target exited", 0
	case ws.Signaled():
		sig := ws.Signal()
		return fmt.Sprintf("target killed by signal %d (%s)", int(sig), unix.SignalName(sig)), 128 + int(sig)
	default:
		return "target exited", ws.ExitStatus()
	}
}
