package recorder

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/vramprof/vramprof/probes/event"
)

// replayResult is what replaying a trace tells beyond its records: where
// and whether its last segment was cut (and how many bytes of the cut
// record were dropped), and how many whole records it held.
type replayResult struct {
	truncated bool
	offset    int64
	dropped   int64
	records   int64
}

// replayTrace is the one loop that reads a trace back: a recording's
// outputs, `vramprof report`, a moment's prefix of the trace and a flight
// recorder's segments all replay through it, so that each sees the very
// records, in the order, that the live run wrote. It feeds add the records
// of segs in order, one stream for a plain trace, several for a flight
// recorder's segments: the first is read whole (its checkpoint restores
// what came before it); a later one adds its events only, as its
// descriptive records, its checkpoint and the allocations it restores were
// fed already. Each segment must follow the one before it
// (followSegment): a gap, a segment of another recording, a repeated one
// or one cut short before the last is an error matching ErrSegments,
// never folded into the figures. name names the trace in errors, names
// each stream; newest, when not nil, reads the newest segment's Identity
// (foreign). add's errors are returned as they are. A last stream cut
// inside a record ends the replay without error: the result says where.
func replayTrace(name string, segs []io.Reader, names []string, add func(event.Record) error,
	newest func() (*event.Identity, bool)) (replayResult, error) {
	var rr replayResult
	var prev *event.Reader
	for i, seg := range segs {
		r, err := event.NewReader(bufio.NewReaderSize(seg, 1<<20))
		if err != nil {
			return rr, fmt.Errorf("read trace %s: %w", names[i], err)
		}
		if i == 0 {
			if err := add(r.Header()); err != nil {
				return rr, err
			}
		} else if err := followSegment(prev, r, names, i, newest); err != nil {
			return rr, fmt.Errorf("read trace %s: %w", name, err)
		}
		// top: a later segment's top, up to its checkpoint, which is
		// already fed; then the events it restores, also fed.
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
				return rr, err
			}
		}
		rr.records += r.Records()
		if i == len(segs)-1 {
			rr.truncated, rr.offset, rr.dropped = r.Truncated(), r.Offset(), r.Dropped()
		}
		prev = r
	}
	return rr, nil
}
