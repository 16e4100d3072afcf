package analysis

import (
	"cmp"
	"github.com/vramprof/vramprof/analysis/finding"
	"slices"

	"github.com/vramprof/vramprof/probes/event"
)

// Finish ends the stream and returns the Result. A stream without an End
// record is finished as cut short (Run.Ended false) and its results cover
// what came before the cut. Finish may be called more than once; it returns
// the same Result, and Add fails after it.
func (a *Analyzer) Finish() *Result {
	if a.finished {
		return a.result
	}
	a.finished = true
	a.syncInstances()
	r := &Result{
		Run:        a.run,
		LostEvents: a.lost,
		LostCauses: a.lostCauses,
		LateEvents: a.late,
		Stacks:     make(map[event.StackID]*Stack, len(a.stacks)+1),
	}
	if !r.Run.Ended {
		r.Run.End = a.latest
	}
	if r.Run.End < r.Run.Start {
		r.Run.End = r.Run.Start
	}
	r.Run.Duration = r.Run.End - r.Run.Start

	for _, m := range a.mappings {
		r.Mappings = append(r.Mappings, m)
	}
	slices.SortFunc(r.Mappings, func(x, y event.Mapping) int { return cmp.Compare(x.ID, y.ID) })
	stripped := strippedFiles(a.run.Libraries)
	for id, s := range a.stacks {
		r.Stacks[id] = renderStack(s, a.mappings)
		skipStrippedRuntime(r.Stacks[id], a.mappings, stripped)
	}
	if r.Stacks[0] == nil {
		r.Stacks[0] = &Stack{Site: NoStack, SiteFrame: -1, Helper: -1}
	}
	// Sites compare a stack with the other stacks its process allocated
	// from (groups exist for allocation calls only, failed ones included).
	byPID := make(map[uint32][]event.StackID)
	seen := make(map[groupKey]bool)
	for _, g := range a.groups {
		k := groupKey{pid: g.key.pid, stack: g.key.stack}
		if !seen[k] && r.Stacks[k.stack] != nil {
			seen[k] = true
			byPID[k.pid] = append(byPID[k.pid], k.stack)
		}
	}
	assignSites(r.Stacks, byPID)

	r.Totals = a.layerTotals(deviceScope)
	if ls := a.layers[scope{layer: event.LayerBlock}]; ls != nil && ls.seen {
		b := a.layerTotals(scope{layer: event.LayerBlock})
		r.Blocks = &b
	}
	r.Host = a.layerTotals(hostScope)
	r.Books = a.books.finish(0, true)
	r.VMM = a.vmm.finish(0, true)
	a.finishDevices(r)
	a.finishNVML(r)
	a.finishClasses(r)
	a.finishProcesses(r)
	a.finishTimelines(r)
	a.finishPools(r)
	a.loops = a.iterations(r)
	a.setIterations(r)
	a.findings(r)
	a.result = r
	return r
}

func (a *Analyzer) layerTotals(sc scope) Totals {
	var t Totals
	if ls := a.layers[sc]; ls != nil {
		t = ls.totals
		lv := a.ledger.ScopeLevel(ledgerScope(sc))
		t.LiveBytesAtEnd = lv.Bytes
		t.LiveAllocationsAtEnd = lv.Count
	}
	t.LostEvents = a.lost
	return t
}

// finishDevices lists every device seen: in a segment-layer event (so
// "unknown" appears whenever an event carried it) or a DeviceInfo record,
// with its device memory figures.
func (a *Analyzer) finishDevices(r *Result) {
	atPeak := make(map[int32]map[event.StackID]*Usage)
	for _, c := range a.classes {
		if c.devPeak.Count == 0 || scopeOf(c.key.layer, c.key.mem) != deviceScope {
			continue
		}
		m := atPeak[c.key.device]
		if m == nil {
			m = make(map[event.StackID]*Usage)
			atPeak[c.key.device] = m
		}
		u := m[c.key.stack]
		if u == nil {
			u = &Usage{}
			m[c.key.stack] = u
		}
		u.Count += c.devPeak.Count
		u.Bytes += c.devPeak.Bytes
	}
	for idx := range a.seenDevices {
		dv := Device{Index: idx, CapacityBytes: a.capacity[idx]}
		if d := a.devices[devKey{idx, deviceScope}]; d != nil {
			dv.PeakBytes, dv.PeakTime, dv.LiveBytesAtEnd = d.peak, d.peakTime, d.live
			dv.PeakStacks = topStacks(atPeak[idx], 0)
		}
		r.Devices = append(r.Devices, dv)
	}
	slices.SortFunc(r.Devices, func(x, y Device) int { return cmp.Compare(x.Index, y.Index) })
}

func (a *Analyzer) finishClasses(r *Result) {
	r.Classes = make([]Class, 0, len(a.classes))
	for _, c := range a.classes {
		k := c.key
		in := a.inst(k.pid)
		r.Classes = append(r.Classes, Class{PID: in.pid, ProcessStart: in.start, Stack: k.stack, Device: k.device,
			API: k.api, Layer: k.layer, Space: k.mem, Size: k.size, Alloc: c.alloc, Live: c.live, Peak: c.peak})
	}
	slices.SortFunc(r.Classes, func(x, y Class) int {
		return cmp.Or(cmp.Compare(x.PID, y.PID), cmp.Compare(x.ProcessStart, y.ProcessStart),
			cmp.Compare(x.Layer, y.Layer), cmp.Compare(x.Space, y.Space),
			cmp.Compare(x.Stack, y.Stack), cmp.Compare(x.Device, y.Device),
			cmp.Compare(x.API, y.API), cmp.Compare(x.Size, y.Size))
	})
}

// inst returns the instance of an id, up to date with the ledger's at
// any point of the stream; every id in the model has one.
func (a *Analyzer) inst(id uint32) *instance {
	if li := a.ledger.Instance(id); li != nil {
		in := a.facts(id)
		in.pid, in.start, in.info, in.supersededAt = li.PID, li.Start, li.Info, li.SupersededAt
		return in
	}
	if in := a.insts[id]; in != nil {
		return in
	}
	return &instance{id: id, pid: id}
}

// finishProcesses lists every instance that a Process record described or
// a segment-layer event came from; a.procIndex then finds each one's entry.
func (a *Analyzer) finishProcesses(r *Result) {
	pids := make(map[uint32]bool) // instance ids
	for id := range a.pids {
		pids[id] = true
	}
	for id, in := range a.insts {
		if in.info != nil {
			pids[id] = true
		}
	}
	// Per-stack aggregates of each process's device memory.
	type aggs struct{ peak, alloc, live, failed map[event.StackID]*Usage }
	byPID := make(map[uint32]*aggs)
	get := func(pid uint32) *aggs {
		g := byPID[pid]
		if g == nil {
			g = &aggs{map[event.StackID]*Usage{}, map[event.StackID]*Usage{},
				map[event.StackID]*Usage{}, map[event.StackID]*Usage{}}
			byPID[pid] = g
		}
		return g
	}
	addTo := func(m map[event.StackID]*Usage, id event.StackID, u Usage) {
		if u.Count == 0 && u.Bytes == 0 {
			return
		}
		t := m[id]
		if t == nil {
			t = &Usage{}
			m[id] = t
		}
		t.Count += u.Count
		t.Bytes += u.Bytes
	}
	for _, c := range a.classes {
		if scopeOf(c.key.layer, c.key.mem) == deviceScope {
			addTo(get(c.key.pid).peak, c.key.stack, c.peak)
		}
	}
	for _, g := range a.groups {
		if g.key.sc == deviceScope {
			ag := get(g.key.pid)
			addTo(ag.alloc, g.key.stack, g.alloc)
			addTo(ag.live, g.key.stack, g.live)
			addTo(ag.failed, g.key.stack, g.failed)
		}
	}
	ids := make([]uint32, 0, len(pids))
	for pid := range pids {
		in := a.inst(pid)
		p := Process{PID: in.pid, Start: in.start, SupersededAt: in.supersededAt}
		if pi := in.info; pi != nil {
			p.PPID, p.Command, p.Exe = pi.PPID, pi.Command, pi.Exe
		} else if pid == a.run.PID {
			p.Command = a.run.Command
		}
		p.Totals = a.accountTotals(pid, deviceScope)
		p.Host = a.accountTotals(pid, hostScope)
		p.Books = a.books.finish(pid, false)
		p.VMM = a.vmm.finish(pid, false)
		if sp := a.accounts[accountKey{pid, deviceScope}]; sp != nil {
			p.PeakTime = sp.peakTime
			if sp.peak > 0 {
				ev := sp.peakEvent
				p.PeakEvent = &ev
			}
			p.FirstFailure = sp.firstFailure
			p.FirstOOM = sp.firstOOM
			p.FailedCalls = sp.failedCalls()
			for d, pd := range sp.devices {
				p.Devices = append(p.Devices, ProcessDevice{Index: d, PeakBytes: pd.peak,
					PeakTime: pd.peakTime, LiveBytesAtEnd: pd.live})
			}
			slices.SortFunc(p.Devices, func(x, y ProcessDevice) int { return cmp.Compare(x.Index, y.Index) })
		}
		ag := get(pid)
		p.PeakStacks = topStacks(ag.peak, 0)
		p.Allocated = topStacks(ag.alloc, 0)
		p.LiveAtEnd = topStacks(ag.live, 0)
		p.Failed = topStacks(ag.failed, 0)
		p.NVML, p.Preexisting = a.processNVML(in, &p)
		p.Churn = a.churn.finish(pid, r.Run.Duration)
		if a.stops != nil {
			var start uint64
			if in.info != nil {
				start = in.info.Start
			}
			n := a.stops[event.ProcessStops{PID: in.pid, Start: start}]
			p.Stops = &n
		}
		r.Processes = append(r.Processes, p)
		ids = append(ids, pid)
	}
	order := make([]int, len(ids))
	for i := range order {
		order[i] = i
	}
	less := func(x, y int) int {
		px, py := &r.Processes[x], &r.Processes[y]
		return cmp.Or(cmp.Compare(px.PID, py.PID), cmp.Compare(px.Start, py.Start), cmp.Compare(ids[x], ids[y]))
	}
	slices.SortFunc(order, less)
	sorted := make([]Process, len(order))
	a.procIndex = make(map[uint32]int, len(order))
	for i, j := range order {
		sorted[i] = r.Processes[j]
		a.procIndex[ids[j]] = i
	}
	r.Processes = sorted
}

// accountTotals returns one process's totals in one scope; zero (but for the
// lost-event count) when it had no event there.
func (a *Analyzer) accountTotals(pid uint32, sc scope) Totals {
	var t Totals
	if sp := a.accounts[accountKey{pid, sc}]; sp != nil {
		t = sp.totals
		t.PeakBytes, t.PeakTime = sp.peak, sp.peakTime
		lv := a.ledger.InstanceLevel(pid, ledgerScope(sc))
		t.LiveBytesAtEnd = lv.Bytes
		t.LiveAllocationsAtEnd = lv.Count
	}
	t.LostEvents = a.lost
	return t
}

// topStacks sorts per-stack usage by bytes (then count, then stack ID, for a
// stable order) and keeps the first n (all when n <= 0).
func topStacks(m map[event.StackID]*Usage, n int) []StackUsage {
	return finding.TopStacks(m, n)
}
