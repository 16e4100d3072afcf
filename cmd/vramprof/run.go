//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/vramprof/vramprof/cmd/vramprof/internal/recorder"
	"github.com/vramprof/vramprof/probes"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/sigstate"
)

// exec launches the command under the probes and returns its exit code.
func (o *runFlags) exec(ctx context.Context) (int, error) {
	dir := o.Output
	pending := dir == ""
	if pending {
		// The default name carries the child's PID, known only once it runs.
		dir = fmt.Sprintf(".vramprof-pending-%d", os.Getpid())
	}
	if _, err := probes.LookCommand(o.Command[0]); err != nil {
		return 0, err
	}
	rec, err := startRecording(dir, &event.Header{Mode: "run", Command: o.Command}, &o.liveFlags, &o.recordFlags,
		o.probeFlags.options(false, nil))
	if err != nil {
		return 0, err
	}
	// The child runs in a session of its own (see probes.Launch), so the
	// terminal's signals reach vramprof alone: Ctrl-C, Ctrl-\, a hang-up
	// and a SIGTERM are passed on, and vramprof keeps recording until the
	// child is gone, whatever it does with them (commandSignals).
	sigs, stopSigs := commandSignals()
	defer stopSigs()
	// A Ctrl-C or SIGTERM that came while the probes were being set up,
	// before the handler above, reached only main's context: the command
	// is not started, as a shell would not start it.
	if ctx.Err() != nil {
		rec.abort()
		cause := context.Cause(ctx)
		fmt.Fprintf(os.Stderr, "vramprof: %v before the command started: nothing was run\n", cause)
		if strings.HasPrefix(cause.Error(), syscall.SIGTERM.String()) {
			return 128 + int(syscall.SIGTERM), nil
		}
		return 128 + int(syscall.SIGINT), nil
	}

	if lost := sigstate.Lost(); len(lost) > 0 {
		// Rare (a parent that ignores SIGSEGV or SIGPROF), and it changes
		// what the command does: said even with -q.
		names := make([]string, len(lost))
		for i, s := range lost {
			names[i] = unix.SignalName(s)
		}
		fmt.Fprintf(os.Stderr, "vramprof: the command gets the default action for %s, which vramprof's parent ignores: a Go program cannot ignore those signals\n",
			strings.Join(names, ", "))
	}
	cmd, err := rec.session.Launch(probes.LaunchOptions{
		Argv: o.Command, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	})
	if err != nil {
		rec.abort()
		return 0, err
	}
	if pending {
		final := recorder.DefaultDir(cmd.Process.Pid)
		if err := os.Rename(dir, final); err == nil {
			rec.rec.SetDir(final)
		}
	}
	forwardSignals(sigs, cmd.Process.Pid)

	// Not ctx: a Ctrl-C ends the child, and the recording ends with it
	// (a child stopped at a dlopen after the reader had stopped would wait
	// for it forever).
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	runErr := make(chan error, 1)
	// The command's own output shares the terminal: the status line is
	// redrawn after it.
	go func() { runErr <- rec.run(runCtx, true) }()

	_ = cmd.Wait() // its error is in ProcessState
	// The run ends when the command exits, not when the recording has
	// drained and closed (hundreds of ms later): the leak rule weighs the
	// time the process ran on after its memory stopped growing.
	exited := probes.MonotonicNow()
	stop()
	sessionErr := <-runErr

	end := runEnd(cmd.ProcessState)
	end.Time = exited
	return end.ExitCode, rec.finish(end, sessionErr)
}

// runEnd is how the command ended, its exit code as a shell gives it: its
// status, or 128+N when signal N killed it.
func runEnd(ps *os.ProcessState) *event.End {
	if ps == nil {
		return &event.End{Reason: "exited", ExitCode: 1}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return &event.End{Reason: "signal: " + ws.Signal().String(), ExitCode: 128 + int(ws.Signal())}
	}
	return &event.End{Reason: "exited", ExitCode: ps.ExitCode()}
}
