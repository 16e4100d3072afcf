//go:build linux

package main

import (
	"os"

	"github.com/vramprof/vramprof/report/status"
)

// statusLine is the live status line of run and attach (report/status).
type statusLine struct{ line *status.Line }

// startStatus starts drawing the status of rec on stderr. shared says the
// traced command writes to the same terminal (run). It returns nil when
// quiet; a nil *statusLine stops as a no-op.
func startStatus(rec *recording, quiet, shared bool) *statusLine {
	if quiet || rec.live == nil {
		return nil
	}
	stats := rec.session.Stats()
	return &statusLine{status.Start(status.Options{Out: os.Stderr, Shared: shared, Start: rec.started, Live: rec.live,
		Counts: func() status.Counts {
			return status.Counts{Events: stats.Events.Load(), Lost: stats.Lost.Load(), Procs: stats.Targets.Load()}
		}})}
}

// stop ends the status line, clearing it. Safe to call more than once,
// and on nil.
func (s *statusLine) stop() {
	if s != nil {
		s.line.Stop()
	}
}
