package checkpoint

import (
	"cmp"
	"slices"

	"github.com/vramprof/vramprof/analysis/ledger"
	"github.com/vramprof/vramprof/probes/event"
)

// Tracker follows an event stream for a flight recorder: the allocations
// still live, each as the event that made it, and the figures a
// Checkpoint summarises. Its memory is proportional to what is live, never
// to the length of the stream. It is not safe for concurrent use. The
// zero value is not ready: use NewTracker.
//
// What is live is the ledger's (analysis/ledger): process instances,
// allocations per instance, layer and memory space, physical handles and
// mappings, by the rules the analysis follows. Beside it the Tracker keeps,
// as the analysis keeps its aggregates, what a checkpoint needs and the
// ledger does not hold: each live allocation's event (to restore it), the
// per-API books with the nested calls the ledger leaves out, reserved
// ranges and the calls of layers no report counts (restored as they came),
// the scopes' counts and peaks, the live sets at the peaks and the
// timelines.
//
// A checkpoint names processes by PID: when a PID's instance is
// superseded (ledger.Ledger.Process), what the old one left live leaves
// the all-process figures and is forgotten, not restored; the PID's own
// counts and peaks carry on, so a report from a later checkpoint shows the
// instances as one process.
type Tracker struct {
	l *ledger.Ledger
	// recs are the events of the live allocations (and mappings, reserved
	// ranges, nested calls, kept releases) to restore; free are the
	// indexes of recs not in use. A ledger entry's Tag (a mapping's tag) is
	// its index here; a side table holds index+1.
	recs []tracked
	free []int32
	live int
	// side are the calls the ledger does not keep, by key space: nested
	// calls (the books count them), reserved ranges and other layers.
	side     map[sideKey]*ledger.Table[int32]
	lastSide *ledger.Table[int32]
	lastKey  sideKey
	// books are the per-API books' live allocations (their sizes), keyed
	// as the analysis keys them (by API, not by nesting).
	books  map[bookSpace]*ledger.Table[uint64]
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

// tracked is one restorable event; seq 0 marks a free one.
type tracked struct {
	seq uint64
	ev  event.Event
	// own and dev are its class in its process's and its device's live
	// sets (peakSet) when it is counted there: a live class is never
	// forgotten, so a free finds it without a lookup.
	own, dev *peakCount
	// release is the index+1 of the release of physical memory still
	// mapped (ledger.Kept), restored after it.
	release int32
}

// sideKey is a key space of calls the ledger does not keep: an instance's
// calls at one layer in one address space, nested or not.
type sideKey struct {
	inst   uint32
	layer  event.Layer
	space  uint8
	nested bool
}

// Address spaces of the side keys.
const (
	spaceDevice uint8 = iota
	spaceHost
	spaceHandle
	spaceReserve
	spaceMap
)

// bookSpace is one instance's live allocations in one book, physical
// memory (by handle) apart from allocations.
type bookSpace struct {
	inst     uint32
	driver   bool
	physical bool
}

type totalsKey struct {
	pid    uint32
	all    bool
	layer  event.Layer
	host   bool
	book   uint8
	perDev bool
	device int32
}

type trackTotals struct {
	event.CheckpointTotals
	// live is a book's or a device's live bytes; a scope's are the
	// ledger's.
	live uint64
	// ps is the scope's live set by class, for the scopes whose peak a
	// report shows stacks of; nil until the first allocation.
	ps *peakSet
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{l: ledger.New(), side: make(map[sideKey]*ledger.Table[int32]),
		books: make(map[bookSpace]*ledger.Table[uint64]), totals: make(map[totalsKey]*trackTotals),
		peaks: make(map[totalsKey]*peakSet), tl: newTimelines()}
}

// SetStart sets the origin of the timelines' grid: the stream's
// Header.Start, as the analysis takes it. Call it before the first event.
func (t *Tracker) SetStart(start uint64) { t.tl.origin = start }

// Observe follows one event, in stream order. Restored events are
// followed like any other: a tracker fed a segment that starts from a
// checkpoint ends with the same live set as the one that wrote it.
func (t *Tracker) Observe(e *event.Event) {
	t.seq++
	if t.events == 0 {
		t.first = e.Time
	}
	t.events++
	t.last = e.Time
	id := t.l.Active(e.PID, e.Time)
	layer := e.Layer
	if layer == event.LayerUnknown {
		layer = event.LayerSegment
	}
	switch layer {
	case event.LayerBlock:
		// Blocks are allocated and freed; nesting is the CUDA API's.
		if e.Kind != event.KindAlloc && e.Kind != event.KindFree {
			t.sideCall(id, layer, e, false)
			return
		}
	case event.LayerSegment:
		t.book(id, e)
		if e.Flags&event.FlagNested != 0 {
			// The outer call counts the memory; the books count this one.
			t.sideCall(id, layer, e, true)
			return
		}
	default:
		t.sideCall(id, layer, e, false)
		return
	}
	k := ledger.Key{Inst: id, Layer: layer, Space: ledger.Device}
	var ch ledger.Change
	switch e.Kind {
	case event.KindAlloc:
		ch = t.l.Alloc(k, e)
		t.allocated(k, &ch, e)
	case event.KindFree:
		ch = t.l.Free(k, e)
		t.freed(k, &ch, e)
	case event.KindHostAlloc:
		k.Space = ledger.Host
		ch = t.l.Alloc(k, e)
		t.allocated(k, &ch, e)
	case event.KindHostFree:
		k.Space = ledger.Host
		ch = t.l.Free(k, e)
		t.freed(k, &ch, e)
	case event.KindCreate:
		k.Space = ledger.Physical
		ch = t.l.Create(id, e)
		t.allocated(k, &ch, e)
	case event.KindRelease:
		// Physical memory still mapped goes at its last unmap: its
		// release is kept until then, to be restored after its handle.
		k.Space = ledger.Physical
		if ch = t.l.Release(id, e); ch.Verdict != ledger.Kept {
			t.freed(k, &ch, e)
		} else if h, ok := t.l.Get(k, e.Addr); ok {
			i := t.store(e) // may move recs: before indexing them
			t.recs[h.Tag].release = i + 1
		}
	case event.KindMap:
		m := t.l.Map(id, e)
		t.unmapped(m.Unmapped, e.Time)
		if m.Verdict == ledger.Mapped {
			t.l.TagMapping(id, e.Addr, t.store(e))
		}
	case event.KindUnmap:
		t.unmapped(t.l.Unmap(id, e).Unmapped, e.Time)
	case event.KindReserve, event.KindUnreserve:
		t.sideCall(id, layer, e, false)
	}
}

// store keeps e to restore and returns its index in recs.
func (t *Tracker) store(e *event.Event) int32 {
	var i int32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		i = int32(len(t.recs))
		t.recs = append(t.recs, tracked{})
	}
	r := &t.recs[i]
	*r = tracked{seq: t.seq, ev: *e}
	r.ev.Flags &^= event.FlagRestored
	t.live++
	return i
}

// drop lets record i go, with the release kept with it.
func (t *Tracker) drop(i int32) {
	r := &t.recs[i]
	if r.seq == 0 {
		return
	}
	rel := r.release
	*r = tracked{}
	t.free = append(t.free, i)
	t.live--
	if rel != 0 {
		t.drop(rel - 1)
	}
}

// scopeTotals are the figures of the scope of key space k: pid's and every
// process's.
func (t *Tracker) scopeTotals(pid uint32, k ledger.Key) (tt, all *trackTotals) {
	host := k.Space == ledger.Host
	return t.total(totalsKey{pid: pid, layer: k.Layer, host: host}), t.total(totalsKey{all: true, layer: k.Layer, host: host})
}

// allocated counts what the ledger made of an allocation call in key
// space k and keeps the allocation's event.
func (t *Tracker) allocated(k ledger.Key, ch *ledger.Change, e *event.Event) {
	tt, all := t.scopeTotals(e.PID, k)
	switch ch.Verdict {
	case ledger.Failed:
		for _, x := range [...]*trackTotals{tt, all} {
			x.Failed++
			x.FailedBytes += e.Size
		}
		return
	case ledger.Added:
	case ledger.Replaced:
		// A missed free: the analysis drops the old one uncounted.
		t.gone(tt, ch.Old.Tag, e.Time)
	default:
		return
	}
	i := t.store(e)
	ch.New.Tag = i
	peak := false
	tt.Allocations++
	tt.AllocatedBytes += e.Size
	if ch.Inst.Bytes > tt.PeakBytes {
		tt.PeakBytes, tt.PeakTime = ch.Inst.Bytes, e.Time
		peak = true
	}
	all.Allocations++
	all.AllocatedBytes += e.Size
	if lv := t.l.ScopeLevel(k.Scope()).Bytes; lv > all.PeakBytes {
		all.PeakBytes, all.PeakTime = lv, e.Time
	}
	r := &t.recs[i]
	r.own = t.peakSet(tt).add(e, peak)
	t.deviceLevel(r, true)
	t.tl.follow(e, true, e.Time)
}

// gone takes live record i, counted in scope tt, out of the live sets,
// the device levels and the timelines at time at, and lets it go.
func (t *Tracker) gone(tt *trackTotals, i int32, at uint64) {
	r := &t.recs[i]
	tt.ps.drop(r.own)
	t.deviceLevel(r, false)
	t.tl.follow(&r.ev, false, at)
	t.drop(i)
}

// freed counts what the ledger made of a free call in key space k.
func (t *Tracker) freed(k ledger.Key, ch *ledger.Change, e *event.Event) {
	tt, all := t.scopeTotals(e.PID, k)
	switch ch.Verdict {
	case ledger.Failed:
		tt.FailedFrees++
		all.FailedFrees++
	case ledger.Unknown:
		tt.UnknownFrees++
		all.UnknownFrees++
	case ledger.Freed:
		t.dropped(tt, all, ch.Old, e.Time)
	}
}

// dropped counts live allocation old, of scope tt, as freed at time at.
func (t *Tracker) dropped(tt, all *trackTotals, old ledger.Entry, at uint64) {
	for _, x := range [...]*trackTotals{tt, all} {
		x.Frees++
		x.FreedBytes += old.Size
	}
	t.gone(tt, old.Tag, at)
}

// unmapped lets the mappings a Map or Unmap removed go at time at, and
// counts the physical memory that went with them as freed.
func (t *Tracker) unmapped(us []ledger.Unmapping, at uint64) {
	for _, u := range us {
		pid := t.recs[u.Tag].ev.PID
		t.drop(u.Tag)
		if u.Freed {
			tt, all := t.scopeTotals(pid, ledger.Key{Layer: event.LayerSegment, Space: ledger.Physical})
			t.dropped(tt, all, u.Old, at)
		}
	}
}

// sideCall follows a call the ledger does not keep: a nested call, a
// reserved range, a call of another layer. An allocation (or reservation,
// mapping) replaces what its address held; a free removes it.
func (t *Tracker) sideCall(id uint32, layer event.Layer, e *event.Event, nested bool) {
	var space uint8
	alloc := true
	switch e.Kind {
	case event.KindAlloc:
	case event.KindFree:
		alloc = false
	case event.KindHostAlloc:
		space = spaceHost
	case event.KindHostFree:
		space, alloc = spaceHost, false
	case event.KindCreate:
		space = spaceHandle
	case event.KindRelease:
		space, alloc = spaceHandle, false
	case event.KindReserve:
		space = spaceReserve
	case event.KindUnreserve:
		space, alloc = spaceReserve, false
	case event.KindMap:
		space = spaceMap
	case event.KindUnmap:
		space, alloc = spaceMap, false
	default:
		return
	}
	if e.Ret != 0 || e.Addr == 0 || alloc && e.Size == 0 {
		return
	}
	k := sideKey{id, layer, space, nested}
	tb := t.lastSide
	if tb == nil || t.lastKey != k {
		tb = t.side[k]
		if tb == nil {
			tb = &ledger.Table[int32]{}
			t.side[k] = tb
		}
		t.lastSide, t.lastKey = tb, k
	}
	if !alloc {
		if i, ok := tb.Take(e.Addr); ok {
			t.drop(i - 1)
		}
		return
	}
	i := t.store(e) // before Ref: the slot is valid until the next Put
	slot := tb.Ref(e.Addr)
	if old := *slot; old != 0 {
		t.drop(old - 1)
	}
	*slot = i + 1
}

// peakSet returns the live set of scope x, made on first use.
func (t *Tracker) peakSet(x *trackTotals) *peakSet {
	ps := x.ps
	if ps == nil {
		ps = &peakSet{classes: make(map[event.PeakClass]*peakCount)}
		x.ps = ps
		t.peaks[totalsKey{pid: x.PID, all: x.All, layer: x.Layer, host: x.Host, perDev: x.PerDevice, device: x.Device}] = ps
	}
	return ps
}

// deviceLevel follows the device memory r (an allocation) holds on its
// device, per process and over all of them, when it is added or released;
// an added one notes its class in the device's live set (r.dev).
func (t *Tracker) deviceLevel(r *tracked, add bool) {
	e := &r.ev
	if e.Kind != event.KindAlloc && e.Kind != event.KindCreate || e.Layer != event.LayerSegment && e.Layer != event.LayerUnknown {
		return
	}
	for _, k := range [...]totalsKey{{pid: e.PID, layer: event.LayerSegment, perDev: true, device: e.Device},
		{all: true, layer: event.LayerSegment, perDev: true, device: e.Device}} {
		x := t.total(k)
		if !add {
			x.live -= e.Size
			if k.all {
				x.ps.drop(r.dev)
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
			r.dev = t.peakSet(x).add(e, peak)
		}
	}
}

// book follows a segment-layer call of instance id in its API's book, as
// the analysis does (analysis/books.go).
func (t *Tracker) book(id uint32, e *event.Event) {
	var physical bool
	switch e.Kind {
	case event.KindAlloc, event.KindFree:
	case event.KindCreate, event.KindRelease:
		physical = true
	default:
		return
	}
	if e.API == event.APIUnknown {
		return
	}
	driver := e.API.Driver()
	b := event.BookRuntime
	if driver {
		b = event.BookDriver
	}
	per := t.total(totalsKey{pid: e.PID, layer: event.LayerSegment, book: b})
	all := t.total(totalsKey{all: true, layer: event.LayerSegment, book: b})
	bs := bookSpace{id, driver, physical}
	tb := t.books[bs] // nil: nothing live (a free's lookup is fine)
	switch e.Kind {
	case event.KindAlloc, event.KindCreate:
		switch {
		case e.Ret != 0:
			per.Failed++
			all.Failed++
			return
		case e.Size == 0 || e.Addr == 0:
			return
		}
		if tb == nil {
			tb = &ledger.Table[uint64]{}
			t.books[bs] = tb
		}
		slot := tb.Ref(e.Addr)
		if old := *slot; old != 0 {
			per.live -= old
			all.live -= old
		}
		*slot = e.Size
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
		size, ok := tb.Take(e.Addr)
		if !ok {
			per.UnknownFrees++
			all.UnknownFrees++
			return
		}
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
		x = &trackTotals{CheckpointTotals: event.CheckpointTotals{PID: k.pid, All: k.all, Layer: k.layer, Host: k.host,
			Book: k.book, PerDevice: k.perDev, Device: k.device}}
		t.totals[k] = x
	}
	return x
}

// Events returns how many events the tracker followed.
func (t *Tracker) Events() uint64 { return t.events }

// Live returns how many events the tracker keeps to restore: the
// allocations live (physical memory included), mappings, reservations,
// nested allocations and releases of memory still mapped.
func (t *Tracker) Live() int { return t.live }

// Checkpoint summarises everything followed so far as the checkpoint of
// segment seg, and returns with it the live allocations' events in stream
// order, flagged FlagRestored: write the Checkpoint, then the events.
func (t *Tracker) Checkpoint(seg uint64) (*event.Checkpoint, []event.Event) {
	live := make([]*tracked, 0, t.live)
	for i := range t.recs {
		if t.recs[i].seq != 0 {
			live = append(live, &t.recs[i])
		}
	}
	slices.SortFunc(live, func(x, y *tracked) int { return cmp.Compare(x.seq, y.seq) })
	evs := make([]event.Event, len(live))
	restored := make(map[totalsKey]*event.CheckpointTotals)
	c := &event.Checkpoint{Time: t.last, Segment: seg, Events: t.events, FirstTime: t.first, Live: uint64(len(live))}
	for _, x := range t.totals {
		c.Totals = append(c.Totals, x.CheckpointTotals)
	}
	slices.SortFunc(c.Totals, func(x, y event.CheckpointTotals) int {
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
	for i, r := range live {
		evs[i] = r.ev
		evs[i].Flags |= event.FlagRestored
		e := &r.ev
		layer := e.Layer
		if layer == event.LayerUnknown {
			layer = event.LayerSegment
		}
		if layer == event.LayerSegment && e.API != event.APIUnknown {
			b := event.BookRuntime
			if e.API.Driver() {
				b = event.BookDriver
			}
			for _, k := range [...]totalsKey{{pid: e.PID, layer: layer, book: b}, {all: true, layer: layer, book: b}} {
				x := restored[k]
				switch {
				case x == nil:
				case (e.Kind == event.KindAlloc || e.Kind == event.KindCreate) && e.Size != 0:
					x.Allocations--
					x.AllocatedBytes -= e.Size
				case e.Kind == event.KindRelease:
					// A handle released while mapped: the book counted
					// its release, and counts it again when restored.
					x.Frees--
				}
			}
		}
		if !counted(e, layer) {
			continue
		}
		host := e.Kind == event.KindHostAlloc
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

// counted reports whether live event e, at layer (e's, unset read as the
// segment layer), is an allocation a scope's figures count: one the
// ledger holds.
func counted(e *event.Event, layer event.Layer) bool {
	switch layer {
	case event.LayerBlock:
		return e.Kind == event.KindAlloc
	case event.LayerSegment:
		return e.Flags&event.FlagNested == 0 &&
			(e.Kind == event.KindAlloc || e.Kind == event.KindHostAlloc || e.Kind == event.KindCreate)
	}
	return false
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

// Process follows a Process record. When it supersedes the PID's instance
// (ledger.Ledger.Process: the PID made calls since a record described it,
// so the process exec'd or another got the PID), the driver freed what the
// old instance had live: it leaves the all-process figures without frees
// counted, as in the analysis (analysis/instances.go), and the tracker
// forgets it (a checkpoint cannot name a superseded instance). The PID's
// own counts and peaks carry on, its levels from nothing.
func (t *Tracker) Process(p *event.Process) {
	_, old := t.l.Process(p)
	if old == nil {
		return
	}
	pid := p.PID
	for i := range t.recs {
		if r := &t.recs[i]; r.seq != 0 && r.ev.PID == pid {
			t.drop(int32(i))
		}
	}
	// The ledger took the old instance out of the scopes' levels; the
	// books' and devices' levels are the tracker's.
	for k, x := range t.totals {
		if k.pid != pid || k.all {
			continue
		}
		if k.book != event.BookNone || k.perDev {
			a := k
			a.pid, a.all = 0, true
			if y := t.totals[a]; y != nil {
				y.live -= x.live
			}
		}
		x.live = 0
	}
	for k := range t.side {
		if k.inst == old.ID {
			delete(t.side, k)
		}
	}
	t.lastSide = nil
	for k := range t.books {
		if k.inst == old.ID {
			delete(t.books, k)
		}
	}
	t.l.Forget(old.ID)
	for k, ps := range t.peaks {
		if k.all || k.pid == pid {
			ps.clearPID(pid)
		}
	}
	t.tl.forget(pid)
}
