package analysis

import "slices"

// DefaultSpikeWindow is how briefly, in ns, an allocation must live to be a
// spike candidate: a checkpoint copy or a one-off gather lasts milliseconds
// to a second; activations freed at the end of a step are short-lived too,
// which is why a spike must also be rare (see rules.Spikes).
const DefaultSpikeWindow = 1_000_000_000 // 1 s

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
// spike rule (rules.Spikes) reads it at Finish, through the View.
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
