package ledger

import "github.com/vramprof/vramprof/probes/event"

// Space is the kind of memory a live allocation holds. Its values are
// analysis.MemorySpace's, in the same order.
type Space uint8

const (
	// Device is device memory from an allocation call (cudaMalloc,
	// cuMemAlloc, a caching allocator's block).
	Device Space = iota
	// Physical is physical device memory from cuMemCreate, keyed by its
	// handle: live from creation until released and no longer mapped.
	Physical
	// Host is pinned host memory (cudaMallocHost, cuMemHostAlloc...).
	Host
)

// Key names one key space of live allocations: one process instance's
// allocations at one layer in one memory space. An address (or handle) is
// live at most once in a key space; the same number in two key spaces is
// two allocations (forked workers get equal pointers; a handle is no
// pointer).
type Key struct {
	// Inst is the process instance's id (see Ledger.Active), not its PID.
	Inst  uint32
	Layer event.Layer
	Space Space
}

// Scope is what one all-process level counts: a layer and, at the segment
// layer, device memory (allocations and physical memory together) or
// pinned host memory.
type Scope struct {
	Layer event.Layer
	Host  bool
}

// packed is k in one word (the key spaces' cache compares it, not the
// fields one by one).
func (k Key) packed() uint64 { return uint64(k.Inst)<<16 | uint64(k.Layer)<<8 | uint64(k.Space) }

// Scope returns the all-process scope a key space counts in.
func (k Key) Scope() Scope { return Scope{Layer: k.Layer, Host: k.Space == Host} }

// DeviceScope is device memory at the segment layer: report.json's
// "totals" and the status line's "live" and "peak".
var DeviceScope = Scope{Layer: event.LayerSegment}

// Entry is one live allocation. It is kept small (24 bytes): a trace may
// hold millions live at once.
type Entry struct {
	// Time is when it was allocated (ns).
	Time uint64
	// Size is its size in bytes, never 0.
	Size uint64
	// Device is the allocation call's device, as the caller gave it.
	Device int32
	// Tag is the caller's: the analysis stores its allocation class.
	Tag int32
}

// Level is a running count of live allocations and bytes with the most
// bytes ever live at once and when that was first reached.
type Level struct {
	Count, Bytes   uint64
	Peak, PeakTime uint64
}

func (v *Level) add(n, t uint64) {
	v.Count++
	v.Bytes += n
	if v.Bytes > v.Peak {
		v.Peak, v.PeakTime = v.Bytes, t
	}
}

func (v *Level) sub(n uint64) {
	v.Count--
	v.Bytes -= n
}

// keySpace is one key space's live allocations and level. inst is its
// instance's level in the key space's scope (device and physical memory
// share one), which it updates with its own.
type keySpace struct {
	key   Key
	table Table[Entry]
	level Level
	inst  *Level
}

// instScope is one instance's memory in one scope.
type instScope struct {
	inst  uint32
	scope Scope
}

// Verdict says what a call did to the ledger.
type Verdict uint8

const (
	// Failed: the call returned an error; nothing changed.
	Failed Verdict = iota + 1
	// Empty: an allocation of 0 bytes; nothing changed.
	Empty
	// NoAddr: a call without an address (or handle); nothing changed.
	NoAddr
	// Added: the allocation is live.
	Added
	// Replaced: the allocation is live, and an allocation already live at
	// its address went first (its free was missed): Change.Old.
	Replaced
	// Freed: the allocation in Change.Old is no longer live.
	Freed
	// Unknown: a free, release or unmap of nothing live (allocated before
	// tracing began, freed twice, or never).
	Unknown
	// Kept: a release of physical memory still mapped: it stays live until
	// its last mapping goes.
	Kept
	// Mapped: a range was mapped (Map), or ranges unmapped (Unmap).
	Mapped
)

// Change is what an allocation or free call did.
type Change struct {
	Verdict Verdict
	// Old is the allocation that went (Replaced, Freed).
	Old Entry
	// New is the stored allocation (Added, Replaced). The caller may set
	// its Tag; the pointer is valid until the next call on the Ledger.
	New *Entry
	// Inst is the instance's level in the scope after the call (Added,
	// Replaced, Freed; see InstanceLevel): what the process has live.
	// After Replaced it counts the new allocation and not the old, so
	// between the two it was one allocation and Entry.Size bytes (of New)
	// lower. Valid until the next call on the Ledger.
	Inst *Level
}

// Ledger is the one model of live GPU memory: the process instances, every
// live allocation of every instance, layer and memory space, the rules
// that make memory live and not (a failed call is never live; a missed free
// is a free at the next allocation of the address; physical memory is live
// until released and unmapped; an exited instance's memory leaves the
// all-process levels), and the levels and peaks those rules give per key
// space and per scope, all processes together.
//
// The analysis, the snapshot exporter and the live status line all read
// it: what is live where, and when, has one definition. A Ledger is not
// safe for concurrent use. The zero value is not ready: use New.
type Ledger struct {
	spaces map[Key]*keySpace
	// recent caches the latest key spaces: consecutive events mostly come
	// from one process, alternating between a few layers. Their keys are
	// kept beside them: the scan reads this array only.
	recent [4]recentSpace
	next   int
	// scopes are the all-process levels; scopeAt caches them by
	// scopeIndex.
	scopes  map[Scope]*Level
	scopeAt [8]*Level
	// instLevels are the per-instance levels.
	instLevels map[instScope]*Level

	instances

	// VMM: physical handles (their mapping counts) and mapped ranges.
	handles map[handleKey]*handle
	mapped  map[rangeKey]mapping
	// unmapped is the buffer of Map's and Unmap's results.
	unmapped []Unmapping
}

// New returns an empty Ledger.
func New() *Ledger {
	return &Ledger{
		spaces:     make(map[Key]*keySpace),
		scopes:     make(map[Scope]*Level),
		instLevels: make(map[instScope]*Level),
		instances:  newInstances(),
		handles:    make(map[handleKey]*handle),
		mapped:     make(map[rangeKey]mapping),
	}
}

// recentSpace is an entry of Ledger.recent: a key space and its key
// (Key.packed).
type recentSpace struct {
	key uint64
	ks  *keySpace
}

func (l *Ledger) space(k Key, create bool) *keySpace {
	pk := k.packed()
	for i := range l.recent {
		if r := &l.recent[i]; r.key == pk && r.ks != nil {
			return r.ks
		}
	}
	ks := l.spaces[k]
	if ks == nil {
		if !create {
			return nil
		}
		ks = &keySpace{key: k, inst: l.instLevel(instScope{k.Inst, k.Scope()})}
		l.spaces[k] = ks
	}
	l.recent[l.next] = recentSpace{pk, ks}
	l.next = (l.next + 1) % len(l.recent)
	return ks
}

// instLevel returns an instance's level in a scope, creating it.
func (l *Ledger) instLevel(k instScope) *Level {
	v := l.instLevels[k]
	if v == nil {
		v = &Level{}
		l.instLevels[k] = v
	}
	return v
}

func scopeIndex(s Scope) int {
	ix := int(s.Layer) << 1
	if s.Host {
		ix |= 1
	}
	return ix
}

func (l *Ledger) scope(s Scope) *Level {
	ix := scopeIndex(s)
	if ix < len(l.scopeAt) {
		if v := l.scopeAt[ix]; v != nil {
			return v
		}
	}
	v := l.scopes[s]
	if v == nil {
		v = &Level{}
		l.scopes[s] = v
	}
	if ix < len(l.scopeAt) {
		l.scopeAt[ix] = v
	}
	return v
}

// Alloc applies an allocation call in key space k: e's Ret, Addr, Size,
// Device and Time are read, e.PID is not (k.Inst says whose it is).
func (l *Ledger) Alloc(k Key, e *event.Event) Change {
	var ch Change
	l.AllocTo(&ch, k, e)
	return ch
}

// AllocTo is Alloc writing the change into *ch (every field of it): a
// caller that keeps one Change for all its calls (the analysis, at every
// event) saves a copy of it per call.
func (l *Ledger) AllocTo(ch *Change, k Key, e *event.Event) {
	ch.Old, ch.New, ch.Inst = Entry{}, nil, nil
	switch {
	case e.Ret != 0:
		ch.Verdict = Failed
		return
	case e.Size == 0:
		ch.Verdict = Empty
		return
	case e.Addr == 0:
		ch.Verdict = NoAddr
		return
	}
	ks := l.space(k, true)
	sl := l.scope(k.Scope())
	ch.Verdict = Added
	slot := ks.table.put(e.Addr)
	if slot.Size != 0 { // a live entry: its free was missed
		ch.Verdict, ch.Old = Replaced, *slot
		ks.level.sub(slot.Size)
		ks.inst.sub(slot.Size)
		sl.sub(slot.Size)
	}
	slot.Time, slot.Size, slot.Device, slot.Tag = e.Time, e.Size, e.Device, 0
	ks.level.add(e.Size, e.Time)
	ks.inst.add(e.Size, e.Time)
	sl.add(e.Size, e.Time)
	ch.New, ch.Inst = slot, ks.inst
}

// Free applies a free call in key space k (e's Ret and Addr are read).
func (l *Ledger) Free(k Key, e *event.Event) Change {
	var ch Change
	l.FreeTo(&ch, k, e)
	return ch
}

// FreeTo is Free writing the change into *ch (see AllocTo).
func (l *Ledger) FreeTo(ch *Change, k Key, e *event.Event) {
	ch.Old, ch.New, ch.Inst = Entry{}, nil, nil
	switch {
	case e.Ret != 0:
		ch.Verdict = Failed
		return
	case e.Addr == 0:
		ch.Verdict = NoAddr
		return
	}
	old, inst := l.drop(k, e.Addr)
	if inst == nil {
		ch.Verdict = Unknown
		return
	}
	ch.Verdict, ch.Old, ch.Inst = Freed, old, inst
}

// drop takes addr's live allocation out of key space k and returns it
// with its instance's level after; a nil level when none was live.
func (l *Ledger) drop(k Key, addr uint64) (Entry, *Level) {
	ks := l.space(k, false)
	if ks == nil {
		return Entry{}, nil
	}
	old, ok := ks.table.Take(addr)
	if !ok {
		return Entry{}, nil
	}
	ks.level.sub(old.Size)
	ks.inst.sub(old.Size)
	l.scope(k.Scope()).sub(old.Size)
	return old, ks.inst
}

// Get returns the allocation live at addr in key space k.
func (l *Ledger) Get(k Key, addr uint64) (Entry, bool) {
	ks := l.space(k, false)
	if ks == nil {
		return Entry{}, false
	}
	return ks.table.Get(addr)
}

// All calls f with every allocation live in key space k, in no particular
// order, until f returns false. f must not change the Ledger.
func (l *Ledger) All(k Key, f func(addr uint64, e Entry) bool) {
	if ks := l.spaces[k]; ks != nil {
		ks.table.All(f)
	}
}

// Level returns key space k's level: what one instance has live at one
// layer in one memory space, and its peak. An instance's levels stay as
// they were when it is superseded.
func (l *Ledger) Level(k Key) Level {
	if ks := l.spaces[k]; ks != nil {
		return ks.level
	}
	return Level{}
}

// InstanceLevel returns instance inst's level in scope s: what it has
// live there (device scope: its device and physical memory together) and
// its peak. Unlike the all-process levels it stays as it was when the
// instance is superseded.
func (l *Ledger) InstanceLevel(inst uint32, s Scope) Level {
	if v := l.instLevels[instScope{inst, s}]; v != nil {
		return *v
	}
	return Level{}
}

// ScopeLevel returns the all-process level of scope s: the live
// allocations of every current instance, and the peak of their sum.
func (l *Ledger) ScopeLevel(s Scope) Level {
	if ix := scopeIndex(s); ix < len(l.scopeAt) && l.scopeAt[ix] != nil {
		return *l.scopeAt[ix]
	}
	if v := l.scopes[s]; v != nil {
		return *v
	}
	return Level{}
}

// retire takes instance id's live memory out of the all-process levels:
// the driver freed it when the process exited or exec'd. Its own levels
// and live allocations stay, so what it had live at its end is what it
// leaked.
func (l *Ledger) retire(id uint32) {
	for k, ks := range l.spaces {
		if k.Inst != id {
			continue
		}
		v := l.scope(k.Scope())
		v.Count -= ks.level.Count
		v.Bytes -= ks.level.Bytes
	}
}
