package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/vramprof/vramprof/analysis"
	pysnapshot "github.com/vramprof/vramprof/profile/snapshot"
	"github.com/vramprof/vramprof/report"
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

// reportCmd re-analyses a recorded trace. It needs no privileges. Notes
// (which process a snapshot holds) go to stderr.
func reportCmd(o *reportOptions, stdout, stderr io.Writer) error {
	if o.format == "snapshot" && o.out == "" && isTerminalWriter(stdout) {
		return usageError(errors.New("report: --format snapshot writes a binary pickle, not for a terminal: give -o DIR (writes DIR/" + snapshotFile + "), or redirect stdout to a file (> " + snapshotFile + ")"))
	}
	tracePath := o.input
	if st, err := os.Stat(tracePath); err != nil {
		return fmt.Errorf("%w: %s: %w", errInput, o.input, err)
	} else if st.IsDir() {
		tracePath = filepath.Join(tracePath, traceFile)
	}
	// The snapshot first: a --pid without events fails before any output
	// is written.
	var snap *pysnapshot.Snapshot
	if o.format == "snapshot" {
		if o.pidSet && isSnapshot(tracePath) {
			return usageError(fmt.Errorf("report: --pid chooses a process of a recording; %s is a PyTorch snapshot, which holds one", o.input))
		}
		var err error
		if snap, err = exportSnapshot(tracePath, o.pid, o.pidSet, stderr); err != nil && !errors.Is(err, errTruncatedTrace) {
			return err
		}
	}
	res, err := analyze(tracePath, analysis.Options{Capacity: o.capacity})
	var outDir *outputDir // with -o
	truncated := errors.Is(err, errTruncatedTrace)
	if err != nil && !truncated {
		return err
	}
	if o.out != "" {
		var serr error
		if outDir, _, serr = ensureDir(o.out, o.force, outputsBut(o.out, tracePath)); serr != nil {
			return serr
		}
		defer outDir.Close()
		if serr := writeOutputs(outDir, res); serr != nil {
			return serr
		}
	}
	if snap != nil {
		if o.out == "" {
			if serr := pysnapshot.Encode(stdout, snap); serr != nil {
				return serr
			}
			return err
		}
		serr := outDir.writeFile(snapshotFile, func(w io.Writer) error {
			return pysnapshot.Encode(w, snap)
		})
		if serr != nil {
			return serr
		}
		return err // errTruncatedTrace, after writing what the trace holds
	}
	writers := map[string]func(io.Writer, *analysis.Result) error{
		"text": report.WriteSummary,
		"md":   report.WriteMarkdown,
		"json": report.WriteJSON,
		"html": report.WriteHTML,
	}
	if err := writers[o.format](stdout, res); err != nil {
		return fmt.Errorf("write %s report: %w", o.format, err)
	}
	return err // errTruncatedTrace, after writing what the trace holds
}

// outputsBut is reportFiles without the input, when the input is one of
// them in dir (a snapshot.pickle re-reported into its own directory): it
// is read, not an earlier output to refuse or remove.
func outputsBut(dir, input string) []string {
	in, err := os.Stat(input)
	if err != nil {
		return reportFiles
	}
	var out []string
	for _, name := range reportFiles {
		if st, err := os.Stat(filepath.Join(dir, name)); err == nil && os.SameFile(st, in) {
			continue
		}
		out = append(out, name)
	}
	return out
}
