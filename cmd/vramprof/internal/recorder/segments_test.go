package recorder

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
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
	}, "test", segs, []string{"trace-000001.vpt", "trace-000002.vpt"})
	require.NoError(t, err)
	assert.Equal(t, []string{"header", "stack a", "event new", "stack b", "event new", "end"}, got)
}

// TestFlightPreambleBounded: a segment's top describes the stacks the
// checkpoint refers to, not every stack seen. The stream holds four 1 MiB
// buffers live to the end (stacks 1-4), then n short-lived 4 KiB buffers,
// each from a stack of its own (5 on), all in mapping 1 (mapping 2 holds
// no frame). The peak, 4 MiB + 4 KiB, is reached by the first short-lived
// buffer: stacks 1-5 are live at it. Each later segment's top holds stacks
// 1-5 and at most the one short-lived buffer live at its cut, and mapping
// 1 only; its events' stacks are described in it all the same.
func TestFlightPreambleBounded(t *testing.T) {
	const n, big, small = 5000, 1 << 20, 4096
	frames := func(id event.StackID) []event.Frame {
		return []event.Frame{{Addr: 0x400000 + uint64(id), Mapping: 1, Function: fmt.Sprintf("f%d", id)}}
	}
	recs := []event.Record{
		&event.Mapping{ID: 1, PID: 7, Start: 0x400000, Limit: 0x500000, File: "/bin/train"},
		&event.Mapping{ID: 2, PID: 7, Start: 0x600000, Limit: 0x700000, File: "/lib/unused.so"},
	}
	t0 := uint64(1000)
	ev := func(kind event.Kind, addr, size uint64, st event.StackID) {
		t0 += 10
		api := event.APICudaMalloc
		if kind == event.KindFree {
			api = event.APICudaFree
		}
		recs = append(recs, &event.Event{Time: t0, Addr: addr, Size: size, PID: 7, TID: 7, Stack: st, Kind: kind,
			Layer: event.LayerSegment, API: api})
	}
	for i := range event.StackID(4) {
		recs = append(recs, &event.Stack{ID: i + 1, PID: 7, Frames: frames(i + 1)})
		ev(event.KindAlloc, 0x7f0000000000+uint64(i)*big, big, i+1)
	}
	for i := range event.StackID(n) {
		id := 5 + i
		recs = append(recs, &event.Stack{ID: id, PID: 7, Frames: frames(id)})
		ev(event.KindAlloc, 0x7e0000000000, small, id)
		ev(event.KindFree, 0x7e0000000000, 0, id)
	}
	dir, _ := mustRecord(t, Options{MaxTrace: MinMaxTrace}, recs)
	segs := SegmentsOf(filepath.Join(dir, TraceFile))
	require.Greater(t, len(segs), 2)
	require.NotEqual(t, "trace-000001.vpt", filepath.Base(segs[0]), "the oldest segments were dropped")

	for _, path := range segs {
		if filepath.Base(path) == "trace-000001.vpt" {
			continue
		}
		f, err := os.Open(path)
		require.NoError(t, err)
		r, err := event.NewReader(f)
		require.NoError(t, err)
		top := map[event.StackID]bool{}
		var maps []event.MappingID
		described := map[event.StackID]bool{}
		var restored []event.StackID
		inTop := true
		for {
			rec, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, path)
			switch x := rec.(type) {
			case *event.Stack:
				described[x.ID] = true
				if inTop {
					top[x.ID] = true
				}
			case *event.Mapping:
				if inTop {
					maps = append(maps, x.ID)
				}
			case *event.Checkpoint:
				inTop = false
			case *event.Event:
				if x.Flags&event.FlagRestored != 0 {
					restored = append(restored, x.Stack)
				}
				assert.True(t, described[x.Stack], "%s: the stack of an event at %d described before it", path, x.Time)
			}
		}
		require.NoError(t, f.Close())
		want := map[event.StackID]bool{1: true, 2: true, 3: true, 4: true, 5: true}
		for _, id := range restored {
			want[id] = true
		}
		assert.Equal(t, want, top, "%s: the top's stacks", path)
		assert.LessOrEqual(t, len(top), 6, "%s", path)
		assert.Equal(t, []event.MappingID{1}, maps, "%s: the top's mappings", path)
	}

	res, err := analyzeSegments(segs, analysis.Options{})
	require.NoError(t, err)
	require.Len(t, res.Processes, 1)
	p := res.Processes[0]
	assert.Equal(t, uint64(4*big+small), p.Totals.PeakBytes)
	var peak []analysis.StackUsage
	for id := range event.StackID(5) {
		size := uint64(big)
		if id == 4 {
			size = small
		}
		peak = append(peak, analysis.StackUsage{Stack: id + 1, Usage: analysis.Usage{Count: 1, Bytes: size}})
	}
	assert.ElementsMatch(t, peak, p.PeakStacks, "the stacks live at the peak, before the window")
	for _, u := range p.PeakStacks {
		assert.NotEmpty(t, res.Stacks[u.Stack].Frames, "stack %d described", u.Stack)
	}
}

// fourSegments is the workload(n) that fills four segments of
// MinMaxTrace/4 in the current trace format (2800 to 3400 do).
const fourSegments = 3000

// mustFourSegments records workload(fourSegments) under the least
// --max-trace and returns the directory and its segments: the trace
// rotates three times and no segment is dropped (1..4).
func mustFourSegments(tb testing.TB) (string, []string) {
	tb.Helper()
	dir, _ := mustRecord(tb, Options{MaxTrace: MinMaxTrace}, workload(fourSegments, 1<<20))
	segs := SegmentsOf(filepath.Join(dir, TraceFile))
	var names []string
	for _, p := range segs {
		names = append(names, filepath.Base(p))
	}
	require.Equal(tb, []string{"trace-000001.vpt", "trace-000002.vpt", "trace-000003.vpt", "trace-000004.vpt"}, names,
		"workload(fourSegments) fills four segments of MinMaxTrace/4")
	return dir, segs
}

// TestSegmentsFollowEachOther: the segments of one recording read back to
// the workload's truth (3000 allocations, 2250 frees, 750 MiB live); a
// missing, cut, foreign or repeated segment is refused with what is wrong
// and what to do, never folded into the figures.
func TestSegmentsFollowEachOther(t *testing.T) {
	const n, size = fourSegments, 1 << 20
	dir, segs := mustFourSegments(t)
	res, err := analyzeSegments(segs, analysis.Options{})
	require.NoError(t, err)
	assert.Equal(t, uint64(n), res.Totals.Allocations)
	assert.Equal(t, uint64(n-n/4), res.Totals.Frees)
	assert.Equal(t, uint64(n/4*size), res.Totals.LiveBytesAtEnd)

	_, otherSegs := mustFourSegments(t) // another recording of the same workload
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, dir string)
		want   []string
	}{
		{name: "middle deleted", tamper: func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "trace-000002.vpt")))
		}, want: []string{"segment 2 is missing between trace-000001.vpt (segment 1) and trace-000003.vpt (segment 3)",
			"move trace-000001.vpt and the segments before it out of"}},
		{name: "oldest cut inside a record", tamper: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "trace-000001.vpt")
			st, err := os.Stat(p)
			require.NoError(t, err)
			require.NoError(t, os.Truncate(p, st.Size()/2))
		}, want: []string{"trace-000001.vpt ends inside a record at byte", "yet trace-000002.vpt follows it"}},
		{name: "oldest cut at a record boundary", tamper: func(t *testing.T, dir string) {
			p := filepath.Join(dir, "trace-000001.vpt")
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			// The whole records of the first half: what a reader of the
			// cut file reads, without the cut.
			r, err := event.NewReader(bytes.NewReader(data[:len(data)/2]))
			require.NoError(t, err)
			for {
				if _, err := r.Next(); err != nil {
					break
				}
			}
			require.True(t, r.Truncated())
			require.NoError(t, os.WriteFile(p, data[:r.Offset()], 0o644))
		}, want: []string{"trace-000001.vpt holds", "but trace-000002.vpt follows a segment 1 of", "was cut short or replaced"}},
		{name: "foreign", tamper: func(t *testing.T, dir string) {
			data, err := os.ReadFile(otherSegs[2])
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "trace-000003.vpt"), data, 0o644))
		}, want: []string{"trace-000003.vpt belongs to another recording (recording ",
			"the newest segment, trace-000004.vpt, is of recording ", "remove it from"}},
		{name: "foreign oldest", tamper: func(t *testing.T, dir string) {
			data, err := os.ReadFile(otherSegs[0])
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "trace-000001.vpt"), data, 0o644))
		}, want: []string{"trace-000001.vpt belongs to another recording"}},
		{name: "without identity", tamper: func(t *testing.T, dir string) {
			// A segment from before identities among ones that have it.
			seg := mustSegment(t, stack, alloc(10, 0x1000, 64))
			data, err := io.ReadAll(seg)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "trace-000002.vpt"), data, 0o644))
		}, want: []string{"trace-000002.vpt belongs to another recording (one without an identity"}},
		{name: "duplicated", tamper: func(t *testing.T, dir string) {
			data, err := os.ReadFile(filepath.Join(dir, "trace-000002.vpt"))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "trace-000005.vpt"), data, 0o644))
		}, want: []string{"trace-000005.vpt repeats segment 2 of the recording (trace-000004.vpt is segment 4)", "remove the copy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "copy")
			require.NoError(t, os.CopyFS(d, os.DirFS(dir)))
			tc.tamper(t, d)
			_, err := Analyze(filepath.Join(d, TraceFile), analysis.Options{})
			require.ErrorIs(t, err, ErrSegments)
			assert.NotContains(t, err.Error(), "\n", "one line")
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestFollowSegmentForeign: read as streams (a moment report's segments),
// segments of two recordings are refused where they meet.
func TestFollowSegmentForeign(t *testing.T) {
	_, a := mustFourSegments(t)
	_, b := mustFourSegments(t)
	var segs []io.Reader
	for _, p := range []string{a[0], a[1], b[2]} {
		f, err := os.Open(p)
		require.NoError(t, err)
		t.Cleanup(func() { _ = f.Close() })
		segs = append(segs, f)
	}
	_, err := replaySegmentsTo(func(event.Record) error { return nil }, "test", segs, []string{a[0], a[1], b[2]})
	require.ErrorIs(t, err, ErrSegments)
	assert.Contains(t, err.Error(), "trace-000002.vpt and trace-000003.vpt belong to different recordings")
}

// TestNextSegment: the segment after one in its directory (by number, not
// by listing order), none after the last, none for a name that is not a
// segment's.
func TestNextSegment(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"trace-000012.vpt", "trace-000003.vpt", "trace-000004.vpt", "trace.vpt"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o644))
	}
	assert.Equal(t, filepath.Join(dir, "trace-000004.vpt"), nextSegment(filepath.Join(dir, "trace-000003.vpt")))
	assert.Equal(t, filepath.Join(dir, "trace-000012.vpt"), nextSegment(filepath.Join(dir, "trace-000004.vpt")))
	assert.Empty(t, nextSegment(filepath.Join(dir, "trace-000012.vpt")), "the last")
	assert.Empty(t, nextSegment(filepath.Join(dir, "trace.vpt")), "not a segment")
}
