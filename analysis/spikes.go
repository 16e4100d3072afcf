package analysis

import (
	"cmp"
	"slices"
)

// DefaultSpikeWindow is how briefly, in ns, an allocation must live to be a
// spike candidate: a checkpoint copy or a one-off gather lasts milliseconds
// to a second; activations freed at the end of a step are short-lived too,
// which is why a spike must also be rare (see spikeFindings).
const DefaultSpikeWindow = 1_000_000_000 // 1 s

// spikeMaxShare: a site is a spike only if its short-lived allocations
// number at most this share of the busiest site's allocations in the same
// process. The busiest site allocates at least once per training step, so
// this asks for "at most once every ten steps": every layer of a model
// allocates its activations each step (rare against the total, not against
// the step count); a checkpoint does not.
const spikeMaxShare = 0.1

// maxSpikeFindings bounds the spike findings per process (the largest).
const maxSpikeFindings = 5

// spikeMinPeakShare: a spike's height must be at least this share of the
// process's peak to be worth a finding.
const spikeMinPeakShare = 0.25

// maxSpikeIntervals bounds the lifetimes kept per stack (the largest).
const maxSpikeIntervals = 16

// spikeInterval is one short-lived allocation's life.
type spikeInterval struct {
	from, to, size uint64
}

// spikeStats gathers a site's short-lived device allocations.
type spikeStats struct {
	count     uint64          // short-lived allocations (within SpikeWindow)
	intervals []spikeInterval // the largest, at most maxSpikeIntervals
	// least is the smallest size among intervals once they are
	// maxSpikeIntervals: no smaller or equal one can replace any.
	least uint64
}

// spikeModel gathers, per allocation site of each process instance, the
// device allocations freed within the spike window: a liveObserver. The
// spike rule (spikeFindings) reads it at Finish.
type spikeModel struct {
	window uint64
	// sites are the stacks' short-lived allocations by group index (the
	// device scope's stacks only); nil while a stack had none.
	sites []*spikeStats
}

// changed records a device allocation (segment layer, device or physical
// memory) freed within the spike window.
func (m *spikeModel) changed(c *liveChange) {
	if c.alloc || c.replaced || (c.sc != deviceScope && c.sc != blockScope) || c.time-c.born > m.window {
		return
	}
	gi := int(c.group)
	if gi >= len(m.sites) {
		m.sites = append(m.sites, make([]*spikeStats, gi+1-len(m.sites))...)
	}
	s := m.sites[gi]
	if s == nil {
		s = &spikeStats{}
		m.sites[gi] = s
	}
	s.count++
	iv := spikeInterval{c.born, c.time, c.size}
	if len(s.intervals) < maxSpikeIntervals {
		s.intervals = append(s.intervals, iv)
		if len(s.intervals) == maxSpikeIntervals {
			s.least = leastSize(s.intervals)
		}
		return
	}
	if c.size <= s.least {
		return
	}
	i := slices.IndexFunc(s.intervals, func(x spikeInterval) bool { return x.size < c.size })
	s.intervals[i] = iv
	s.least = leastSize(s.intervals)
}

func leastSize(ivs []spikeInterval) uint64 {
	least := ivs[0].size
	for _, iv := range ivs[1:] {
		least = min(least, iv.size)
	}
	return least
}

// spikeFindings names the sites whose rare, brief allocations reach a
// quarter of the process's peak. Brief: freed within SpikeWindow and within
// 5% of the run's span. Rare: the site's short-lived allocations are at
// most 5% of the process's allocations. Bytes is the spike's height, its
// largest brief allocation. High severity when the process's peak fell
// inside one of them (it set the peak), else medium.
func (a *Analyzer) spikeFindings(r *Result) []Finding {
	if a.leak == nil {
		return nil // no events
	}
	// Brief is also relative: in a run of a few milliseconds everything
	// lives a few milliseconds, and the weights are no spike.
	maxLife := min(a.opts.SpikeWindow, (a.lastEvent-a.leak.origin)/20)
	// With a block layer, tensors decide (as for leaks): the spikes are
	// the tensors', against the tensors' peak; the allocator's segments
	// are its cache (a brief tensor's segment is kept cached, or freed at
	// once by empty_cache: its spike is the tensor's).
	views := a.leakViews()
	type key struct {
		pid uint32
		sc  scope
	}
	busiest := make(map[key]uint64) // per instance and layer: the most allocations of one site
	for _, g := range a.groups {
		if g.key.sc == deviceScope || g.key.sc == blockScope {
			k := key{g.key.pid, g.key.sc}
			busiest[k] = max(busiest[k], g.alloc.Count)
		}
	}
	var out []Finding
	for gi, s := range a.spikes.sites {
		if s == nil {
			continue
		}
		k := a.groups[gi].key
		i, ok := a.procIndex[k.pid]
		if !ok {
			continue
		}
		p := &r.Processes[i]
		peak, peakTime := p.Totals.PeakBytes, p.PeakTime
		if v := views[k.pid]; v != nil {
			if k.sc == deviceScope && v.hosts[k.stack] {
				continue
			}
			if k.sc == blockScope {
				sp := a.spaces[spaceKey{k.pid, blockScope}]
				peak, peakTime = sp.peak, sp.peakTime
			}
		} else if k.sc != deviceScope {
			continue
		}
		if peak == 0 || float64(s.count) > spikeMaxShare*float64(busiest[key{k.pid, k.sc}]) {
			continue
		}
		setPeak := false
		var longest, height, brief, first uint64
		for _, iv := range s.intervals {
			if iv.to-iv.from > maxLife {
				continue
			}
			brief++
			if brief == 1 || iv.from < first {
				first = iv.from
			}
			longest = max(longest, iv.to-iv.from)
			height = max(height, iv.size)
			if peakTime >= iv.from && peakTime < iv.to {
				setPeak = true
			}
		}
		if brief == 0 || float64(height) < spikeMinPeakShare*float64(peak) {
			continue
		}
		f := Finding{
			Kind: KindSpike, Severity: SeverityMedium, PID: p.PID, ProcessStart: p.Start, Bytes: height,
			Time:   first,
			Stacks: []FindingStack{{Stack: k.stack, Frames: r.Lines(k.stack), Site: r.Site(k.stack), Count: brief, Bytes: height}},
			Spike: &SpikeEvidence{LongestNs: longest, SetPeak: setPeak, PeakBytes: peak, PeakTime: peakTime,
				Layer: k.sc.layer},
		}
		if setPeak {
			f.Severity = SeverityHigh
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(x, y Finding) int {
		return cmp.Or(cmp.Compare(x.PID, y.PID), cmp.Compare(x.ProcessStart, y.ProcessStart),
			cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Stacks[0].Stack, y.Stacks[0].Stack))
	})
	// At most maxSpikeFindings per process instance, the largest.
	type inst struct {
		pid   uint32
		start uint64
	}
	per := make(map[inst]int)
	var kept []Finding
	for _, f := range out {
		k := inst{f.PID, f.ProcessStart}
		if per[k] < maxSpikeFindings {
			per[k]++
			kept = append(kept, f)
		}
	}
	return kept
}
