package recorder

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

// SegmentPattern matches a flight recorder's segment files.
const SegmentPattern = "trace-*.vpt"

// segmentName is segment n's file name.
func segmentName(n uint64) string { return fmt.Sprintf("trace-%06d.vpt", n) }

// MinMaxTrace is the least --max-trace: four segments of
// minFlightSegment.
const MinMaxTrace = 64 << 10

// traceSegments lists the flight recorder's segments in dir, oldest first;
// nil when there are none.
func traceSegments(dir string) []string {
	names, _ := filepath.Glob(filepath.Join(dir, SegmentPattern))
	slices.Sort(names) // zero-padded numbers: lexical is numeric order
	return names
}

// SegmentsOf returns the segments to read for tracePath: a recording's
// trace.vpt that a flight recorder replaced by segments. nil otherwise.
func SegmentsOf(tracePath string) []string {
	if filepath.Base(tracePath) != TraceFile {
		return nil
	}
	if _, err := os.Lstat(tracePath); !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return traceSegments(filepath.Dir(tracePath))
}

// replayResult is what replaying a trace tells beyond the analysis: where
// and whether its last segment was cut.
type replayResult struct {
	truncated bool
	offset    int64
	records   int64
}

// replaySegments feeds a trace, one or more segments of it in order, into a. The
// first segment is read whole (its checkpoint restores what came before
// it); a later one adds its events only: its descriptive records, its
// checkpoint and the allocations it restores are already in a. name names
// the trace in errors.
func replaySegments(a *analysis.Analyzer, name string, segs []io.Reader) (replayResult, error) {
	return replaySegmentsTo(a.Add, name, segs)
}

// replaySegmentsTo is replaySegments with any consumer of records.
func replaySegmentsTo(add func(event.Record) error, name string, segs []io.Reader) (replayResult, error) {
	var rr replayResult
	for i, seg := range segs {
		r, err := event.NewReader(bufio.NewReaderSize(seg, 1<<20))
		if err != nil {
			return rr, fmt.Errorf("read trace %s: %w", name, err)
		}
		if i == 0 {
			if err := add(r.Header()); err != nil {
				return rr, fmt.Errorf("analyze %s: %w", name, err)
			}
		}
		// top: a later segment's top, up to its checkpoint, which is
		// already in a; then the events it restores, also in a.
		top := i > 0
		for {
			rec, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return rr, fmt.Errorf("read trace %s: %w", name, err)
			}
			if top {
				if _, ok := rec.(*event.Checkpoint); ok {
					top = false
				}
				continue
			}
			if e, ok := rec.(*event.Event); ok && i > 0 && e.Flags&event.FlagRestored != 0 {
				continue
			}
			if err := add(rec); err != nil {
				return rr, fmt.Errorf("analyze %s: %w", name, err)
			}
		}
		rr.records += r.Records()
		if i == len(segs)-1 {
			rr.truncated, rr.offset = r.Truncated(), r.Offset()
		}
	}
	return rr, nil
}

// replaySegmentFiles feeds the segments at paths to add, as Replay does
// one trace: a last segment cut inside a record gives an error matching
// ErrTruncated after its whole records.
func replaySegmentFiles(paths []string, add func(event.Record) error) error {
	var segs []io.Reader
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("%w: open trace: %w", ErrInput, err)
		}
		defer f.Close()
		segs = append(segs, f)
	}
	name := filepath.Join(filepath.Dir(paths[0]), SegmentPattern)
	rr, err := replaySegmentsTo(add, name, segs)
	if err != nil {
		return err
	}
	if rr.truncated {
		return fmt.Errorf("%w: %s ends inside a record at byte %d", ErrTruncated, paths[len(paths)-1], rr.offset)
	}
	return nil
}

// analyzeSegments replays a flight recorder's segments, as Analyze does
// one trace.
func analyzeSegments(paths []string, opts analysis.Options) (*analysis.Result, error) {
	a := analysis.New(opts)
	err := replaySegmentFiles(paths, a.Add)
	if err != nil && !errors.Is(err, ErrTruncated) {
		return nil, err
	}
	res := a.Finish()
	if err != nil {
		return res, err
	}
	if !res.Run.Ended {
		return res, fmt.Errorf("%w: %s ends without its End record", ErrTruncated, paths[len(paths)-1])
	}
	return res, nil
}
