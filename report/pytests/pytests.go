package pytests

import (
	"cmp"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vramprof/vramprof/analysis/ledger"
	"github.com/vramprof/vramprof/probes/event"
)

// Test is one pytest test's figures (see the package doc).
type Test struct {
	// ID is pytest's node id: "path::[Class::]name".
	ID string
	// File is the test's source file as its frame has it (co_filename),
	// Path the same relative to the root ("" when outside it), Function
	// its co_qualname.
	File, Path, Function string
	// Layer is the layer the figures count: "segment" (the CUDA API), or
	// "block" (a caching allocator's blocks, the tensors) when the
	// recording traced one.
	Layer string
	// Allocations and AllocatedBytes count the test's successful
	// allocations.
	Allocations, AllocatedBytes uint64
	// PeakBytes is the most bytes of its allocations live at once, first
	// reached at PeakNs (trace clock); PeakSite is the test's frame in the
	// stack of the allocation that reached it, "name (file:line)": the
	// line of the test that asked for it.
	PeakBytes, PeakNs uint64
	PeakSite          string
	// LeakedBytes and LeakedAllocations are its allocations still live
	// when the next test made its first call, or at the end of the
	// recording (see the package doc).
	LeakedBytes, LeakedAllocations uint64
	// StartNs and EndNs are its first and last calls (trace clock).
	StartNs, EndNs uint64
}

// frameRef is a test frame of a stack: the test's index and the frame's
// line.
type frameRef struct {
	test int32
	line int64
}

// figures are one test's running figures at one layer.
type figures struct {
	allocs, allocated   uint64
	live, liveCount     uint64
	peak, peakNs        uint64
	peakLine            int64
	leaked, leakedCount uint64
	start, end          uint64
	seen                bool
}

// Tracker follows a recording's stream and keeps each test's figures.
type Tracker struct {
	root string
	l    *ledger.Ledger
	// stacks maps a stack to its innermost test frame (absent: none).
	stacks map[event.StackID]frameRef
	ids    map[string]int32
	tests  []Test
	// figs are each test's figures per layer: [0] segment, [1] block.
	figs   [][2]figures
	blocks bool // a block-layer event was seen
	// open is the test of the latest call made in a test (-1: none): its
	// leak is read when a call of another test comes, or at the end.
	open int32
}

// NewTracker returns a Tracker naming test files relative to root (check's
// working directory); "" keeps them as the frames have them.
func NewTracker(root string) *Tracker {
	return &Tracker{root: root, l: ledger.New(), stacks: map[event.StackID]frameRef{}, ids: map[string]int32{}, open: -1}
}

// Add applies one record of the stream, in stream order.
func (t *Tracker) Add(rec event.Record) {
	switch r := rec.(type) {
	case *event.Stack:
		if r != nil {
			t.stack(r)
		}
	case *event.Process:
		if r != nil {
			t.l.Process(r)
		}
	case *event.Event:
		if r != nil {
			t.event(r)
		}
	}
}

// stack finds a stack's innermost test frame.
func (t *Tracker) stack(s *event.Stack) {
	for _, f := range s.Frames { // leaf first
		id, ok := t.nodeID(f)
		if !ok {
			continue
		}
		ix, seen := t.ids[id]
		if !seen {
			ix = int32(len(t.tests))
			t.ids[id] = ix
			rel := t.relative(f.File)
			t.tests = append(t.tests, Test{ID: id, File: f.File, Path: rel, Function: f.Function})
			t.figs = append(t.figs, [2]figures{})
		}
		t.stacks[s.ID] = frameRef{test: ix, line: f.Line}
		return
	}
}

// IsTestFile reports whether a file's name is one pytest collects by
// default: test_*.py or *_test.py.
func IsTestFile(file string) bool {
	base := path.Base(filepath.ToSlash(file))
	return strings.HasSuffix(base, ".py") && (strings.HasPrefix(base, "test_") || strings.HasSuffix(base, "_test.py"))
}

// nodeID is the node id of a test frame; ok false for any other frame.
func (t *Tracker) nodeID(f event.Frame) (string, bool) {
	if f.Mapping != 0 || f.Function == "" || !IsTestFile(f.File) || strings.ContainsAny(f.Function, "<> ") {
		return "", false
	}
	parts := strings.Split(f.Function, ".")
	if !strings.HasPrefix(parts[len(parts)-1], "test") {
		return "", false
	}
	for _, c := range parts[:len(parts)-1] {
		if !strings.HasPrefix(c, "Test") {
			return "", false // a method of a class pytest does not collect
		}
	}
	p := t.relative(f.File)
	if p == "" {
		p = f.File
	}
	return p + "::" + strings.Join(parts, "::"), true
}

// relative is file relative to the root, "" when it is not under it; a
// relative file is taken as relative to the root already.
func (t *Tracker) relative(file string) string {
	if !filepath.IsAbs(file) {
		return filepath.ToSlash(filepath.Clean(file))
	}
	if t.root == "" {
		return ""
	}
	rel, err := filepath.Rel(t.root, file)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return ""
	}
	return filepath.ToSlash(rel)
}

// layerIndex is the figures' index of a layer: 0 segment, 1 block.
func layerIndex(l event.Layer) int {
	if l == event.LayerBlock {
		return 1
	}
	return 0
}

func (t *Tracker) event(e *event.Event) {
	inst := t.l.Active(e.PID, e.Time)
	ref, inTest := t.stacks[e.Stack]
	if e.Stack == 0 {
		inTest = false
	}
	if inTest && ref.test != t.open {
		// Another test's call: the one before it has returned.
		t.close()
		t.open = ref.test
	}
	li := layerIndex(e.Layer)
	switch e.Layer {
	case event.LayerBlock:
		t.blocks = true
		k := ledger.Key{Inst: inst, Layer: event.LayerBlock, Space: ledger.Device}
		switch e.Kind {
		case event.KindAlloc:
			t.added(t.l.Alloc(k, e), li, ref, inTest, e)
		case event.KindFree:
			t.freed(t.l.Free(k, e), li)
		}
	case event.LayerSegment, event.LayerUnknown:
		if e.Flags&event.FlagNested != 0 {
			return // counted in its outer call
		}
		k := ledger.Key{Inst: inst, Layer: event.LayerSegment, Space: ledger.Device}
		switch e.Kind {
		case event.KindAlloc:
			t.added(t.l.Alloc(k, e), li, ref, inTest, e)
		case event.KindFree:
			t.freed(t.l.Free(k, e), li)
		case event.KindCreate:
			t.added(t.l.Create(inst, e), li, ref, inTest, e)
		case event.KindRelease:
			t.freed(t.l.Release(inst, e), li)
		case event.KindMap:
			t.unmapped(t.l.Map(inst, e), li)
		case event.KindUnmap:
			t.unmapped(t.l.Unmap(inst, e), li)
		default:
			// Pinned host memory, address reservations, device switches:
			// no device memory, but the call still spans the test.
		}
	}
	if inTest {
		// Every call in the test, of any layer, bounds its span.
		for i := range t.figs[ref.test] {
			f := &t.figs[ref.test][i]
			if !f.seen {
				f.start, f.seen = e.Time, true
			}
			f.end = e.Time
		}
	}
}

// close reads the open test's leak: what it has live now.
func (t *Tracker) close() {
	if t.open < 0 {
		return
	}
	for i := range t.figs[t.open] {
		f := &t.figs[t.open][i]
		f.leaked, f.leakedCount = f.live, f.liveCount
	}
}

// added accounts an allocation: the test's when inTest (its entry is
// tagged with the test's index + 1).
func (t *Tracker) added(ch ledger.Change, li int, ref frameRef, inTest bool, e *event.Event) {
	switch ch.Verdict {
	case ledger.Replaced:
		t.release(ch.Old, li) // its free was missed
	case ledger.Added:
	default:
		return
	}
	if !inTest {
		return
	}
	ch.New.Tag = ref.test + 1
	f := &t.figs[ref.test][li]
	f.allocs++
	f.allocated += e.Size
	f.live += e.Size
	f.liveCount++
	if f.live > f.peak {
		f.peak, f.peakNs, f.peakLine = f.live, e.Time, ref.line
	}
}

func (t *Tracker) freed(ch ledger.Change, li int) {
	if ch.Verdict == ledger.Freed {
		t.release(ch.Old, li)
	}
}

func (t *Tracker) unmapped(mc ledger.MapChange, li int) {
	for _, u := range mc.Unmapped {
		if u.Freed {
			t.release(u.Old, li)
		}
	}
}

// release takes an allocation that went out of its test's live bytes.
func (t *Tracker) release(old ledger.Entry, li int) {
	if old.Tag <= 0 || int(old.Tag) > len(t.figs) {
		return
	}
	f := &t.figs[old.Tag-1][li]
	f.live -= old.Size
	f.liveCount--
}

// Tests returns every test an allocation or free was made in, in the order
// they first did, with their figures: at the block layer when the
// recording traced one, else at the segment layer. A test whose stacks
// were seen but that made no call at the layer has zero figures.
func (t *Tracker) Tests() []Test {
	t.close() // the last test's leak: what is live at the end
	li, layer := 0, "segment"
	if t.blocks {
		li, layer = 1, "block"
	}
	var out []Test
	for i, tt := range t.tests {
		seg := t.figs[i][0]
		if !seg.seen {
			continue // a stack recorded for no call
		}
		f := t.figs[i][li]
		tt.Layer = layer
		tt.Allocations, tt.AllocatedBytes = f.allocs, f.allocated
		tt.PeakBytes, tt.PeakNs = f.peak, f.peakNs
		tt.LeakedBytes, tt.LeakedAllocations = f.leaked, f.leakedCount
		tt.StartNs, tt.EndNs = seg.start, seg.end
		if f.peak > 0 {
			tt.PeakSite = fmt.Sprintf("%s (%s:%d)", tt.Function, tt.File, f.peakLine)
		}
		out = append(out, tt)
	}
	slices.SortStableFunc(out, func(a, b Test) int { return cmp.Compare(a.StartNs, b.StartNs) })
	return out
}
