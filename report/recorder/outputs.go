package recorder

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/profile"
	"github.com/vramprof/vramprof/report"
)

// Analyze replays a trace (or imports a PyTorch snapshot pickle) through
// the analysis. The live commands use it
// too, on the trace they just recorded: that is what makes `vramprof report`
// byte-identical to the live run. A trace cut short inside a record gives
// both a result and an error matching ErrTruncated.
//
// opts are the analysis options the user can set (--capacity); the same
// options give the same outputs.
func Analyze(tracePath string, opts analysis.Options) (*analysis.Result, error) {
	if IsSnapshot(tracePath) {
		return analyzeSnapshot(tracePath, opts) // a PyTorch memory snapshot
	}
	if segs := SegmentsOf(tracePath); len(segs) > 0 {
		return analyzeSegments(segs, opts) // a flight recorder's (--max-trace)
	}
	f, err := os.Open(tracePath)
	if err != nil {
		return nil, fmt.Errorf("%w: open trace: %w", ErrInput, err)
	}
	defer f.Close()
	r, err := event.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read trace %s: %w", tracePath, err)
	}
	a := analysis.New(opts)
	if err := a.Add(r.Header()); err != nil {
		return nil, fmt.Errorf("analyze %s: %w", tracePath, err)
	}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read trace %s: %w", tracePath, err)
		}
		if err := a.Add(rec); err != nil {
			return nil, fmt.Errorf("analyze %s: %w", tracePath, err)
		}
	}
	res := a.Finish()
	if r.Truncated() {
		return res, fmt.Errorf("%w: %s ends inside a record at byte %d, after %d whole records", ErrTruncated, tracePath, r.Offset(), r.Records())
	}
	if !res.Run.Ended {
		// Cut at a record boundary (the recorder was killed right after
		// a flush): whole, but the End record a closed trace always has
		// is missing.
		return res, fmt.Errorf("%w: %s ends after %d whole records without its End record", ErrTruncated, tracePath, r.Records())
	}
	return res, nil
}

// WriteOutputs writes the profile and the reports into out. Each file is
// written under a temporary name and renamed into place, so a failure never
// leaves a partial file that looks whole.
func WriteOutputs(out *Dir, res *analysis.Result) error {
	outputs := []struct {
		name  string
		write func(io.Writer, *analysis.Result) error
	}{
		{ProfileFile, profile.Write},
		{JSONFile, report.WriteJSON},
		{MarkdownFile, report.WriteMarkdown},
		{HTMLFile, report.WriteHTML},
	}
	for _, o := range outputs {
		if err := out.WriteFile(o.name, func(w io.Writer) error { return o.write(w, res) }); err != nil {
			return err
		}
	}
	// What was live at each failed segment allocation of a traced caching
	// allocator (segments and blocks): oom-<n>.pb.gz, as report.json names
	// them.
	for i := range res.Pools {
		for j := range res.Pools[i].OOMs {
			o := &res.Pools[i].OOMs[j]
			view := res.AtOOM(o)
			if err := out.WriteFile(analysis.OOMProfileName(o), func(w io.Writer) error { return profile.Write(w, view) }); err != nil {
				return err
			}
		}
	}
	return nil
}
