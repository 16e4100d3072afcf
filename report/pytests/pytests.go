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

// Bases of a test's attribution (see the package doc).
const (
	// BasisPhases: pytest announced the test (PYTEST_CURRENT_TEST): its
	// allocations are those made while it ran, setup and teardown
	// included.
	BasisPhases = "phases"
	// BasisFrames: the test was found from the Python frames of its
	// allocations' stacks.
	BasisFrames = "frames"
)

// Test is one pytest test's figures (see the package doc).
type Test struct {
	// ID is pytest's node id: "path::[Class::]name", with the parameter
	// set ("[...]") when Basis is BasisPhases.
	ID string
	// Basis is how its allocations were told from others': BasisPhases
	// or BasisFrames.
	Basis string
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
	// when its teardown ended (BasisPhases), or when the next test made
	// its first call (BasisFrames); at the end of the recording when that
	// did not come (see the package doc).
	LeakedBytes, LeakedAllocations uint64
	// StartNs and EndNs are its first and last calls (trace clock); with
	// BasisPhases, the start of its setup and the end of its teardown.
	StartNs, EndNs uint64
}

// frameRef is a test frame of a stack: the test's index and the frame's
// line. For an event of a process under BasisPhases, test is the test
// pytest runs, and site the test the frame names (-1: none).
type frameRef struct {
	test, site int32
	line       int64
}

// figures are one test's running figures at one layer.
type figures struct {
	allocs, allocated   uint64
	live, liveCount     uint64
	peak, peakNs        uint64
	peakLine            int64
	peakSite            int32 // the test whose frame is at peakLine; -1: none
	leaked, leakedCount uint64
	start, end          uint64
	seen                bool
}

// phased is what a process's test phases say: the test running now.
type phased struct {
	test int32 // -1: none
}

// span is a test's time under BasisPhases: from its first phase to the
// end of its teardown.
type span struct {
	start, end uint64
	phases     bool // announced by pytest
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
	// BasisFrames only.
	open int32
	// phased holds the processes whose test phases were seen (by PID):
	// their allocations belong to the test running when they were made.
	phased map[uint32]*phased
	spans  []span
}

// NewTracker returns a Tracker naming test files relative to root (check's
// working directory); "" keeps them as the frames have them.
func NewTracker(root string) *Tracker {
	return &Tracker{root: root, l: ledger.New(), stacks: map[event.StackID]frameRef{}, ids: map[string]int32{}, open: -1,
		phased: map[uint32]*phased{}}
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
	case *event.TestPhase:
		if r != nil {
			t.phase(r)
		}
	}
}

// phase follows a process's PYTEST_CURRENT_TEST: a test's phase begins,
// or (NodeID "") its teardown ended, and its leak is what is live then.
func (t *Tracker) phase(p *event.TestPhase) {
	st := t.phased[p.PID]
	if st == nil {
		st = &phased{test: -1}
		t.phased[p.PID] = st
	}
	next := int32(-1)
	if p.NodeID != "" {
		next = t.testOf(p.NodeID)
		sp := &t.spans[next]
		if !sp.phases {
			sp.start, sp.phases = p.Time, true
		}
		sp.end = p.Time
	}
	if st.test >= 0 && st.test != next {
		t.closeTest(st.test)
		t.spans[st.test].end = p.Time
	}
	st.test = next
}

// testOf is the index of the test id, added when new.
func (t *Tracker) testOf(id string) int32 {
	ix, seen := t.ids[id]
	if !seen {
		ix = int32(len(t.tests))
		t.ids[id] = ix
		t.tests = append(t.tests, Test{ID: id})
		t.figs = append(t.figs, [2]figures{})
		t.spans = append(t.spans, span{})
	}
	return ix
}

// stack finds a stack's innermost test frame.
func (t *Tracker) stack(s *event.Stack) {
	for _, f := range s.Frames { // leaf first
		id, ok := t.nodeID(f)
		if !ok {
			continue
		}
		ix := t.testOf(id)
		if tt := &t.tests[ix]; tt.File == "" {
			tt.File, tt.Path, tt.Function = f.File, t.relative(f.File), f.Function
		}
		t.stacks[s.ID] = frameRef{test: ix, site: ix, line: f.Line}
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
	if len(t.tests) == 0 && len(t.phased) == 0 {
		// No test is known yet, so no allocation is one's: its free,
		// unknown to the ledger, is then ignored as an untagged one's
		// would be. A recording with no pytest in it costs no ledger.
		if e.Layer == event.LayerBlock {
			t.blocks = true
		}
		return
	}
	inst := t.l.Active(e.PID, e.Time)
	ref, inTest := t.stacks[e.Stack]
	if e.Stack == 0 {
		inTest = false
	}
	if st := t.phased[e.PID]; st != nil {
		// The test pytest runs now, whatever the frames: the stack's test
		// frame, when it has one, only names the line (see added).
		if !inTest {
			ref.site = -1
		}
		ref.test, inTest = st.test, st.test >= 0
		if inTest && e.Flags&event.FlagRestored != 0 && e.Time < t.spans[st.test].start {
			// Restored from a flight recorder's checkpoint, and made
			// before the running test began: whose it was is not known.
			inTest = false
		}
	} else if inTest && ref.test != t.open {
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

// close reads the open test's leak (BasisFrames): what it has live now.
func (t *Tracker) close() {
	if t.open >= 0 {
		t.closeTest(t.open)
	}
}

// closeTest reads a test's leak: what it has live now.
func (t *Tracker) closeTest(ix int32) {
	for i := range t.figs[ix] {
		f := &t.figs[ix][i]
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
		f.peak, f.peakNs, f.peakLine, f.peakSite = f.live, e.Time, ref.line, ref.site
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

// SawPhases reports whether pytest announced a test (a TestPhase record)
// in any process of the stream.
func (t *Tracker) SawPhases() bool { return len(t.phased) > 0 }

// Tests returns every test an allocation or free was made in, in the order
// they first did, with their figures: at the block layer when the
// recording traced one, else at the segment layer. A test whose stacks
// were seen but that made no call at the layer has zero figures.
func (t *Tracker) Tests() []Test {
	t.close() // the last test's leak: what is live at the end
	for _, st := range t.phased {
		if st.test >= 0 {
			t.closeTest(st.test) // still running at the end
		}
	}
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
		tt.Basis = BasisFrames
		if sp := t.spans[i]; sp.phases {
			tt.Basis = BasisPhases
			tt.StartNs, tt.EndNs = sp.start, max(sp.end, seg.end)
			tt.Path, _, _ = strings.Cut(tt.ID, "::")
		}
		if f.peak > 0 && f.peakSite >= 0 {
			site := t.tests[f.peakSite]
			tt.PeakSite = fmt.Sprintf("%s (%s:%d)", site.Function, site.File, f.peakLine)
			if tt.File == "" {
				// A parameter set: its function is the frame's.
				tt.File, tt.Function = site.File, site.Function
			}
		}
		out = append(out, tt)
	}
	slices.SortStableFunc(out, func(a, b Test) int { return cmp.Compare(a.StartNs, b.StartNs) })
	return out
}
