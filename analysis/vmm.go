package analysis

import (
	"cmp"
	"slices"

	"github.com/vramprof/vramprof/analysis/ledger"
	"github.com/vramprof/vramprof/probes/event"
)

// The virtual memory API (see doc.go, "Virtual memory"): reserved ranges are
// address space only; physical memory (cuMemCreate) is device usage from
// creation until the driver frees it, which is when it has been released
// and every range mapped to it unmapped (the ledger's rule); mapped ranges
// say what is backed.

// vmmModel is the VMM figures (calls, and reserved, physical and mapped
// bytes) per process instance x device, with the reservations, which are
// address space and no memory, so not the ledger's. It is fed each VMM
// call with what the ledger made of it.
type vmmModel struct {
	reservations map[rangeKey]vmmRange
	scopes       map[vmmKey]*vmmState
}

func newVMMModel() *vmmModel {
	return &vmmModel{reservations: make(map[rangeKey]vmmRange), scopes: make(map[vmmKey]*vmmState)}
}

func (m *vmmModel) at(k vmmKey) *vmmState {
	v := m.scopes[k]
	if v == nil {
		v = &vmmState{}
		m.scopes[k] = v
	}
	return v
}

// count applies f to the counts of the process and of all processes.
// Every VMM call comes through it, so a process with VMM calls, even only
// failed ones, has VMM figures.
func (m *vmmModel) count(pid uint32, f func(c *VMM)) {
	f(&m.at(vmmKey{pid: pid, allDevices: true}).counts)
	f(&m.at(vmmKey{allPIDs: true, allDevices: true}).counts)
}

// gauge applies f to the four scopes a change of pid's bytes on device
// touches: the process on the device, the process, all processes on the
// device, and all processes.
func (m *vmmModel) gauge(pid uint32, device int32, f func(v *vmmState)) {
	f(m.at(vmmKey{pid: pid, device: device}))
	f(m.at(vmmKey{pid: pid, allDevices: true}))
	f(m.at(vmmKey{allPIDs: true, device: device}))
	f(m.at(vmmKey{allPIDs: true, allDevices: true}))
}

// created counts a cuMemCreate.
func (m *vmmModel) created(e *event.Event, ch ledger.Change) {
	switch ch.Verdict {
	case ledger.Failed:
		m.count(e.PID, func(c *VMM) { c.FailedCalls++ })
		return
	case ledger.Empty, ledger.NoAddr:
		m.count(e.PID, func(c *VMM) { c.UnknownCalls++ })
		return
	case ledger.Replaced:
		// A handle live again: its release was missed.
		m.gauge(e.PID, ch.Old.Device, func(v *vmmState) { v.physical.sub(ch.Old.Size) })
	}
	m.count(e.PID, func(c *VMM) { c.Creates++ })
	m.gauge(e.PID, e.Device, func(v *vmmState) { v.physical.add(e.Size, e.Time) })
}

// released counts a cuMemRelease.
func (m *vmmModel) released(e *event.Event, ch ledger.Change) {
	switch ch.Verdict {
	case ledger.Failed:
		m.count(e.PID, func(c *VMM) { c.FailedCalls++ })
	case ledger.NoAddr, ledger.Unknown:
		m.count(e.PID, func(c *VMM) { c.UnknownCalls++ })
	case ledger.Kept:
		m.count(e.PID, func(c *VMM) { c.Releases++ })
	case ledger.Freed:
		m.count(e.PID, func(c *VMM) { c.Releases++ })
		m.gauge(e.PID, ch.Old.Device, func(v *vmmState) { v.physical.sub(ch.Old.Size) })
	}
}

// mapped counts a cuMemMap (ch from ledger.Map) or a cuMemUnmap (from
// ledger.Unmap; unmap set).
func (m *vmmModel) mapped(e *event.Event, ch ledger.MapChange, unmap bool) {
	switch ch.Verdict {
	case ledger.Failed:
		m.count(e.PID, func(c *VMM) { c.FailedCalls++ })
		return
	case ledger.NoAddr, ledger.Unknown:
		m.count(e.PID, func(c *VMM) { c.UnknownCalls++ })
		return
	}
	for _, u := range ch.Unmapped {
		m.gauge(e.PID, u.Device, func(v *vmmState) { v.mapped.sub(u.Size) })
		if u.Freed {
			m.gauge(e.PID, u.Old.Device, func(v *vmmState) { v.physical.sub(u.Old.Size) })
		}
	}
	if unmap {
		m.count(e.PID, func(c *VMM) { c.Unmaps++ })
		return
	}
	m.count(e.PID, func(c *VMM) { c.Maps++ })
	m.gauge(e.PID, ch.Device, func(v *vmmState) { v.mapped.add(e.Size, e.Time) })
}

// reserve is cuMemAddressReserve: address space, not usage.
func (m *vmmModel) reserve(e *event.Event) {
	switch {
	case e.Ret != 0:
		m.count(e.PID, func(c *VMM) { c.FailedCalls++ })
		return
	case e.Addr == 0 || e.Size == 0:
		m.count(e.PID, func(c *VMM) { c.UnknownCalls++ })
		return
	}
	rk := rangeKey{e.PID, e.Addr}
	if old, ok := m.reservations[rk]; ok {
		m.gauge(e.PID, old.device, func(v *vmmState) { v.reserved.sub(old.size) })
	}
	m.reservations[rk] = vmmRange{size: e.Size, device: e.Device}
	m.count(e.PID, func(c *VMM) { c.Reserves++ })
	m.gauge(e.PID, e.Device, func(v *vmmState) { v.reserved.add(e.Size, e.Time) })
}

// reservationStart reports whether process pid reserved a range that
// starts at addr.
func (m *vmmModel) reservationStart(pid uint32, addr uint64) bool {
	_, ok := m.reservations[rangeKey{pid, addr}]
	return ok
}

// unreserve is cuMemAddressFree: the whole reservation at Addr goes.
func (m *vmmModel) unreserve(e *event.Event) {
	rk := rangeKey{e.PID, e.Addr}
	r, ok := m.reservations[rk]
	switch {
	case e.Ret != 0:
		m.count(e.PID, func(c *VMM) { c.FailedCalls++ })
		return
	case !ok:
		m.count(e.PID, func(c *VMM) { c.UnknownCalls++ })
		return
	}
	delete(m.reservations, rk)
	m.count(e.PID, func(c *VMM) { c.Unreserves++ })
	m.gauge(e.PID, r.device, func(v *vmmState) { v.reserved.sub(r.size) })
}

// retire takes instance id's bytes out of the all-process figures.
func (m *vmmModel) retire(id uint32) {
	for k, v := range m.scopes {
		if k.pid != id || k.allPIDs || k.allDevices {
			continue
		}
		for _, all := range []vmmKey{{allPIDs: true, device: k.device}, {allPIDs: true, allDevices: true}} {
			s := m.at(all)
			s.reserved.sub(v.reserved.live)
			s.physical.sub(v.physical.live)
			s.mapped.sub(v.mapped.live)
		}
	}
}

// finish returns the VMM figures of one process (all false) or of all
// processes; nil when there were no VMM calls there.
func (m *vmmModel) finish(pid uint32, all bool) *VMM {
	top := m.scopes[vmmKey{pid: pid, allPIDs: all, allDevices: true}]
	if top == nil {
		return nil
	}
	out := top.counts
	out.VMMBytes = top.bytes()
	for k, v := range m.scopes {
		if k.allDevices || k.allPIDs != all || (!all && k.pid != pid) {
			continue
		}
		out.Devices = append(out.Devices, VMMDevice{Index: k.device, VMMBytes: v.bytes()})
	}
	slices.SortFunc(out.Devices, func(x, y VMMDevice) int { return cmp.Compare(x.Index, y.Index) })
	return &out
}

func (v *vmmState) bytes() VMMBytes {
	return VMMBytes{
		ReservedPeakBytes: v.reserved.peak, ReservedBytesAtEnd: v.reserved.live,
		PhysicalPeakBytes: v.physical.peak, PhysicalBytesAtEnd: v.physical.live,
		MappedPeakBytes: v.mapped.peak, MappedBytesAtEnd: v.mapped.live,
	}
}

// create is cuMemCreate: physical memory, keyed by its handle, counted in
// the device totals as an allocation of space "physical".
func (a *Analyzer) create(e *event.Event) {
	ch := a.ledger.Create(e.PID, e)
	a.vmm.created(e, ch)
	a.allocated(e, event.LayerSegment, SpacePhysical, &ch)
	a.pools.created(e, &ch)
}

// releaseHandle is cuMemRelease. The memory goes now when nothing maps it,
// else at the last unmap.
func (a *Analyzer) releaseHandle(e *event.Event) {
	ch := a.ledger.Release(e.PID, e)
	a.vmm.released(e, ch)
	a.freed(e, event.LayerSegment, SpaceDevice, &ch) // kept while mapped: nothing yet
}

// mapRange is cuMemMap: Addr and Size the range, Stream the handle. The
// range's device is the handle's, or the caller's when the handle was
// created before attach. A range mapped again without an unmap seen is
// unmapped first.
func (a *Analyzer) mapRange(e *event.Event) {
	ch := a.ledger.Map(e.PID, e)
	a.vmm.mapped(e, ch, false)
	a.pools.mapped(e, &ch, false)
	a.unmapped(e.PID, ch.Unmapped, e.Time)
}

// unmapRange is cuMemUnmap: every mapping that starts in [Addr, Addr+Size),
// contiguous from Addr, goes.
func (a *Analyzer) unmapRange(e *event.Event) {
	ch := a.ledger.Unmap(e.PID, e)
	a.vmm.mapped(e, ch, true)
	a.pools.mapped(e, &ch, true)
	a.unmapped(e.PID, ch.Unmapped, e.Time)
}

// unmapped counts the physical memory that went with the last mapping of
// a released handle as freed at t.
func (a *Analyzer) unmapped(pid uint32, us []ledger.Unmapping, t uint64) {
	for _, u := range us {
		if u.Freed {
			a.dropped(pid, deviceScope, u.Old, u.Handle, t, u.Inst)
		}
	}
}
