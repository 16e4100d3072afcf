package main

import (
	"errors"
	"io"

	"github.com/vramprof/vramprof/report/recorder"
)

// reportCmd re-analyses a recorded trace (report/recorder). It needs no
// privileges. Notes (which process a snapshot holds) go to stderr.
func reportCmd(o *reportFlags, stdout, stderr io.Writer) error {
	if o.Format == "snapshot" && o.Output == "" && isTerminalWriter(stdout) {
		return usageError(errors.New("report: --format snapshot writes a binary pickle, not for a terminal: give -o DIR (writes DIR/" + recorder.SnapshotFile + "), or redirect stdout to a file (> " + recorder.SnapshotFile + ")"))
	}
	err := recorder.Report(o.opts, stdout, stderr)
	if errors.Is(err, recorder.ErrUsage) {
		return usageError(err)
	}
	return err
}
