package analysis

import (
	"cmp"
	"slices"
)

// cacheFindings says once per process whose tensors were traced that its
// caching allocator reserved more than its tensors ever held: the
// segments grew while the blocks did not, the cache (see doc.go, "The
// cache"). It reads the finished model, as the leak rule does: the
// segment and block spaces' peaks and levels, and the segment stacks the
// allocator placed blocks in.
func (a *Analyzer) cacheFindings(r *Result) []Finding {
	var out []Finding
	for id, v := range a.leakViews() {
		if len(v.hosts) == 0 {
			continue
		}
		seg, blk := a.spaces[spaceKey{id, deviceScope}], a.spaces[spaceKey{id, blockScope}]
		if seg == nil || blk == nil || seg.peak <= blk.peak {
			continue
		}
		in := a.inst(id)
		ev := &CacheEvidence{
			ReservedPeakBytes: seg.peak, ReservedPeakTime: seg.peakTime,
			AllocatedPeakBytes: blk.peak, AllocatedPeakTime: blk.peakTime,
			ReservedAtEnd:  a.ledger.InstanceLevel(id, ledgerScope(deviceScope)).Bytes,
			AllocatedAtEnd: a.ledger.InstanceLevel(id, ledgerScope(blockScope)).Bytes,
			End:            a.lastEvent,
		}
		// The allocator's segment stacks, by bytes they allocated.
		var us []StackUsage
		for _, g := range a.groups {
			if g.key.pid == id && g.key.sc == deviceScope && v.hosts[g.key.stack] {
				us = append(us, StackUsage{Stack: g.key.stack, Usage: g.alloc})
			}
		}
		slices.SortFunc(us, func(x, y StackUsage) int {
			return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Stack, y.Stack))
		})
		out = append(out, Finding{Kind: KindCacheGrowth, Severity: SeverityInfo, PID: in.pid, ProcessStart: in.start,
			Bytes: seg.peak - blk.peak, Time: seg.peakTime, Stacks: r.findingStacks(us, a.opts.TopStacks), Cache: ev})
	}
	return out
}
