package ledger

import "github.com/vramprof/vramprof/probes/event"

// The virtual memory API: physical memory (cuMemCreate) is device usage
// from creation until the driver frees it, which is when it has been
// released (cuMemRelease) and every range mapped to it unmapped
// (cuMemUnmap). A release of mapped memory therefore frees nothing yet.
// Reserved address space is no usage and is not kept here.

// handleKey is a physical allocation handle of one instance.
type handleKey struct {
	inst   uint32
	handle uint64
}

// handle is what the driver needs to know before it frees physical
// memory.
type handle struct {
	device   int32
	maps     int
	released bool
}

// rangeKey is a mapped range of one instance, by its start.
type rangeKey struct {
	inst uint32
	addr uint64
}

type mapping struct {
	size   uint64
	handle uint64
	device int32
	tag    int32
}

// Unmapping is one mapping a Map or Unmap call removed.
type Unmapping struct {
	// Size and Device are the mapped range's.
	Size   uint64
	Device int32
	// Freed says it was the last mapping of a released handle, whose
	// physical memory, Old, is no longer live; Inst is then the
	// instance's device-scope level just after (see InstanceLevel).
	Freed bool
	Old   Entry
	Inst  Level
	// Tag is the mapping's tag (see TagMapping).
	Tag int32
	// Handle is the physical allocation the range mapped (cuMemMap's
	// handle): Old's key when Freed.
	Handle uint64
}

// MapChange is what a Map or Unmap call did.
type MapChange struct {
	Verdict Verdict
	// Device is a mapped range's: its handle's, or the caller's when the
	// handle was created before tracing (Map).
	Device int32
	// Unmapped are the mappings that went, in order: the ranges an Unmap
	// removed, or the one a Map replaced (its unmap was missed). Valid
	// until the next call on the Ledger.
	Unmapped []Unmapping
}

// physicalKey is instance inst's key space of physical memory.
func physicalKey(inst uint32) Key {
	return Key{Inst: inst, Layer: event.LayerSegment, Space: Physical}
}

// Create applies cuMemCreate: physical memory e.Size bytes, keyed by its
// handle (e.Addr), in instance inst's physical key space.
func (l *Ledger) Create(inst uint32, e *event.Event) Change {
	ch := l.Alloc(physicalKey(inst), e)
	if ch.Verdict == Added || ch.Verdict == Replaced {
		// A handle live again (Replaced): its release was missed, and the
		// old handle's mapping count goes with it.
		l.handles[handleKey{inst, e.Addr}] = &handle{device: e.Device}
	}
	return ch
}

// Release applies cuMemRelease of handle e.Addr: Freed when nothing maps
// it, Kept when something still does (it goes at the last unmap).
func (l *Ledger) Release(inst uint32, e *event.Event) Change {
	hk := handleKey{inst, e.Addr}
	hs := l.handles[hk]
	switch {
	case e.Ret != 0:
		return Change{Verdict: Failed}
	case e.Addr == 0:
		return Change{Verdict: NoAddr}
	case hs == nil || hs.released:
		return Change{Verdict: Unknown}
	}
	hs.released = true
	if hs.maps > 0 {
		return Change{Verdict: Kept}
	}
	old, lv := l.dropPhysical(hk)
	return Change{Verdict: Freed, Old: old, Inst: lv}
}

// dropPhysical frees a handle's physical memory (see drop).
func (l *Ledger) dropPhysical(hk handleKey) (Entry, *Level) {
	delete(l.handles, hk)
	return l.drop(physicalKey(hk.inst), hk.handle)
}

// Map applies cuMemMap: e.Addr and e.Size are the range, e.Stream the
// handle.
func (l *Ledger) Map(inst uint32, e *event.Event) MapChange {
	switch {
	case e.Ret != 0:
		return MapChange{Verdict: Failed}
	case e.Addr == 0 || e.Size == 0:
		return MapChange{Verdict: NoAddr}
	}
	l.unmapped = l.unmapped[:0]
	rk := rangeKey{inst, e.Addr}
	if _, ok := l.mapped[rk]; ok {
		// Mapped again without an unmap seen: the old mapping goes first.
		l.unmapOne(rk)
	}
	device := e.Device
	if hs := l.handles[handleKey{inst, e.Stream}]; hs != nil {
		hs.maps++
		device = hs.device
	}
	l.mapped[rk] = mapping{size: e.Size, handle: e.Stream, device: device}
	return MapChange{Verdict: Mapped, Device: device, Unmapped: l.unmapped}
}

// TagMapping sets the caller's tag of the range mapped at addr in instance
// inst, as Entry.Tag is an allocation's: the Unmapping that removes the
// mapping returns it (the flight recorder's tracker stores there the Map
// event it restores). It reports whether a range is mapped there.
func (l *Ledger) TagMapping(inst uint32, addr uint64, tag int32) bool {
	rk := rangeKey{inst, addr}
	m, ok := l.mapped[rk]
	if ok {
		m.tag = tag
		l.mapped[rk] = m
	}
	return ok
}

// Unmap applies cuMemUnmap: every mapping that starts in [e.Addr,
// e.Addr+e.Size), contiguous from e.Addr, goes; Unknown when none does.
func (l *Ledger) Unmap(inst uint32, e *event.Event) MapChange {
	if e.Ret != 0 {
		return MapChange{Verdict: Failed}
	}
	l.unmapped = l.unmapped[:0]
	addr, end := e.Addr, e.Addr+e.Size
	for {
		rk := rangeKey{inst, addr}
		m, ok := l.mapped[rk]
		if !ok {
			break
		}
		l.unmapOne(rk)
		addr += m.size
		if addr >= end {
			break
		}
	}
	if len(l.unmapped) == 0 {
		return MapChange{Verdict: Unknown}
	}
	return MapChange{Verdict: Mapped, Unmapped: l.unmapped}
}

// unmapOne removes one mapping, freeing its physical memory when it was
// the last mapping of a released handle.
func (l *Ledger) unmapOne(rk rangeKey) {
	m := l.mapped[rk]
	delete(l.mapped, rk)
	u := Unmapping{Size: m.size, Device: m.device, Tag: m.tag, Handle: m.handle}
	hk := handleKey{rk.inst, m.handle}
	if hs := l.handles[hk]; hs != nil {
		hs.maps--
		if hs.maps == 0 && hs.released {
			var lv *Level
			u.Old, lv = l.dropPhysical(hk)
			if u.Freed = lv != nil; u.Freed {
				u.Inst = *lv
			}
		}
	}
	l.unmapped = append(l.unmapped, u)
}

// Mappings calls f with every range instance inst has mapped (its start,
// size and device), in no particular order, until f returns false.
func (l *Ledger) Mappings(inst uint32, f func(addr, size uint64, device int32) bool) {
	for rk, m := range l.mapped {
		if rk.inst == inst && !f(rk.addr, m.size, m.device) {
			return
		}
	}
}
