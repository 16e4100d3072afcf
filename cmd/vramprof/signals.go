package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/vramprof/vramprof/cmd/vramprof/internal/recorder"
	"github.com/vramprof/vramprof/probes/sigstate"
)

// The signals vramprof handles, all of them here:
//   - SIGINT and SIGTERM end the command being run (signalContext);
//   - run passes SIGINT, SIGTERM, SIGHUP and SIGQUIT on to the command it
//     launched (commandSignals, forwardSignals);
//   - SIGUSR1 takes a moment report of a live recording
//     (momentsOnSIGUSR1).
//
// What vramprof's parent ignored, vramprof ignores too (sigstate), but
// SIGUSR1, which only vramprof's user sends.

// signalContext is ctx, cancelled by a SIGINT or SIGTERM (unless vramprof
// started with it ignored); stop releases the handler.
func signalContext(ctx context.Context) (_ context.Context, stop func()) {
	if sigs := sigstate.Wanted(os.Interrupt, syscall.SIGTERM); len(sigs) > 0 {
		return signal.NotifyContext(ctx, sigs...)
	}
	return ctx, func() {}
}

// commandSignals catches the signals run passes on to its command (see
// forwardSignals) until stop is called: SIGINT, SIGTERM, SIGHUP and
// SIGQUIT, but one that vramprof started with ignored: a shell would not
// deliver it to the command (nohup's SIGHUP, a background job's SIGINT and
// SIGQUIT), and the command ignores it too (probes.Launch).
func commandSignals() (_ <-chan os.Signal, stop func()) {
	sigs := make(chan os.Signal, 4)
	if wanted := sigstate.Wanted(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT); len(wanted) > 0 {
		signal.Notify(sigs, wanted...)
	}
	return sigs, func() { signal.Stop(sigs) }
}

// forwardSignals sends each signal from sigs to process group pgid, as a
// terminal would (the command's own children too), in a goroutine of its
// own.
func forwardSignals(sigs <-chan os.Signal, pgid int) {
	go func() {
		for sig := range sigs {
			_ = syscall.Kill(-pgid, sig.(syscall.Signal))
		}
	}()
}

// momentsOnSIGUSR1 takes a moment report of rec at each SIGUSR1
// (recorder.Recorder.SignalMoment) until stop is called; stop returns once
// no moment is being taken any more. One that cannot be taken is said on
// note. After stop, SIGUSR1 has its default action again.
func momentsOnSIGUSR1(rec *recorder.Recorder, note func(format string, args ...any)) (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for range sigs {
			if err := rec.SignalMoment(); err != nil {
				note("SIGUSR1 moment: %v", err)
			}
		}
	})
	return func() {
		signal.Stop(sigs)
		close(sigs)
		wg.Wait()
	}
}
