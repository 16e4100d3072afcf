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
// and every range mapped to it unmapped; mapped ranges say what is backed.

func (a *Analyzer) vmmAt(k vmmKey) *vmmState {
	v := a.vmm[k]
	if v == nil {
		v = &vmmState{}
		a.vmm[k] = v
	}
	return v
}

// vmmCount applies f to the counts of the process and of all processes.
// Every VMM call comes through it, so a process with VMM calls, even only
// failed ones, has VMM figures.
func (a *Analyzer) vmmCount(pid uint32, f func(c *VMM)) {
	f(&a.vmmAt(vmmKey{pid: pid, allDevices: true}).counts)
	f(&a.vmmAt(vmmKey{allPIDs: true, allDevices: true}).counts)
}

// vmmGauge applies f to the four scopes a change of pid's bytes on device
// touches: the process on the device, the process, all processes on the
// device, and all processes.
func (a *Analyzer) vmmGauge(pid uint32, device int32, f func(v *vmmState)) {
	f(a.vmmAt(vmmKey{pid: pid, device: device}))
	f(a.vmmAt(vmmKey{pid: pid, allDevices: true}))
	f(a.vmmAt(vmmKey{allPIDs: true, device: device}))
	f(a.vmmAt(vmmKey{allPIDs: true, allDevices: true}))
}

// create is cuMemCreate: physical memory, keyed by its handle, counted in
// the device totals as an allocation of space "physical".
func (a *Analyzer) create(e *event.Event) {
	ch := a.ledger.Create(e.PID, e)
	switch ch.Verdict {
	case ledger.Failed:
		a.vmmCount(e.PID, func(c *VMM) { c.FailedCalls++ })
	case ledger.Empty, ledger.NoAddr:
		a.vmmCount(e.PID, func(c *VMM) { c.UnknownCalls++ })
	case ledger.Replaced:
		// A handle live again: its release was missed. allocated replaces
		// the allocation; the VMM gauge forgets it here.
		a.vmmGauge(e.PID, ch.Old.Device, func(v *vmmState) { v.physical.sub(ch.Old.Size) })
	}
	if !a.allocated(e, event.LayerSegment, SpacePhysical, ch) {
		return
	}
	a.vmmCount(e.PID, func(c *VMM) { c.Creates++ })
	a.vmmGauge(e.PID, e.Device, func(v *vmmState) { v.physical.add(e.Size, e.Time) })
}

// releaseHandle is cuMemRelease. The memory goes now when nothing maps it,
// else at the last unmap (the ledger's rule).
func (a *Analyzer) releaseHandle(e *event.Event) {
	ls, sp := a.layer(deviceScope), a.space(e.PID, deviceScope)
	switch ch := a.ledger.Release(e.PID, e); ch.Verdict {
	case ledger.Failed:
		both(ls, sp, func(t *Totals) { t.FailedFrees++ })
		a.vmmCount(e.PID, func(c *VMM) { c.FailedCalls++ })
	case ledger.NoAddr:
		both(ls, sp, func(t *Totals) { t.NullFrees++ })
		a.vmmCount(e.PID, func(c *VMM) { c.UnknownCalls++ })
	case ledger.Unknown:
		both(ls, sp, func(t *Totals) { t.UnknownFrees++ })
		a.vmmCount(e.PID, func(c *VMM) { c.UnknownCalls++ })
	case ledger.Kept:
		a.vmmCount(e.PID, func(c *VMM) { c.Releases++ })
	case ledger.Freed:
		a.vmmCount(e.PID, func(c *VMM) { c.Releases++ })
		a.physicalFreed(e.PID, ch.Old, e.Time)
	}
}

// physicalFreed counts physical memory the ledger let go at t.
func (a *Analyzer) physicalFreed(pid uint32, old ledger.Entry, t uint64) {
	a.vmmGauge(pid, old.Device, func(v *vmmState) { v.physical.sub(old.Size) })
	a.dropped(pid, deviceScope, old, t)
}

// reserve is cuMemAddressReserve: address space, not usage.
func (a *Analyzer) reserve(e *event.Event) {
	switch {
	case e.Ret != 0:
		a.vmmCount(e.PID, func(c *VMM) { c.FailedCalls++ })
		return
	case e.Addr == 0 || e.Size == 0:
		a.vmmCount(e.PID, func(c *VMM) { c.UnknownCalls++ })
		return
	}
	rk := rangeKey{e.PID, e.Addr}
	if old, ok := a.reservations[rk]; ok {
		a.vmmGauge(e.PID, old.device, func(v *vmmState) { v.reserved.sub(old.size) })
	}
	a.reservations[rk] = vmmRange{size: e.Size, device: e.Device}
	a.vmmCount(e.PID, func(c *VMM) { c.Reserves++ })
	a.vmmGauge(e.PID, e.Device, func(v *vmmState) { v.reserved.add(e.Size, e.Time) })
}

// unreserve is cuMemAddressFree: the whole reservation at Addr goes.
func (a *Analyzer) unreserve(e *event.Event) {
	rk := rangeKey{e.PID, e.Addr}
	r, ok := a.reservations[rk]
	switch {
	case e.Ret != 0:
		a.vmmCount(e.PID, func(c *VMM) { c.FailedCalls++ })
		return
	case !ok:
		a.vmmCount(e.PID, func(c *VMM) { c.UnknownCalls++ })
		return
	}
	delete(a.reservations, rk)
	a.vmmCount(e.PID, func(c *VMM) { c.Unreserves++ })
	a.vmmGauge(e.PID, r.device, func(v *vmmState) { v.reserved.sub(r.size) })
}

// mapRange is cuMemMap: Addr and Size the range, Stream the handle. The
// range's device is the handle's, or the caller's when the handle was
// created before attach.
func (a *Analyzer) mapRange(e *event.Event) {
	ch := a.ledger.Map(e.PID, e)
	switch ch.Verdict {
	case ledger.Failed:
		a.vmmCount(e.PID, func(c *VMM) { c.FailedCalls++ })
		return
	case ledger.NoAddr:
		a.vmmCount(e.PID, func(c *VMM) { c.UnknownCalls++ })
		return
	}
	a.unmapped(e.PID, ch.Unmapped, e.Time) // mapped again without an unmap seen
	a.vmmCount(e.PID, func(c *VMM) { c.Maps++ })
	a.vmmGauge(e.PID, ch.Device, func(v *vmmState) { v.mapped.add(e.Size, e.Time) })
}

// unmapRange is cuMemUnmap: every mapping that starts in [Addr, Addr+Size),
// contiguous from Addr, goes.
func (a *Analyzer) unmapRange(e *event.Event) {
	switch ch := a.ledger.Unmap(e.PID, e); ch.Verdict {
	case ledger.Failed:
		a.vmmCount(e.PID, func(c *VMM) { c.FailedCalls++ })
	case ledger.Unknown:
		a.vmmCount(e.PID, func(c *VMM) { c.UnknownCalls++ })
	default:
		a.unmapped(e.PID, ch.Unmapped, e.Time)
		a.vmmCount(e.PID, func(c *VMM) { c.Unmaps++ })
	}
}

// unmapped counts the mappings the ledger removed at t, and the physical
// memory that went with the last mapping of a released handle.
func (a *Analyzer) unmapped(pid uint32, us []ledger.Unmapping, t uint64) {
	for _, u := range us {
		a.vmmGauge(pid, u.Device, func(v *vmmState) { v.mapped.sub(u.Size) })
		if u.Freed {
			a.physicalFreed(pid, u.Old, t)
		}
	}
}

// finishVMM returns the VMM figures of one process (all false) or of all
// processes; nil when there were no VMM calls there.
func (a *Analyzer) finishVMM(pid uint32, all bool) *VMM {
	top := a.vmm[vmmKey{pid: pid, allPIDs: all, allDevices: true}]
	if top == nil {
		return nil
	}
	out := top.counts
	out.VMMBytes = top.bytes()
	for k, v := range a.vmm {
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
