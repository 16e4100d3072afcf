package analysis

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/vramprof/vramprof/probes/event"
)

// The device layer (see doc.go, "The device layer"): NVML's status, its
// devices, and its samples reconciled with the traced figures.

// nvmlState is what the NVML records said so far.
type nvmlState struct {
	// seen is set by any NVML record; without one, Result.NVML is nil.
	seen bool
	// available is set once a status said sampling works; until then,
	// reason is the first reason it did not.
	available     bool
	reason        string
	samples       uint64
	interruptions uint64
	lastError     string
	devices       map[int32]*nvmlDevice
	tick          nvmlTick
}

// nvmlDevice is one NVML device: its DeviceInfo and its samples in stream
// order, kept whole because the traced peak they are read at is known only
// at the end (32 bytes a sample: a day at 10 per second is 28 MB a device).
type nvmlDevice struct {
	name, uuid string
	pciBusID   string
	// note is the latest DeviceInfo's ProcessesNote that was not empty.
	note    string
	samples []DeviceSample
}

// nvmlTick gathers the samples of one sampling tick (the sampler stamps
// every device of a tick with the same time) per process instance.
type nvmlTick struct {
	open   bool
	time   uint64
	used   map[uint32]uint64 // instance id -> NVML bytes, summed over devices
	traced map[uint32]uint64 // instance id -> traced live bytes
}

// procSample is one tick that listed a process instance.
type procSample struct {
	time, nvml, traced uint64
}

func (a *Analyzer) nvmlDevice(index int32) *nvmlDevice {
	if a.nvml.devices == nil {
		a.nvml.devices = make(map[int32]*nvmlDevice)
	}
	d := a.nvml.devices[index]
	if d == nil {
		d = &nvmlDevice{}
		a.nvml.devices[index] = d
	}
	return d
}

func (a *Analyzer) deviceInfo(r *event.DeviceInfo) {
	a.nvml.seen = true
	d := a.nvmlDevice(r.Index)
	d.name, d.uuid, d.pciBusID = r.Name, r.UUID, r.PCIBusID
	if r.ProcessesNote != "" {
		d.note = r.ProcessesNote
	}
}

func (a *Analyzer) nvmlStatus(r *event.NVMLStatus) {
	a.nvml.seen = true
	reason := strings.TrimPrefix(r.Reason, NVMLUnavailablePrefix)
	switch {
	case r.Available:
		a.nvml.available = true
	case a.nvml.available:
		a.nvml.interruptions++
		a.nvml.lastError = reason
	case a.nvml.reason == "":
		a.nvml.reason = reason
	}
}

// sample records one device's sample and adds the traced processes it
// lists to the current tick. A process with UsedBytes 0 is one NVML cannot
// size; a tick that sizes it on no device does not count for it.
func (a *Analyzer) sample(r *event.Sample) {
	a.nvml.seen = true
	a.nvml.samples++
	a.seenDevices[r.Device] = true
	if r.TotalBytes > 0 && a.capacity[r.Device] == 0 {
		a.capacity[r.Device] = r.TotalBytes
	}
	d := a.nvmlDevice(r.Device)
	d.samples = append(d.samples, DeviceSample{Time: r.Time, UsedBytes: r.UsedBytes,
		FreeBytes: r.FreeBytes, TotalBytes: r.TotalBytes})

	t := &a.nvml.tick
	if t.open && t.time != r.Time {
		a.closeTick()
	}
	if !t.open {
		t.open, t.time = true, r.Time
		if t.used == nil {
			t.used, t.traced = make(map[uint32]uint64), make(map[uint32]uint64)
		}
	}
	for _, pu := range r.Processes {
		id, ok := a.ledger.Current(pu.PID)
		if !ok {
			continue // not traced
		}
		t.used[id] += pu.UsedBytes
		t.traced[id] = a.tracedLive(id)
	}
}

// tracedLive is an instance's live device memory, all devices.
func (a *Analyzer) tracedLive(id uint32) uint64 {
	return a.ledger.InstanceLevel(id, ledgerScope(deviceScope)).Bytes
}

// closeTick files the open tick's figures with their instances.
func (a *Analyzer) closeTick() {
	t := &a.nvml.tick
	if !t.open {
		return
	}
	for id, used := range t.used {
		in := a.facts(id)
		if used == 0 {
			in.nvmlUnsized++
			continue
		}
		in.nvml = append(in.nvml, procSample{time: t.time, nvml: used, traced: t.traced[id]})
	}
	clear(t.used)
	clear(t.traced)
	t.open = false
}

// finishNVML fills Result.NVML and each device's NVML figures; it runs
// after finishDevices.
func (a *Analyzer) finishNVML(r *Result) {
	a.closeTick()
	if !a.nvml.seen {
		return
	}
	n := &NVML{Available: a.nvml.available, Samples: a.nvml.samples,
		Interruptions: a.nvml.interruptions, LastError: a.nvml.lastError}
	if !n.Available {
		n.Reason = a.nvml.reason
		if n.Reason == "" {
			n.Reason = "no NVML status said why"
		}
	}
	if n.Available {
		idx := slices.Sorted(maps.Keys(a.nvml.devices))
		for _, i := range idx {
			if note := a.nvml.devices[i].note; note != "" {
				n.Notes = append(n.Notes, "NVML device "+DeviceName(i)+": "+note)
			}
		}
	}
	r.NVML = n
	for i := range r.Devices {
		dv := &r.Devices[i]
		d := a.nvml.devices[dv.Index]
		if d == nil {
			continue
		}
		dv.Name, dv.UUID, dv.PCIBusID = d.name, d.uuid, d.pciBusID
		if len(d.samples) == 0 {
			continue
		}
		// The sampler stamps them in order; sort anyway, a merged stream
		// may not be.
		slices.SortStableFunc(d.samples, func(x, y DeviceSample) int { return cmp.Compare(x.Time, y.Time) })
		dn := &DeviceNVML{Samples: uint64(len(d.samples)), Last: d.samples[len(d.samples)-1]}
		dn.Max = d.samples[0]
		for _, s := range d.samples[1:] {
			if s.UsedBytes > dn.Max.UsedBytes {
				dn.Max = s
			}
		}
		if dv.PeakBytes > 0 {
			if j := latestAtOrBefore(len(d.samples), func(k int) uint64 { return d.samples[k].Time }, dv.PeakTime); j >= 0 {
				s := d.samples[j]
				dn.AtPeak = &s
			}
		}
		dv.NVML = dn
	}
}

// processNVML returns an instance's reconciliation and its pre-existing
// memory; p's peak figures must be set.
func (a *Analyzer) processNVML(in *instance, p *Process) (*ProcessNVML, Preexisting) {
	fromStart := in.fromStart || in.info == nil && a.run.Mode == "run" && in.id == a.run.PID
	pre := Preexisting{Basis: PreexistingUnknown}
	if fromStart {
		pre.Basis = PreexistingNone
	}
	ss := in.nvml
	if len(ss) == 0 {
		p.NVMLAbsent = a.nvmlAbsent(in)
		return nil, pre
	}
	slices.SortStableFunc(ss, func(x, y procSample) int { return cmp.Compare(x.time, y.time) })
	rec := func(s procSample) Reconciliation {
		return Reconciliation{Time: s.time, NVMLBytes: s.nvml, TracedBytes: s.traced,
			GapBytes: int64(s.nvml) - int64(s.traced)}
	}
	pn := &ProcessNVML{Samples: uint64(len(ss)), Latest: rec(ss[len(ss)-1])}
	if p.Totals.PeakBytes > 0 {
		if j := latestAtOrBefore(len(ss), func(k int) uint64 { return ss[k].time }, p.PeakTime); j >= 0 {
			at := rec(ss[j])
			pn.AtPeak = &at
		}
	}
	if !fromStart {
		// The first tick after tracing began: ticks are filed with the
		// instance current when they arrive, so every one of in's came
		// after its start.
		at := rec(ss[0])
		pre = Preexisting{Basis: PreexistingEstimate, Bytes: uint64(max(at.GapBytes, 0)), At: &at}
	}
	return pn, pre
}

// nvmlAbsent says in one line why no NVML sample sized instance in; empty
// when NVML did not sample. Device samples must be sorted (finishNVML).
func (a *Analyzer) nvmlAbsent(in *instance) string {
	if !a.nvml.available {
		return ""
	}
	if in.nvmlUnsized > 0 {
		return fmt.Sprintf("NVML listed it in %d samples without a size (NVML_VALUE_NOT_AVAILABLE: a container without the host's process table, or Windows WDDM)", in.nvmlUnsized)
	}
	until := uint64(math.MaxUint64)
	if in.supersededAt != 0 {
		until = in.supersededAt
	}
	// The most samples one device took while the instance was traced, and
	// whether every device sampled then lists no processes.
	var taken uint64
	unlisted := true
	for _, d := range a.nvml.devices {
		t := func(k int) uint64 { return d.samples[k].Time }
		n := latestAtOrBefore(len(d.samples), t, until) - latestAtOrBefore(len(d.samples), t, in.start-min(in.start, 1))
		if n <= 0 {
			continue
		}
		taken = max(taken, uint64(n))
		unlisted = unlisted && d.note != ""
	}
	switch {
	case taken == 0:
		return "no NVML sample was taken while it was traced"
	case unlisted:
		return "NVML listed no processes on the devices it sampled (the NVML note says why)"
	}
	return fmt.Sprintf("NVML never listed it in the %d samples taken while it was traced: no CUDA context on a sampled GPU then, "+
		"or NVML knows it by another PID (a container's PID namespace)", taken)
}

// latestAtOrBefore returns the index of the last of n time-sorted items
// whose time is at or before t; -1 when none is.
func latestAtOrBefore(n int, time func(int) uint64, t uint64) int {
	lo, hi := 0, n // the first index with time > t lies in [lo, hi]
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if time(m) <= t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}
