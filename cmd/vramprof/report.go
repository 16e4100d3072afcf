package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"

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

func parseReport(args []string) (*reportOptions, error) {
	const usage = "usage: vramprof report INPUT [-o DIR [--force]] [--format text|md|json|html|snapshot [--pid PID]]   (INPUT: an output DIR, a .vpt trace or a PyTorch snapshot .pickle)"
	fs := newFlagSet("report")
	o := &reportOptions{}
	fs.StringVar(&o.out, "o", "", "write trace outputs (profile, report.json, report.md, report.html) into DIR")
	capacityFlag(fs, &o.capacity)
	addForce(fs, &o.force)
	fs.StringVar(&o.format, "format", "text", "what to print: text, md, json, html, or snapshot (a PyTorch memory snapshot pickle; with -o, written to DIR/"+snapshotFile+" instead)")
	fs.Func("pid", "with --format snapshot: the process to export (default: the recorded process, else the highest segment peak)", func(v string) error {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			return fmt.Errorf("want a process ID, got %q", v)
		}
		o.pid, o.pidSet = uint32(n), true
		return nil
	})
	positional, err := parseInterleaved(fs, usage, args)
	if err != nil {
		return nil, err
	}
	if len(positional) != 1 {
		return nil, usageError(errors.New("report: give exactly one INPUT (an output directory or a .vpt trace)"))
	}
	o.input = positional[0]
	switch o.format {
	case "text", "md", "json", "html", "snapshot":
	default:
		return nil, usageError(fmt.Errorf("report: unknown --format %q; use text, md, json, html or snapshot", o.format))
	}
	if o.pidSet && o.format != "snapshot" {
		return nil, usageError(errors.New("report: --pid chooses the process of --format snapshot; the other formats cover every process"))
	}
	return o, nil
}

// reportCmd re-analyses a recorded trace (report/recorder). It needs no
// privileges. Notes (which process a snapshot holds) go to stderr.
func reportCmd(o *reportOptions, stdout, stderr io.Writer) error {
	if o.format == "snapshot" && o.out == "" && isTerminalWriter(stdout) {
		return usageError(errors.New("report: --format snapshot writes a binary pickle, not for a terminal: give -o DIR (writes DIR/" + snapshotFile + "), or redirect stdout to a file (> " + snapshotFile + ")"))
	}
	err := recorder.Report(recorder.ReportOptions{Input: o.input, Out: o.out, Force: o.force, Format: o.format,
		PID: o.pid, PIDSet: o.pidSet, Analysis: analysis.Options{Capacity: o.capacity}}, stdout, stderr)
	if errors.Is(err, recorder.ErrUsage) {
		return usageError(err)
	}
	return err
}
