package recorder

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	pysnapshot "github.com/vramprof/vramprof/profile/snapshot"
	"github.com/vramprof/vramprof/report"
)

// ReportOptions are what Report re-analyses and writes (`vramprof report`).
type ReportOptions struct {
	// Input is an output directory (its trace.vpt), a .vpt trace or a
	// PyTorch memory snapshot pickle.
	Input string
	// Out, when not "", receives the outputs (ReportFiles); Force replaces
	// an earlier report's there.
	Out   string
	Force bool
	// Format is what is printed on stdout: "text", "md", "json", "html",
	// "snapshot" (a PyTorch memory snapshot pickle; with Out, written to
	// Out/SnapshotFile instead) or "perfetto" (a Perfetto trace, Chrome
	// JSON; with Out, written to Out/PerfettoFile instead).
	Format string
	// PID, when PIDSet, is the process Format "snapshot" exports.
	PID    uint32
	PIDSet bool
	// Analysis are the analysis options (--capacity).
	Analysis analysis.Options
}

// Report re-analyses a recorded trace or snapshot and writes what o asks
// for. It needs no privileges. Notes (which process a snapshot holds) go to
// stderr. A trace cut short is reported up to the cut, then an error
// matching ErrTruncated is returned; a request its input cannot satisfy
// matches ErrUsage.
func Report(o ReportOptions, stdout, stderr io.Writer) error {
	tracePath := o.Input
	if st, err := os.Stat(tracePath); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInput, o.Input, err)
	} else if st.IsDir() {
		tracePath = filepath.Join(tracePath, TraceFile)
	}
	if o.Format == "perfetto" {
		return reportPerfetto(o, tracePath, stdout)
	}
	// One read of the input (a pipe or a FIFO is read once: newSource),
	// the snapshot exported from it too; a --pid without events fails
	// before any output is written.
	var x *pysnapshot.Builder
	var also func(event.Record) error
	if o.Format == "snapshot" {
		x = pysnapshot.NewExporter()
		also = x.Add
	}
	tests := newTestsTracker()
	res, isSnapshot, err := analyzePath(tracePath, o.Analysis, tests.feed(also))
	var outDir *Dir // with Out
	truncated := errors.Is(err, ErrTruncated)
	if err != nil && !truncated {
		return err
	}
	rep := tests.report(res, nil) // a trace cut short: its whole records'
	var snap *pysnapshot.Snapshot
	if x != nil {
		if o.PIDSet && isSnapshot {
			return usageError(fmt.Errorf("report: --pid chooses a process of a recording; %s is a PyTorch snapshot, which holds one", o.Input))
		}
		var serr error
		if snap, serr = exportOf(x, err, tracePath, o.PID, o.PIDSet, stderr); serr != nil && !errors.Is(serr, ErrTruncated) {
			return serr
		}
	}
	if o.Out != "" {
		var serr error
		if outDir, _, serr = OpenDir(o.Out, o.Force, outputsBut(o.Out, tracePath)); serr != nil {
			return serr
		}
		defer outDir.Close()
		if serr := WriteOutputs(outDir, rep); serr != nil {
			return serr
		}
	}
	if snap != nil {
		if o.Out == "" {
			if serr := pysnapshot.Encode(stdout, snap); serr != nil {
				return serr
			}
			return err
		}
		serr := outDir.WriteFile(SnapshotFile, func(w io.Writer) error {
			return pysnapshot.Encode(w, snap)
		})
		if serr != nil {
			return serr
		}
		return err // ErrTruncated, after writing what the trace holds
	}
	writers := map[string]func(io.Writer) error{
		"text": func(w io.Writer) error { return report.WriteSummary(w, res) },
		"md":   rep.WriteMarkdown,
		"json": rep.WriteJSON,
		"html": rep.WriteHTML,
	}
	write, ok := writers[o.Format]
	if !ok {
		return fmt.Errorf("report: unknown format %q", o.Format)
	}
	if err := write(stdout); err != nil {
		return fmt.Errorf("write %s report: %w", o.Format, err)
	}
	return err // ErrTruncated, after writing what the trace holds
}

// outputsBut is ReportFiles without the input, when the input is one of
// them in dir (a snapshot.pickle re-reported into its own directory): it
// is read, not an earlier output to refuse or remove.
func outputsBut(dir, input string) []string {
	in, err := os.Stat(input)
	if err != nil {
		return ReportFiles
	}
	var out []string
	for _, name := range ReportFiles {
		if st, err := os.Stat(filepath.Join(dir, name)); err == nil && os.SameFile(st, in) {
			continue
		}
		out = append(out, name)
	}
	return out
}
