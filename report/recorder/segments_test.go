package recorder

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

// mustSegment writes one trace segment of recs.
func mustSegment(tb testing.TB, recs ...event.Record) io.Reader {
	tb.Helper()
	var buf bytes.Buffer
	w, err := event.NewWriter(&buf, &event.Header{Tool: "t", Start: 1})
	require.NoError(tb, err)
	for _, r := range recs {
		require.NoError(tb, w.Write(r))
	}
	require.NoError(tb, w.Close())
	return &buf
}

// TestReplaySegments reads a later segment's own records, and only those:
// its top (the descriptive records again, the checkpoint, the restored
// allocations) is already known from the segment before; what follows,
// records of any type, is new.
func TestReplaySegments(t *testing.T) {
	st1 := &event.Stack{ID: 1, PID: 5, Frames: []event.Frame{{Addr: 1, Function: "a"}}}
	st2 := &event.Stack{ID: 2, PID: 5, Frames: []event.Frame{{Addr: 2, Function: "b"}}}
	alloc := &event.Event{Time: 10, Addr: 0x1000, Size: 64, PID: 5, TID: 5, Stack: 1, Kind: event.KindAlloc, API: event.APICudaMalloc}
	restored := *alloc
	restored.Flags = event.FlagRestored
	later := &event.Event{Time: 30, Addr: 0x2000, Size: 32, PID: 5, TID: 5, Stack: 2, Kind: event.KindAlloc, API: event.APICudaMalloc}
	segs := []io.Reader{
		mustSegment(t, st1, alloc),
		mustSegment(t, st1, &event.Checkpoint{Time: 10, Segment: 2, Events: 1, Live: 1}, &restored,
			st2, later, &event.End{Time: 40, Reason: "exited"}),
	}
	var got []string
	_, err := replaySegmentsTo(func(r event.Record) error {
		switch x := r.(type) {
		case *event.Header:
			got = append(got, "header")
		case *event.Stack:
			got = append(got, "stack "+x.Frames[0].Function)
		case *event.Event:
			got = append(got, "event "+map[bool]string{true: "restored", false: "new"}[x.Flags&event.FlagRestored != 0])
		case *event.Checkpoint:
			got = append(got, "checkpoint")
		case *event.End:
			got = append(got, "end")
		}
		return nil
	}, "test", segs)
	require.NoError(t, err)
	assert.Equal(t, []string{"header", "stack a", "event new", "stack b", "event new", "end"}, got)
}
