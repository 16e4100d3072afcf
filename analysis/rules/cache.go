package rules

import (
	"cmp"
	"slices"

	"github.com/vramprof/vramprof/analysis/finding"
)

// CacheGrowth says once per process whose tensors were traced that its
// caching allocator reserved more than its tensors ever held: the segments
// grew while the blocks did not, the cache (see the analysis doc, "The
// cache"), never a leak. Severity info. It reads the processes' device
// memory and tensors (their peaks and levels at the end) and the segment
// stacks the allocator placed blocks in (Process.CacheStacks).
func CacheGrowth(v *View) []finding.Finding {
	var out []finding.Finding
	for _, p := range cacheProcesses(v) {
		seg, blk := p.Segments, p.Tensors
		if seg == nil || blk == nil || seg.PeakBytes <= blk.PeakBytes {
			continue
		}
		ev := &finding.CacheEvidence{
			ReservedPeakBytes: seg.PeakBytes, ReservedPeakTime: seg.PeakTime,
			AllocatedPeakBytes: blk.PeakBytes, AllocatedPeakTime: blk.PeakTime,
			ReservedAtEnd: seg.LiveBytesAtEnd, AllocatedAtEnd: blk.LiveBytesAtEnd,
			End: v.LastEvent,
		}
		// The allocator's segment stacks, by bytes they allocated.
		var us []finding.StackUsage
		for _, s := range v.Series {
			if s.Process == p && s.Scope == ScopeSegments && p.CacheStacks[s.Stack] {
				us = append(us, finding.StackUsage{Stack: s.Stack, Usage: s.Alloc})
			}
		}
		slices.SortFunc(us, func(x, y finding.StackUsage) int {
			return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Stack, y.Stack))
		})
		out = append(out, finding.Finding{Kind: finding.KindCacheGrowth, Severity: finding.SeverityInfo, PID: p.PID,
			ProcessStart: p.Start, Bytes: seg.PeakBytes - blk.PeakBytes, Time: seg.PeakTime,
			Stacks: v.FindingStacks(us, v.TopStacks), Cache: ev})
	}
	return out
}

// cacheProcesses returns, once each in the order of their first series,
// the processes whose allocator placed blocks in a traced segment (a
// CacheStacks entry).
func cacheProcesses(v *View) []*Process {
	var out []*Process
	seen := make(map[*Process]bool)
	for _, s := range v.Series {
		if p := s.Process; !seen[p] && len(p.CacheStacks) > 0 {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}
