package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/report"
	"github.com/vramprof/vramprof/report/compare"
)

var (
	// errRecording: an input of diff or check (a directory, trace or
	// report.json) cannot be read.
	errRecording = compare.ErrRecording
	// errSchema: a JSON input is not the kind of file expected, or a
	// version this vramprof does not know.
	errSchema = compare.ErrSchema
)

// loadSnapshot reads a recording for diff and check: an output directory
// (its trace.vpt, analysed as `vramprof report` does, else its
// report.json), a .vpt trace, or a report.json.
func loadSnapshot(path string) (*compare.Snapshot, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errRecording, err)
	}
	if st.IsDir() {
		trace, rep := filepath.Join(path, traceFile), filepath.Join(path, jsonFile)
		switch {
		case fileExists(trace), len(segmentsOf(trace)) > 0: // segments: --max-trace
			return snapshotFromTrace(path, trace)
		case fileExists(rep):
			return compare.LoadReport(path, rep)
		}
		return nil, fmt.Errorf("%w: %s holds neither %s nor %s", errRecording, path, traceFile, jsonFile)
	}
	if compare.IsJSONFile(path) {
		return compare.LoadReport(path, path)
	}
	return snapshotFromTrace(path, path)
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// snapshotFromTrace analyses a trace (or its segments) into a snapshot; a
// trace cut short gives the figures before the cut.
func snapshotFromTrace(source, trace string) (*compare.Snapshot, error) {
	res, err := analyze(trace, analysis.Options{})
	truncated := errors.Is(err, errTruncatedTrace)
	if err != nil && !truncated {
		return nil, fmt.Errorf("%w: %w", errRecording, err)
	}
	s := compare.FromReport(report.NewJSON(res), source)
	s.Truncated = truncated
	return s, nil
}

// diffOptions are the flags of `vramprof diff`.
type diffOptions struct {
	base, new string
	format    string
}

func parseDiff(args []string) (*diffOptions, error) {
	c, err := parseCommand("diff", args)
	if err != nil {
		return nil, err
	}
	o := &diffOptions{format: c.Diff.Format}
	positional := c.Diff.Paths
	if len(positional) != 2 {
		return nil, usageError(errors.New("diff: give BASE and NEW (output directories, .vpt traces or report.json files)"))
	}
	o.base, o.new = positional[0], positional[1]
	if o.format != "text" && o.format != "json" {
		return nil, usageError(fmt.Errorf("diff: unknown --format %q; use text or json", o.format))
	}
	return o, nil
}

// diffCmd compares two recordings (package compare). It needs no
// privileges.
func diffCmd(o *diffOptions, stdout io.Writer) error {
	base, err := loadSnapshot(o.base)
	if err != nil {
		return fmt.Errorf("diff: BASE %s: %w", o.base, err)
	}
	nw, err := loadSnapshot(o.new)
	if err != nil {
		return fmt.Errorf("diff: NEW %s: %w", o.new, err)
	}
	d := compare.NewDiff(base, nw)
	var buf bytes.Buffer
	if o.format == "json" {
		if err := d.WriteJSON(&buf); err != nil {
			return fmt.Errorf("diff: encode: %w", err)
		}
	} else {
		d.WriteText(&buf)
	}
	if _, err := stdout.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("diff: write: %w", err)
	}
	return nil
}
