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
// the trace in errors, names each segment (its file name).
func replaySegments(a *analysis.Analyzer, name string, segs []io.Reader, names []string) (replayResult, error) {
	return replaySegmentsTo(a.Add, name, segs, names)
}

// replaySegmentsTo is replaySegments with any consumer of records. Each
// segment must follow the one before it (followSegment): a gap, a segment
// of another recording, a repeated one or one cut short before the last
// is an error matching ErrSegments, never folded into the figures.
func replaySegmentsTo(add func(event.Record) error, name string, segs []io.Reader, names []string) (replayResult, error) {
	var rr replayResult
	var prev *event.Reader
	for i, seg := range segs {
		r, err := event.NewReader(bufio.NewReaderSize(seg, 1<<20))
		if err != nil {
			return rr, fmt.Errorf("read trace %s: %w", names[i], err)
		}
		if i == 0 {
			if err := add(r.Header()); err != nil {
				return rr, fmt.Errorf("analyze %s: %w", name, err)
			}
		} else if err := followSegment(prev, r, names, i); err != nil {
			return rr, fmt.Errorf("read trace %s: %w", name, err)
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
				return rr, fmt.Errorf("read trace %s: %w", names[i], err)
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
		prev = r
	}
	return rr, nil
}

// followSegment checks that segment i (r) follows segment i-1 (prev, read
// to its end) of the same recording, and says what is wrong and what to do
// when it does not. Segments written before they had an Identity are only
// checked for a cut.
func followSegment(prev, r *event.Reader, names []string, i int) error {
	before, this := filepath.Base(names[i-1]), filepath.Base(names[i])
	dir := filepath.Dir(names[i])
	// The fix for a break: the checkpoint of the segment after it
	// restores everything before it, so the segments from there on are a
	// whole recording.
	from := fmt.Sprintf("or move %s and the segments before it out of %s to report from %s on (its checkpoint restores what came before it)",
		before, dir, this)
	if prev.Truncated() {
		return fmt.Errorf("%w: %s ends inside a record at byte %d, yet %s follows it: the segment was cut short after it was written; restore it, %s",
			ErrSegments, before, prev.Offset(), this, from)
	}
	p, c := prev.Identity(), r.Identity()
	switch {
	case p == nil && c == nil:
		return nil // segments from before identities: nothing more to check
	case p == nil || c == nil || p.Recording != c.Recording:
		return fmt.Errorf("%w: %s and %s belong to different recordings (%s and %s): keep only the segments of one recording in %s",
			ErrSegments, before, this, recordingText(p), recordingText(c), dir)
	case c.Segment <= p.Segment:
		return fmt.Errorf("%w: %s repeats segment %d of the recording (%s is segment %d): remove the copy",
			ErrSegments, this, c.Segment, before, p.Segment)
	case c.Segment > p.Segment+1:
		missing := fmt.Sprintf("segment %d is", p.Segment+1)
		if c.Segment > p.Segment+2 {
			missing = fmt.Sprintf("segments %d to %d are", p.Segment+1, c.Segment-1)
		}
		return fmt.Errorf("%w: %s missing between %s (segment %d) and %s (segment %d): put it back, %s",
			ErrSegments, missing, before, p.Segment, this, c.Segment, from)
	case c.PrevFrames != prev.Frames() || c.PrevSum != prev.Sum():
		return fmt.Errorf("%w: %s holds %d records (sum %08x), but %s follows a segment %d of %d records (sum %08x): %s was cut short or replaced; restore it, %s",
			ErrSegments, before, prev.Frames(), prev.Sum(), this, p.Segment, c.PrevFrames, c.PrevSum, before, from)
	}
	return nil
}

// sameRecording checks, before any is read, that the segments at paths
// belong to one recording: the newest one's, which holds the end of the
// run. It names the segment that does not; followSegment, reading them,
// checks the rest.
func sameRecording(paths []string) error {
	ids := make([]*event.Identity, len(paths))
	for i, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("%w: open trace: %w", ErrInput, err)
		}
		r, err := event.NewReader(f)
		if err == nil {
			ids[i] = r.Identity()
		}
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	newest := ids[len(ids)-1]
	for i, id := range ids {
		if (id == nil) == (newest == nil) && (id == nil || id.Recording == newest.Recording) {
			continue
		}
		return fmt.Errorf("%w: %s belongs to another recording (%s; the newest segment, %s, is of %s): remove it from %s",
			ErrSegments, filepath.Base(paths[i]), recordingText(id), filepath.Base(paths[len(paths)-1]), recordingText(newest),
			filepath.Dir(paths[i]))
	}
	return nil
}

// recordingText names a segment's recording in errors.
func recordingText(id *event.Identity) string {
	if id == nil {
		return "one without an identity"
	}
	return "recording " + id.Recording
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
	if err := sameRecording(paths); err != nil {
		return fmt.Errorf("read trace %s: %w", name, err)
	}
	rr, err := replaySegmentsTo(add, name, segs, paths)
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
