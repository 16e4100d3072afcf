package recorder

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/vramprof/vramprof/report"
)

// PerfettoFile is what `report --format perfetto -o DIR` writes in DIR.
const PerfettoFile = "trace.perfetto.json"

// reportPerfetto is Report for --format perfetto: the trace is written as
// the input is analysed (report.Perfetto), to stdout or, with o.Out, to
// DIR/PerfettoFile beside the other outputs; the output directory is
// therefore opened before the input is read.
func reportPerfetto(o ReportOptions, tracePath string, stdout io.Writer) error {
	analyze := func(w io.Writer) (*report.Report, error) {
		p := report.NewPerfetto(w, report.PerfettoOptions{})
		opts := o.Analysis
		opts.Watch = p.Watch
		tests := newTestsTracker()
		res, _, err := analyzePath(tracePath, opts, tests.feed(p.Record))
		if err != nil && !errors.Is(err, ErrTruncated) {
			return nil, err
		}
		if ferr := p.Finish(res); ferr != nil {
			return nil, fmt.Errorf("write perfetto trace: %w", ferr)
		}
		return tests.report(res, nil), err
	}
	if o.Out == "" {
		bw := bufio.NewWriter(stdout)
		_, err := analyze(bw)
		if err != nil && !errors.Is(err, ErrTruncated) {
			return err // what was streamed already stays: the exit code says
		}
		if ferr := bw.Flush(); ferr != nil {
			return fmt.Errorf("write perfetto trace: %w", ferr)
		}
		return err // ErrTruncated, after writing what the trace holds
	}
	outDir, _, err := OpenDir(o.Out, o.Force, outputsBut(o.Out, tracePath))
	if err != nil {
		return err
	}
	defer outDir.Close()
	var rep *report.Report
	var aerr error // the analysis's: ErrTruncated keeps what was written
	werr := outDir.WriteFile(PerfettoFile, func(w io.Writer) error {
		rep, aerr = analyze(w)
		if aerr != nil && !errors.Is(aerr, ErrTruncated) {
			return aerr
		}
		return nil
	})
	if werr != nil {
		if aerr != nil && !errors.Is(aerr, ErrTruncated) {
			return aerr // the input's error, not wrapped as a write's
		}
		return werr
	}
	if err := WriteOutputs(outDir, rep); err != nil {
		return err
	}
	return aerr
}
