package main

import (
	"context"
	"errors"
	"os"

	"golang.org/x/term"

	"github.com/vramprof/vramprof/cmd/vramprof/internal/recorder"
)

// exec re-analyses a recorded trace (internal/recorder). It needs no
// privileges. Notes (which process a snapshot holds) go to stderr.
func (o *reportFlags) exec(context.Context) (int, error) {
	if o.Format == "snapshot" && o.Output == "" && term.IsTerminal(int(os.Stdout.Fd())) {
		return 0, usageError(errors.New("report: --format snapshot writes a binary pickle, not for a terminal: give -o DIR (writes DIR/" + recorder.SnapshotFile + "), or redirect stdout to a file (> " + recorder.SnapshotFile + ")"))
	}
	err := recorder.Report(o.opts, os.Stdout, os.Stderr)
	if errors.Is(err, recorder.ErrUsage) {
		return 0, usageError(err)
	}
	return 0, err
}
