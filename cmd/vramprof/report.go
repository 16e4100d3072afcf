package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/report"
)

// reportOptions are the flags of `vramprof report`.
type reportOptions struct {
	input    string
	out      string
	format   string
	capacity uint64
}

func parseReport(args []string) (*reportOptions, error) {
	const usage = "usage: vramprof report INPUT [-o DIR] [--format text|md|json|html|snapshot]   (INPUT: an output DIR, a .vpt trace or a PyTorch snapshot .pickle)"
	fs := newFlagSet("report")
	o := &reportOptions{}
	fs.StringVar(&o.out, "o", "", "write trace outputs (profile, report.json, report.md, report.html) into DIR")
	capacityFlag(fs, &o.capacity)
	fs.StringVar(&o.format, "format", "text", "what to print: text, md, json, html, or snapshot (a PyTorch memory snapshot pickle; with -o, written to DIR/"+snapshotFile+" instead)")
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
	return o, nil
}

// reportCmd re-analyses a recorded trace. It needs no privileges.
func reportCmd(o *reportOptions, stdout io.Writer) error {
	tracePath := o.input
	if st, err := os.Stat(tracePath); err != nil {
		return fmt.Errorf("%w: %s: %w", errInput, o.input, err)
	} else if st.IsDir() {
		tracePath = filepath.Join(tracePath, traceFile)
	}
	res, err := analyze(tracePath, analysis.Options{Capacity: o.capacity})
	truncated := errors.Is(err, errTruncatedTrace)
	if err != nil && !truncated {
		return err
	}
	if o.out != "" {
		if _, err := ensureDir(o.out); err != nil {
			return err
		}
		if err := writeOutputs(o.out, res); err != nil {
			return err
		}
	}
	if o.format == "snapshot" {
		if o.out == "" {
			if serr := writeSnapshot(stdout, tracePath); serr != nil && !errors.Is(serr, errTruncatedTrace) {
				return serr
			}
			return err
		}
		serr := writeFileAtomic(filepath.Join(o.out, snapshotFile), func(w io.Writer) error {
			if err := writeSnapshot(w, tracePath); err != nil && !errors.Is(err, errTruncatedTrace) {
				return err
			}
			return nil
		})
		if serr != nil {
			return serr
		}
		return err
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
