package event

import (
	"cmp"
	"slices"
)

// Tracker follows an event stream for a flight recorder: the allocations
// still live, each as the event that made it, and the figures a Checkpoint
// summarises. Its memory is proportional to what is live, never to the
// length of the stream. It is not safe for concurrent use.
//
// It pairs frees with allocations as the analysis does: by process, layer,
// memory space and address, a nested (driver) call apart from the runtime
// call around it, physical handles, reservations and mappings each apart.
// It does not follow PID reuse: a process that reuses a dead process's PID
// inherits what the dead one left live, as a missed free.
type Tracker struct {
	live map[trackKey]trackedEvent
	// handles are the VMM's physical handles live: physical memory goes
	// when its handle is both released and unmapped.
	handles map[handleKey]*handleState
	// active are the PIDs with an event since their last Process record.
	active map[uint32]bool
	// books are the per-API books' live allocations, keyed as the
	// analysis keys them (by API, not by nesting).
	books  map[bookKey]uint64
	seq    uint64
	events uint64
	first  uint64
	last   uint64
	totals map[totalsKey]*trackTotals
	// peaks follow, for each scope whose peak a report shows stacks of,
	// the live set by class and its copy at the scope's peak.
	peaks map[totalsKey]*peakSet
	// tl are each process's timelines (timeline.go).
	tl timelines
}

// peakSet is one scope's live allocations by class and what was live at
// its peak, kept as the analysis keeps a process's (classState.peak): at a
// new peak only the classes changed since the last one are copied, so the
// cost is O(events) however often the peak moves. A class neither live nor
// at the peak (idle) is forgotten once idle ones are as many as the others
// and minIdle: memory follows what is live and the peak, and a class
// allocated and freed over and over stays put in between.
type peakSet struct {
	classes map[PeakClass]*peakCount
	// dirty are the classes changed since the last peak, each once.
	dirty []*peakCount
	// idle counts the classes neither live nor at the peak, at most.
	idle int
	// at is the allocation that reached the peak.
	at Event
}

// minIdle is how many idle classes a peakSet may keep whatever its size:
// a sweep costs the whole set, so it waits for as many idle ones.
const minIdle = 1024

// peakCount is one class's count live now and at the peak.
type peakCount struct {
	live, peak uint64
	dirty      bool
}

type trackKey struct {
	addr   uint64
	pid    uint32
	layer  Layer
	space  uint8
	nested bool
}

type handleKey struct {
	pid    uint32
	handle uint64
}

type handleState struct {
	maps     int
	released bool
}

type trackedEvent struct {
	seq uint64
	ev  Event
	// own and dev are its class in its process's and its device's live
	// sets (peakSet) when it is counted there: a live class is never
	// forgotten, so a free finds it without a lookup.
	own, dev *peakCount
}

type totalsKey struct {
	pid    uint32
	all    bool
	layer  Layer
	host   bool
	book   uint8
	perDev bool
	device int32
}

type bookKey struct {
	addr     uint64
	pid      uint32
	driver   bool
	physical bool
}

type trackTotals struct {
	CheckpointTotals
	live uint64
	// ps is the scope's live set by class, for the scopes whose peak a
	// report shows stacks of; nil until the first allocation.
	ps *peakSet
}

// Address spaces of the tracker's keys.
const (
	spaceDevice uint8 = iota
	spaceHost
	spaceHandle
	spaceReserve
	spaceMap
	// spaceReleased holds the release of a handle still mapped.
	spaceReleased
)

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{live: make(map[trackKey]trackedEvent), books: make(map[bookKey]uint64),
		handles: make(map[handleKey]*handleState), active: make(map[uint32]bool),
		totals: make(map[totalsKey]*trackTotals), peaks: make(map[totalsKey]*peakSet), tl: newTimelines()}
}

// SetStart sets the origin of the timelines' grid: the stream's
// Header.Start, as the analysis takes it. Call it before the first event.
func (t *Tracker) SetStart(start uint64) { t.tl.origin = start }

// Observe follows one event, in stream order. Restored events are
// followed like any other: a tracker fed a segment that starts from a
// checkpoint ends with the same live set as the one that wrote it.
func (t *Tracker) Observe(e *Event) {
	t.seq++
	t.active[e.PID] = true
	if t.events == 0 {
		t.first = e.Time
	}
	t.events++
	t.last = e.Time
	layer := e.Layer
	if layer == LayerUnknown {
		layer = LayerSegment
	}
	if layer == LayerSegment {
		t.book(e)
		if e.Flags&FlagNested == 0 {
			switch e.Kind {
			case KindRelease:
				t.release(e)
				return
			case KindMap:
				t.mapRange(e)
				return
			case KindUnmap:
				t.unmapRange(e)
				return
			}
		}
	}
	var space uint8
	alloc := true
	switch e.Kind {
	case KindAlloc:
	case KindFree:
		alloc = false
	case KindHostAlloc:
		space = spaceHost
	case KindHostFree:
		space, alloc = spaceHost, false
	case KindCreate:
		space = spaceHandle
	case KindRelease:
		space, alloc = spaceHandle, false
	case KindReserve:
		space = spaceReserve
	case KindUnreserve:
		space, alloc = spaceReserve, false
	case KindMap:
		space = spaceMap
	case KindUnmap:
		space, alloc = spaceMap, false
	default:
		return
	}
	nested := e.Flags&FlagNested != 0
	k := trackKey{e.Addr, e.PID, layer, space, nested}
	counted := !nested && (space == spaceDevice || space == spaceHost && layer == LayerSegment ||
		space == spaceHandle && layer == LayerSegment) && (layer == LayerSegment || layer == LayerBlock)
	var tt, all *trackTotals
	if counted {
		tt = t.total(totalsKey{pid: e.PID, layer: layer, host: space == spaceHost})
		all = t.total(totalsKey{all: true, layer: layer, host: space == spaceHost})
	}
	if alloc {
		switch {
		case e.Ret != 0:
			if counted {
				for _, x := range [...]*trackTotals{tt, all} {
					x.Failed++
					x.FailedBytes += e.Size
				}
			}
			return
		case e.Addr == 0 || e.Size == 0:
			return
		}
		if old, ok := t.live[k]; ok && counted {
			// A missed free: the analysis drops the old one uncounted.
			tt.live -= old.ev.Size
			all.live -= old.ev.Size
			tt.ps.drop(old.own)
			t.deviceLevel(&old, false)
			t.tl.follow(&old.ev, false, e.Time)
		}
		if space == spaceHandle && !nested {
			delete(t.live, trackKey{e.Addr, e.PID, layer, spaceReleased, false})
			t.handles[handleKey{e.PID, e.Addr}] = &handleState{}
		}
		te := trackedEvent{seq: t.seq, ev: *e}
		te.ev.Flags &^= FlagRestored
		if counted {
			peak := false
			for _, x := range [...]*trackTotals{tt, all} {
				x.Allocations++
				x.AllocatedBytes += e.Size
				x.live += e.Size
				if x.live > x.PeakBytes {
					x.PeakBytes, x.PeakTime = x.live, e.Time
					peak = peak || x == tt
				}
			}
			te.own = t.peakSet(tt).add(e, peak)
			t.deviceLevel(&te, true)
			t.tl.follow(e, true, e.Time)
		}
		t.live[k] = te
		return
	}
	if e.Ret != 0 || e.Addr == 0 {
		if counted && e.Ret != 0 {
			tt.FailedFrees++
			all.FailedFrees++
		}
		return
	}
	old, ok := t.live[k]
	if !ok {
		if counted {
			tt.UnknownFrees++
			all.UnknownFrees++
		}
		return
	}
	delete(t.live, k)
	if counted {
		for _, x := range [...]*trackTotals{tt, all} {
			x.Frees++
			x.FreedBytes += old.ev.Size
			x.live -= old.ev.Size
		}
		tt.ps.drop(old.own)
		t.deviceLevel(&old, false)
		t.tl.follow(&old.ev, false, e.Time)
	}
}

// peakSet returns the live set of scope x, made on first use.
func (t *Tracker) peakSet(x *trackTotals) *peakSet {
	ps := x.ps
	if ps == nil {
		ps = &peakSet{classes: make(map[PeakClass]*peakCount)}
		x.ps = ps
		t.peaks[totalsKey{pid: x.PID, all: x.All, layer: x.Layer, host: x.Host, perDev: x.PerDevice, device: x.Device}] = ps
	}
	return ps
}

// classOf is the class of allocation e.
func classOf(e *Event) PeakClass {
	return PeakClass{PID: e.PID, Stack: e.Stack, Device: e.Device, Kind: e.Kind, API: e.API, Size: e.Size}
}

// add adds allocation e to the live set and returns its class there; at
// a new peak (peak set), what is live becomes the set at the peak.
func (ps *peakSet) add(e *Event, peak bool) *peakCount {
	k := classOf(e)
	c := ps.classes[k]
	if c == nil {
		c = &peakCount{}
		ps.classes[k] = c
	}
	c.live++
	ps.touch(c)
	if peak {
		ps.snapshot(e)
	}
	return c
}

// drop takes an allocation of class c out of the live set (a nil c: one
// the set never counted).
func (ps *peakSet) drop(c *peakCount) {
	if c == nil || c.live == 0 {
		return
	}
	c.live--
	if c.live == 0 && c.peak == 0 {
		ps.idle++
	}
	ps.touch(c)
	if ps.idle >= minIdle && ps.idle >= len(ps.classes)/2 {
		ps.sweep()
	}
}

// touch marks c changed since the peak.
func (ps *peakSet) touch(c *peakCount) {
	if !c.dirty {
		c.dirty = true
		ps.dirty = append(ps.dirty, c)
	}
}

// sweep forgets the idle classes.
func (ps *peakSet) sweep() {
	for k, c := range ps.classes {
		if c.live == 0 && c.peak == 0 {
			delete(ps.classes, k)
		}
	}
	ps.dirty = slices.DeleteFunc(ps.dirty, func(c *peakCount) bool {
		if c.live == 0 && c.peak == 0 {
			c.dirty = false
			return true
		}
		return false
	})
	ps.idle = 0
}

// snapshot makes what is live the set at the peak, which e reached.
func (ps *peakSet) snapshot(e *Event) {
	for _, c := range ps.dirty {
		if c.live == 0 && c.peak > 0 {
			ps.idle++
		}
		c.peak, c.dirty = c.live, false
	}
	clear(ps.dirty) // no pointers held past the length
	ps.dirty = ps.dirty[:0]
	ps.at = *e
	ps.at.Flags = 0
}

// clearPID takes every allocation of pid out of the live set, as gone
// with its process image.
func (ps *peakSet) clearPID(pid uint32) {
	for k, c := range ps.classes {
		if k.PID != pid || c.live == 0 {
			continue
		}
		c.live = 0
		if c.peak == 0 {
			ps.idle++
		}
		ps.touch(c)
	}
}

// checkpoint returns the set at the peak of the scope whose figures are x.
func (ps *peakSet) checkpoint(x *CheckpointTotals) CheckpointPeak {
	p := CheckpointPeak{PID: x.PID, All: x.All, Layer: x.Layer, Host: x.Host, PerDevice: x.PerDevice, Device: x.Device}
	if !x.All {
		p.At = Event{Time: x.PeakTime, Addr: ps.at.Addr, Size: ps.at.Size, Device: ps.at.Device, API: ps.at.API,
			Layer: ps.at.Layer, Stack: ps.at.Stack}
	}
	for k, c := range ps.classes {
		if c.peak > 0 {
			l := k
			l.Count = c.peak
			p.Live = append(p.Live, l)
		}
	}
	slices.SortFunc(p.Live, func(a, b PeakClass) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Stack, b.Stack), cmp.Compare(a.Device, b.Device),
			cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.API, b.API), cmp.Compare(a.Size, b.Size))
	})
	return p
}

// deviceLevel follows the device memory te (an allocation) holds on its
// device, per process and over all of them, when it is added or released;
// an added one notes its class in the device's live set (te.dev).
func (t *Tracker) deviceLevel(te *trackedEvent, add bool) {
	e := &te.ev
	if e.Kind != KindAlloc && e.Kind != KindCreate || e.Layer != LayerSegment && e.Layer != LayerUnknown {
		return
	}
	for _, k := range [...]totalsKey{{pid: e.PID, layer: LayerSegment, perDev: true, device: e.Device},
		{all: true, layer: LayerSegment, perDev: true, device: e.Device}} {
		x := t.total(k)
		if !add {
			x.live -= e.Size
			if k.all {
				x.ps.drop(te.dev)
			}
			continue
		}
		x.live += e.Size
		peak := x.live > x.PeakBytes
		if peak {
			x.PeakBytes, x.PeakTime = x.live, e.Time
		}
		if k.all {
			// Only the device's peak over every process has its stacks
			// in a report.
			te.dev = t.peakSet(x).add(e, peak)
		}
	}
}

// book follows a segment-layer call in its API's book, as the analysis
// does (analysis/books.go).
func (t *Tracker) book(e *Event) {
	var physical bool
	switch e.Kind {
	case KindAlloc, KindFree:
	case KindCreate, KindRelease:
		physical = true
	default:
		return
	}
	if e.API == APIUnknown {
		return
	}
	driver := e.API.Driver()
	b := BookRuntime
	if driver {
		b = BookDriver
	}
	per := t.total(totalsKey{pid: e.PID, layer: LayerSegment, book: b})
	all := t.total(totalsKey{all: true, layer: LayerSegment, book: b})
	k := bookKey{e.Addr, e.PID, driver, physical}
	switch e.Kind {
	case KindAlloc, KindCreate:
		switch {
		case e.Ret != 0:
			per.Failed++
			all.Failed++
			return
		case e.Size == 0 || e.Addr == 0:
			return
		}
		if old, ok := t.books[k]; ok {
			per.live -= old
			all.live -= old
		}
		t.books[k] = e.Size
		for _, x := range [...]*trackTotals{per, all} {
			x.Allocations++
			x.AllocatedBytes += e.Size
			x.live += e.Size
			if x.live > x.PeakBytes {
				x.PeakBytes, x.PeakTime = x.live, e.Time
			}
		}
	default:
		switch {
		case e.Ret != 0:
			per.FailedFrees++
			all.FailedFrees++
			return
		case e.Addr == 0:
			return
		}
		size, ok := t.books[k]
		if !ok {
			per.UnknownFrees++
			all.UnknownFrees++
			return
		}
		delete(t.books, k)
		for _, x := range [...]*trackTotals{per, all} {
			x.Frees++
			x.FreedBytes += size
			x.live -= size
		}
	}
}

func (t *Tracker) total(k totalsKey) *trackTotals {
	x := t.totals[k]
	if x == nil {
		x = &trackTotals{CheckpointTotals: CheckpointTotals{PID: k.pid, All: k.all, Layer: k.layer, Host: k.host, Book: k.book,
			PerDevice: k.perDev, Device: k.device}}
		t.totals[k] = x
	}
	return x
}

// Events returns how many events the tracker followed.
func (t *Tracker) Events() uint64 { return t.events }

// Live returns how many allocations (handles, reservations and mappings
// included) are live.
func (t *Tracker) Live() int { return len(t.live) }

// Checkpoint summarises everything followed so far as the checkpoint of
// segment seg, and returns with it the live allocations' events in stream
// order, flagged FlagRestored: write the Checkpoint, then the events.
func (t *Tracker) Checkpoint(seg uint64) (*Checkpoint, []Event) {
	live := make([]trackedEvent, 0, len(t.live))
	for _, te := range t.live {
		live = append(live, te)
	}
	slices.SortFunc(live, func(x, y trackedEvent) int { return cmp.Compare(x.seq, y.seq) })
	evs := make([]Event, len(live))
	restored := make(map[totalsKey]*CheckpointTotals)
	c := &Checkpoint{Time: t.last, Segment: seg, Events: t.events, FirstTime: t.first, Live: uint64(len(live))}
	for _, x := range t.totals {
		c.Totals = append(c.Totals, x.CheckpointTotals)
	}
	slices.SortFunc(c.Totals, func(x, y CheckpointTotals) int {
		return cmp.Or(boolCmp(x.All, y.All), cmp.Compare(x.PID, y.PID), boolCmp(x.PerDevice, y.PerDevice),
			cmp.Compare(x.Device, y.Device), cmp.Compare(x.Book, y.Book), cmp.Compare(x.Layer, y.Layer), boolCmp(x.Host, y.Host))
	})
	for i := range c.Totals {
		x := &c.Totals[i]
		k := totalsKey{x.PID, x.All, x.Layer, x.Host, x.Book, x.PerDevice, x.Device}
		restored[k] = x
		if ps := t.peaks[k]; ps != nil && x.PeakBytes > 0 {
			c.Peaks = append(c.Peaks, ps.checkpoint(x))
		}
	}
	for i, te := range live {
		evs[i] = te.ev
		evs[i].Flags |= FlagRestored
		e := &te.ev
		layer := e.Layer
		if layer == LayerUnknown {
			layer = LayerSegment
		}
		if layer == LayerSegment && e.API != APIUnknown {
			b := BookRuntime
			if e.API.Driver() {
				b = BookDriver
			}
			for _, k := range [...]totalsKey{{pid: e.PID, layer: layer, book: b}, {all: true, layer: layer, book: b}} {
				x := restored[k]
				switch {
				case x == nil:
				case (e.Kind == KindAlloc || e.Kind == KindCreate) && e.Size != 0:
					x.Allocations--
					x.AllocatedBytes -= e.Size
				case e.Kind == KindRelease:
					// A handle released while mapped: the book counted
					// its release, and counts it again when restored.
					x.Frees--
				}
			}
		}
		if e.Flags&FlagNested != 0 || e.Kind != KindAlloc && e.Kind != KindHostAlloc && e.Kind != KindCreate {
			continue
		}
		host := e.Kind == KindHostAlloc
		// The reader counts the restored allocations again.
		for _, k := range [...]totalsKey{{pid: e.PID, layer: layer, host: host}, {all: true, layer: layer, host: host}} {
			if x := restored[k]; x != nil {
				x.Allocations--
				x.AllocatedBytes -= e.Size
			}
		}
	}
	t.tl.checkpoint(c)
	return c, evs
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// release follows cuMemRelease (not nested): the physical memory goes now
// if no range maps it, else at its last unmap (the release is kept live
// until then, to be restored with the handle).
func (t *Tracker) release(e *Event) {
	hk := handleKey{e.PID, e.Addr}
	hs := t.handles[hk]
	tt := t.total(totalsKey{pid: e.PID, layer: LayerSegment})
	all := t.total(totalsKey{all: true, layer: LayerSegment})
	switch {
	case e.Ret != 0:
		tt.FailedFrees++
		all.FailedFrees++
		return
	case e.Addr == 0:
		return
	case hs == nil || hs.released:
		tt.UnknownFrees++
		all.UnknownFrees++
		return
	}
	hs.released = true
	if hs.maps == 0 {
		t.dropHandle(hk, e.Time)
		return
	}
	ev := *e
	ev.Flags &^= FlagRestored
	t.live[trackKey{e.Addr, e.PID, LayerSegment, spaceReleased, false}] = trackedEvent{seq: t.seq, ev: ev}
}

// dropHandle frees a handle's physical memory, released and unmapped, at
// time at.
func (t *Tracker) dropHandle(hk handleKey, at uint64) {
	delete(t.handles, hk)
	delete(t.live, trackKey{hk.handle, hk.pid, LayerSegment, spaceReleased, false})
	k := trackKey{hk.handle, hk.pid, LayerSegment, spaceHandle, false}
	old, ok := t.live[k]
	if !ok {
		return
	}
	delete(t.live, k)
	tt := t.total(totalsKey{pid: hk.pid, layer: LayerSegment})
	for _, x := range [...]*trackTotals{tt, t.total(totalsKey{all: true, layer: LayerSegment})} {
		x.Frees++
		x.FreedBytes += old.ev.Size
		x.live -= old.ev.Size
	}
	tt.ps.drop(old.own)
	t.deviceLevel(&old, false)
	t.tl.follow(&old.ev, false, at)
}

// mapRange follows cuMemMap: the handle is in Stream.
func (t *Tracker) mapRange(e *Event) {
	if e.Ret != 0 || e.Addr == 0 || e.Size == 0 {
		return
	}
	k := trackKey{e.Addr, e.PID, LayerSegment, spaceMap, false}
	if _, ok := t.live[k]; ok {
		t.unmapOne(k, e.Time)
	}
	if hs := t.handles[handleKey{e.PID, e.Stream}]; hs != nil {
		hs.maps++
	}
	ev := *e
	ev.Flags &^= FlagRestored
	t.live[k] = trackedEvent{seq: t.seq, ev: ev}
}

// unmapRange follows cuMemUnmap, which may span several mappings.
func (t *Tracker) unmapRange(e *Event) {
	if e.Ret != 0 {
		return
	}
	addr, end := e.Addr, e.Addr+e.Size
	for {
		k := trackKey{addr, e.PID, LayerSegment, spaceMap, false}
		m, ok := t.live[k]
		if !ok {
			return
		}
		t.unmapOne(k, e.Time)
		addr += m.ev.Size
		if addr >= end {
			return
		}
	}
}

// unmapOne unmaps one mapping at time at.
func (t *Tracker) unmapOne(k trackKey, at uint64) {
	m := t.live[k]
	delete(t.live, k)
	hk := handleKey{k.pid, m.ev.Stream}
	if hs := t.handles[hk]; hs != nil {
		hs.maps--
		if hs.maps == 0 && hs.released {
			t.dropHandle(hk, at)
		}
	}
}

// Process follows a Process record. One for a PID that made calls since
// its last one is an exec or a new process that got the PID: the driver
// freed what the PID had live, and the analysis takes it out of the
// all-process figures without counting frees (analysis/instances.go). The
// tracker forgets it likewise; the PID's own figures carry on, so a
// report from a later checkpoint shows the images as one process.
func (t *Tracker) Process(p *Process) {
	if !t.active[p.PID] {
		return
	}
	delete(t.active, p.PID)
	pid := p.PID
	for k, te := range t.live {
		if k.pid != pid {
			continue
		}
		delete(t.live, k)
		e := &te.ev
		if k.nested || !(k.space == spaceDevice || k.space == spaceHandle || k.space == spaceHost && k.layer == LayerSegment) {
			continue
		}
		if x := t.totals[totalsKey{all: true, layer: k.layer, host: k.space == spaceHost}]; x != nil {
			x.live -= e.Size
		}
		if k.space != spaceHost && k.layer == LayerSegment {
			if x := t.totals[totalsKey{all: true, layer: LayerSegment, perDev: true, device: e.Device}]; x != nil {
				x.live -= e.Size
			}
		}
	}
	for k := range t.handles {
		if k.pid == pid {
			delete(t.handles, k)
		}
	}
	for k, size := range t.books {
		if k.pid != pid {
			continue
		}
		delete(t.books, k)
		b := BookRuntime
		if k.driver {
			b = BookDriver
		}
		if x := t.totals[totalsKey{all: true, layer: LayerSegment, book: b}]; x != nil {
			x.live -= size
		}
	}
	// The PID's own levels start again from nothing.
	for k, x := range t.totals {
		if k.pid == pid && !k.all {
			x.live = 0
		}
	}
	for k, ps := range t.peaks {
		if k.all || k.pid == pid {
			ps.clearPID(pid)
		}
	}
	t.tl.forget(pid)
}
