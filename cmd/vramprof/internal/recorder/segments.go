package recorder

import (
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

// replaySegmentsTo feeds a trace, one or more segments of it in order, to
// add. The first segment is read whole (its checkpoint restores what came
// before it); a later one adds its events only: its descriptive records,
// its checkpoint and the allocations it restores were fed already. name
// names the trace in errors, names each segment (its file name). Each
// segment must follow the one before it (followSegment): a gap, a segment
// of another recording, a repeated one or one cut short before the last
// is an error matching ErrSegments, never folded into the figures.
func replaySegmentsTo(add func(event.Record) error, name string, segs []io.Reader, names []string) (replayResult, error) {
	return replaySegmentsFrom(add, name, segs, names, nil)
}

// replaySegmentsFrom is replaySegmentsTo, told how to read the newest
// segment's Identity (nil for streams, which are read once): a segment of
// another recording is then named against the newest one, which holds the
// end of the run, rather than against its neighbour.
func replaySegmentsFrom(add func(event.Record) error, name string, segs []io.Reader, names []string, newest func() (*event.Identity, bool)) (replayResult, error) {
	return replayTrace(name, segs, names, func(rec event.Record) error {
		if err := add(rec); err != nil {
			return fmt.Errorf("analyze %s: %w", name, err)
		}
		return nil
	}, newest)
}

// followSegment checks that segment i (r) follows segment i-1 (prev, read
// to its end) of the same recording, and says what is wrong and what to do
// when it does not. Segments written before they had an Identity are only
// checked for a cut. newest, when not nil, reads the newest segment's
// Identity, to name the segment of another recording (foreign).
func followSegment(prev, r *event.Reader, names []string, i int, newest func() (*event.Identity, bool)) error {
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
	case !sameRecording(p, c):
		return foreign(p, c, names, i, newest)
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

// sameRecording says whether two segments' identities name one
// recording (or both are from before identities).
func sameRecording(a, b *event.Identity) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Recording == b.Recording)
}

// foreign is followSegment's error for segments i-1 (p) and i (c) of
// different recordings. Told the newest segment's, it names the segment
// that is not of it: i, or else 0 (segments 0 to i-1 followed each other,
// so all are of p's recording).
func foreign(p, c *event.Identity, names []string, i int, newest func() (*event.Identity, bool)) error {
	dir := filepath.Dir(names[i])
	if newest != nil {
		if n, ok := newest(); ok {
			at, id := i, c
			if sameRecording(c, n) {
				at, id = 0, p
			}
			return fmt.Errorf("%w: %s belongs to another recording (%s; the newest segment, %s, is of %s): remove it from %s",
				ErrSegments, filepath.Base(names[at]), recordingText(id), filepath.Base(names[len(names)-1]), recordingText(n), dir)
		}
	}
	return fmt.Errorf("%w: %s and %s belong to different recordings (%s and %s): keep only the segments of one recording in %s",
		ErrSegments, filepath.Base(names[i-1]), filepath.Base(names[i]), recordingText(p), recordingText(c), dir)
}

// recordingText names a segment's recording in errors.
func recordingText(id *event.Identity) string {
	if id == nil {
		return "one without an identity"
	}
	return "recording " + id.Recording
}

// replaySegmentFiles feeds the segments at paths to add, as Replay does
// one trace, opening each with open (nil: os.Open): a last segment cut
// inside a record gives an error matching ErrTruncated after its whole
// records.
func replaySegmentFiles(paths []string, open func(path string) (*os.File, error), add func(event.Record) error) error {
	if open == nil {
		open = openSegment
	}
	var segs []io.Reader
	for _, p := range paths {
		f, err := open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		segs = append(segs, f)
	}
	// Read only when a segment of another recording is met, to name it.
	newest := func() (*event.Identity, bool) {
		f, err := open(paths[len(paths)-1])
		if err != nil {
			return nil, false
		}
		defer f.Close()
		r, err := event.NewReader(f)
		if err != nil {
			return nil, false
		}
		return r.Identity(), true
	}
	name := filepath.Join(filepath.Dir(paths[0]), SegmentPattern)
	rr, err := replaySegmentsFrom(add, name, segs, paths, newest)
	if err != nil {
		return err
	}
	if rr.truncated {
		return fmt.Errorf("%w: %s ends inside a record at byte %d (the %d bytes after it dropped)",
			ErrTruncated, paths[len(paths)-1], rr.offset, rr.dropped)
	}
	return nil
}

// openSegment opens the segment at path.
func openSegment(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: open trace: %w", ErrInput, err)
	}
	return f, nil
}

// analyzeSegments replays a flight recorder's segments, as Analyze does
// one trace.
func analyzeSegments(paths []string, opts analysis.Options) (*analysis.Result, error) {
	a := analysis.New(opts)
	return finishSegments(a, replaySegmentFiles(paths, nil, a.Add), paths[len(paths)-1])
}
