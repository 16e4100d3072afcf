//go:build linux

package main

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/vramprof/vramprof/cmd/vramprof/internal/recorder"
	"github.com/vramprof/vramprof/probes"
	"github.com/vramprof/vramprof/probes/event"
)

// exec traces a running process until ctx is done (Ctrl-C, SIGTERM), the
// duration passes or the process exits, and always writes its outputs.
func (f *attachFlags) exec(ctx context.Context) (int, error) {
	dir := f.Output
	if dir == "" {
		dir = recorder.DefaultDir(f.PID) // vramprof-0-<time> for --all
	}
	if !f.All {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", f.PID)); err != nil {
			return 0, fmt.Errorf("%w: %d", probes.ErrNoProcess, f.PID)
		}
		// Before the output directory: the other session's may be the
		// same one (the default name changes once a second).
		if err := probes.CheckTraced(f.PID); err != nil {
			return 0, err
		}
	}
	h := &event.Header{Mode: "attach", PID: uint32(f.PID)}
	if f.All {
		h.Command = []string{"--all"}
	}
	rec, err := startRecording(dir, h, &f.liveFlags, &f.recordFlags, f.probeFlags.options(f.All, printNote(f.Quiet)))
	if err != nil {
		return 0, err
	}
	switch {
	case f.All:
		err = rec.session.AttachAll()
	default:
		err = rec.session.Attach(f.PID, f.Wait)
	}
	if err != nil {
		rec.abort()
		return 0, err
	}
	switch {
	case f.All:
		fmt.Fprintf(rec.out, "vramprof: tracing every CUDA process (%d now); Ctrl-C to stop\n", rec.session.Stats().Targets.Load())
	case f.Wait:
		fmt.Fprintf(rec.out, "vramprof: watching pid %d for CUDA; Ctrl-C to stop\n", f.PID)
	default:
		fmt.Fprintf(rec.out, "vramprof: tracing pid %d; Ctrl-C to stop\n", f.PID)
	}
	end := &event.End{Reason: "interrupted"}
	runCtx := ctx
	if f.Duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, f.Duration)
		defer cancel()
	}
	runErr := rec.run(runCtx, false)
	switch {
	case ctx.Err() != nil:
		end.Reason = "interrupted"
	case runCtx.Err() != nil:
		end.Reason = "duration"
	default:
		end.Reason = "target exited"
		if !f.All {
			end.Reason, end.ExitCode = targetEnd(rec.session, f.PID)
		}
	}
	return 0, rec.finish(end, runErr)
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
