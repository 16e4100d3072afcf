package recorder

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report"
	"github.com/vramprof/vramprof/report/compare"
	"github.com/vramprof/vramprof/report/pytests"
)

// LoadFigures reads what `vramprof diff` and `check` compare of a
// recording: an output directory (its trace or a flight recorder's
// segments, analysed as Report does, else its report.json), a .vpt trace,
// or a report.json. A trace cut short gives the figures before the cut,
// and the figures say so (Truncated). Errors wrap compare.ErrRecording,
// or compare.ErrSchema for a JSON file of another kind.
func LoadFigures(path string) (*compare.Figures, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", compare.ErrRecording, err)
	}
	if st.IsDir() {
		trace, rep := filepath.Join(path, TraceFile), filepath.Join(path, JSONFile)
		switch {
		case isRegular(trace), len(SegmentsOf(trace)) > 0:
			return figuresFromTrace(path, trace)
		case isRegular(rep):
			return compare.LoadReport(path, rep)
		}
		return nil, fmt.Errorf("%w: %s holds neither %s nor %s", compare.ErrRecording, path, TraceFile, JSONFile)
	}
	if !st.Mode().IsRegular() {
		return figuresFromStream(path)
	}
	if compare.IsJSONFile(path) {
		return compare.LoadReport(path, path)
	}
	return figuresFromTrace(path, path)
}

// maxStreamReport bounds a report.json read from a pipe (read whole to be
// parsed): a recording's is a few megabytes.
const maxStreamReport = 256 << 20

// figuresFromStream reads a pipe or a FIFO (`check <(cat trace.vpt)`)
// once, as a stream: a report.json (told by its first byte), a trace or a
// snapshot pickle.
func figuresFromStream(path string) (*compare.Figures, error) {
	f, err := openInput(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", compare.ErrRecording, err)
	}
	defer f.Close()
	src := newSource(path, f)
	if head, _ := src.br.Peek(1); len(head) == 1 && !src.snapshot && bytes.ContainsAny(head, "{ \t\r\n") {
		data, err := io.ReadAll(io.LimitReader(src.br, maxStreamReport+1))
		if err != nil {
			return nil, fmt.Errorf("%w: read %s: %w", compare.ErrRecording, path, err)
		}
		if len(data) > maxStreamReport {
			return nil, fmt.Errorf("%w: %s holds more than %d MiB of JSON: not a report.json", compare.ErrRecording, path, maxStreamReport>>20)
		}
		return compare.ParseReport(path, path, data)
	}
	res, err := src.analyze(analysis.Options{}, nil)
	truncated := errors.Is(err, ErrTruncated)
	if err != nil && !truncated {
		return nil, fmt.Errorf("%w: %w", compare.ErrRecording, err)
	}
	s := compare.FromReport(report.NewJSON(res), path)
	s.Truncated = truncated
	return s, nil
}

func isRegular(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// figuresFromTrace analyses a trace (or its segments) into figures
// named source.
func figuresFromTrace(source, trace string) (*compare.Figures, error) {
	res, err := Analyze(trace, analysis.Options{})
	truncated := errors.Is(err, ErrTruncated)
	if err != nil && !truncated {
		return nil, fmt.Errorf("%w: %w", compare.ErrRecording, err)
	}
	s := compare.FromReport(report.NewJSON(res), source)
	s.Truncated = truncated
	return s, nil
}

// Tests reads the per-test figures (package pytests) of the trace at path:
// a .vpt trace, or a recording's trace.vpt replaced by a flight recorder's
// segments; test files are named relative to root. A trace cut short
// gives the figures of its whole records (the recording's figures say it
// is incomplete).
func Tests(path, root string) ([]pytests.Test, error) {
	tr := pytests.NewTracker(root)
	err := Replay(path, func(rec event.Record) error {
		tr.Add(rec)
		return nil
	})
	if err != nil && !errors.Is(err, ErrTruncated) {
		return nil, fmt.Errorf("%w: %w", compare.ErrRecording, err)
	}
	return tr.Tests(), nil
}

// TracePath is the trace of a recording at path, for Tests: an output
// directory's trace.vpt (or its segments), a trace itself; "" for a
// report.json or a directory without a trace.
func TracePath(path string) string {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return ""
	case st.IsDir():
		trace := filepath.Join(path, TraceFile)
		if isRegular(trace) || len(SegmentsOf(trace)) > 0 {
			return trace
		}
		return ""
	case st.Mode().IsRegular() && !compare.IsJSONFile(path) && !IsSnapshot(path):
		return path
	}
	return ""
}
