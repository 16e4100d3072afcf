package main

import (
	"errors"
	"io"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/report/recorder"
)

// reportOptions are the flags of `vramprof report`.
type reportOptions struct {
	input    string
	out      string
	format   string
	capacity uint64
	// pid is the process --format snapshot exports, when pidSet.
	pid    uint32
	pidSet bool
	// force (--force) overwrites earlier outputs in out.
	force bool
}

// reportCmd re-analyses a recorded trace (report/recorder). It needs no
// privileges. Notes (which process a snapshot holds) go to stderr.
func reportCmd(o *reportOptions, stdout, stderr io.Writer) error {
	if o.format == "snapshot" && o.out == "" && isTerminalWriter(stdout) {
		return usageError(errors.New("report: --format snapshot writes a binary pickle, not for a terminal: give -o DIR (writes DIR/" + recorder.SnapshotFile + "), or redirect stdout to a file (> " + recorder.SnapshotFile + ")"))
	}
	err := recorder.Report(recorder.ReportOptions{Input: o.input, Out: o.out, Force: o.force, Format: o.format,
		PID: o.pid, PIDSet: o.pidSet, Analysis: analysis.Options{Capacity: o.capacity}}, stdout, stderr)
	if errors.Is(err, recorder.ErrUsage) {
		return usageError(err)
	}
	return err
}
