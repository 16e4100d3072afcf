package analysis

import (
	"github.com/vramprof/vramprof/analysis/rules"
	"github.com/vramprof/vramprof/probes/event"
)

// view builds the rules' View of the finished model (see rules.View for
// what each figure means); r must be complete but for its findings.
func (a *Analyzer) view(r *Result) *rules.View {
	v := &rules.View{
		Start: r.Run.Start, LastEvent: a.lastEvent,
		RootPID: a.run.PID, RootEnded: a.run.Ended, RootEnd: a.run.End,
		TopStacks: a.opts.TopStacks, LeakWindows: a.opts.LeakWindows, SpikeWindow: a.opts.SpikeWindow,
		CapacityOption: a.opts.Capacity, Capacities: a.capacity,
		Pools:       r.Pools,
		OOMGeometry: make(map[int]rules.OOMGeometry, len(a.oomGeometry)),
		Stacks:      make(map[event.StackID]*rules.Stack, len(r.Stacks)),
	}
	for i, g := range a.oomGeometry {
		v.OOMGeometry[i] = rules.OOMGeometry{MaxSharedSegment: g.maxSharedSegment, IdleLargeBytes: g.idleLarge}
	}
	for id, st := range r.Stacks {
		v.Stacks[id] = &rules.Stack{Frames: st.Frames, Lines: st.Lines, Site: st.Site}
	}
	for i := range r.Devices {
		d := &r.Devices[i]
		v.Devices = append(v.Devices, rules.Device{Index: d.Index, PeakBytes: d.PeakBytes, PeakTime: d.PeakTime,
			LiveBytesAtEnd: d.LiveBytesAtEnd, CapacityBytes: d.CapacityBytes, PeakStacks: d.PeakStacks})
	}
	if a.leak != nil {
		v.Grid = leakGrid{a.leak}
	}
	if a.nvml.samples > 0 {
		// finishNVML has sorted each device's samples by time.
		v.NVMLFree = func(device int32, t uint64) (free, at uint64, ok bool) {
			d := a.nvml.devices[device]
			if d == nil {
				return 0, 0, false
			}
			j := latestAtOrBefore(len(d.samples), func(k int) uint64 { return d.samples[k].Time }, t)
			if j < 0 {
				return 0, 0, false
			}
			return d.samples[j].FreeBytes, d.samples[j].Time, true
		}
	}

	// The processes, by instance id: those Result.Processes lists, in its
	// order, then any other a stack of the model names.
	procs := make(map[uint32]*rules.Process)
	ids := make([]uint32, len(r.Processes))
	for id, i := range a.procIndex {
		ids[i] = id
	}
	for i, id := range ids {
		p := a.viewProcess(r, id)
		rp := &r.Processes[i]
		p.Listed, p.PPID, p.SupersededAt = true, rp.PPID, rp.SupersededAt
		p.PeakBytes, p.PeakTime = rp.Totals.PeakBytes, rp.PeakTime
		p.HostPeakBytes, p.HostLiveBytesAtEnd = rp.Host.PeakBytes, rp.Host.LiveBytesAtEnd
		p.FirstOOM, p.FailedCalls, p.Churn = rp.FirstOOM, rp.FailedCalls, rp.Churn
		for _, d := range rp.Devices {
			p.Devices = append(p.Devices, rules.ProcessDevice{Index: d.Index, PeakBytes: d.PeakBytes})
		}
		for j := range r.Pools {
			if r.Pools[j].PID == rp.PID && r.Pools[j].ProcessStart == rp.Start {
				p.Pooled = true
			}
		}
		procs[id] = p
		v.Processes = append(v.Processes, p)
	}
	proc := func(id uint32) *rules.Process {
		p := procs[id]
		if p == nil {
			p = a.viewProcess(r, id)
			procs[id] = p
		}
		return p
	}

	// Who has tensors, and the segments their allocator placed blocks in.
	for _, g := range a.groups {
		if g.key.sc == blockScope && g.alloc.Count > 0 {
			if p := proc(g.key.pid); p.CacheStacks == nil {
				p.CacheStacks = make(map[event.StackID]bool)
			}
		}
	}
	for _, pl := range a.pools.pools {
		p := procs[pl.key.pid]
		if p == nil || p.CacheStacks == nil {
			continue
		}
		for st := range pl.hosts {
			p.CacheStacks[st] = true
		}
	}

	v.Series = make([]*rules.Series, len(a.groups))
	for gi, g := range a.groups {
		s := &rules.Series{Process: proc(g.key.pid), Scope: viewScope(g.key.sc), Layer: g.key.sc.layer,
			Stack: g.key.stack, Alloc: g.alloc, Live: g.live, History: groupHistory{a, g},
			LiveByDevice: make(map[int32]uint64)}
		if gi < len(a.spikes.sites) {
			if b := a.spikes.sites[gi]; b != nil {
				s.Brief = &rules.Brief{Count: b.count}
				for _, iv := range b.intervals {
					s.Brief.Lives = append(s.Brief.Lives, rules.Life{From: iv.from, To: iv.to, Size: iv.size})
				}
			}
		}
		v.Series[gi] = s
	}
	for _, c := range a.classes {
		if c.group >= 0 {
			v.Series[c.group].LiveByDevice[c.key.device] += c.live.Bytes
		}
	}
	return v
}

// viewProcess returns instance id's process with its accounts and loop; the
// Result's figures are the caller's to add.
func (a *Analyzer) viewProcess(r *Result, id uint32) *rules.Process {
	in := a.inst(id)
	p := &rules.Process{PID: in.pid, Start: in.start, SupersededAt: in.supersededAt,
		Segments: a.viewSpace(id, deviceScope), Tensors: a.viewSpace(id, blockScope), Host: a.viewSpace(id, hostScope)}
	if lp := a.loops[id]; lp != nil {
		p.Loop = &rules.Loop{Seq: lp.seq, Starts: lp.starts, Index: lp.index, PeriodNs: lp.period, Count: lp.count}
	}
	return p
}

// viewSpace returns instance id's memory in scope sc; nil when it had
// none there.
func (a *Analyzer) viewSpace(id uint32, sc scope) *rules.Space {
	sp := a.accounts[accountKey{id, sc}]
	if sp == nil {
		return nil
	}
	return &rules.Space{PeakBytes: sp.peak, PeakTime: sp.peakTime, LastChange: sp.last,
		LiveBytesAtEnd: a.ledger.InstanceLevel(id, ledgerScope(sc)).Bytes}
}

func viewScope(sc scope) rules.Scope {
	switch sc {
	case deviceScope:
		return rules.ScopeSegments
	case blockScope:
		return rules.ScopeTensors
	case hostScope:
		return rules.ScopeHost
	}
	return rules.ScopeOther
}

// leakGrid is the leak grid as rules.Grid.
type leakGrid struct{ g *grid }

func (l leakGrid) Origin() uint64         { return l.g.origin }
func (l leakGrid) Index(t uint64) int     { return l.g.index(t) }
func (l leakGrid) BucketEnd(i int) uint64 { return l.g.bucketEnd(i) }

// groupHistory is a stack's history as rules.History.
type groupHistory struct {
	a *Analyzer
	g *groupState
}

func (h groupHistory) Buckets(n int) []uint64 { return h.g.hist.finish(h.a.leak, n) }

func (h groupHistory) Log() rules.LiveLog {
	if l := h.a.iters.log(h.g); l != nil {
		return liveLogView{l}
	}
	return nil
}

// liveLogView is a stack's live-bytes log as rules.LiveLog.
type liveLogView struct{ l *liveLog }

func (l liveLogView) Before(seq uint64) uint64 { return l.l.before(seq) }
func (l liveLogView) At(t uint64) uint64       { return l.l.at(t) }
