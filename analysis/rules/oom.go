package rules

import (
	"github.com/vramprof/vramprof/analysis/finding"
	"github.com/vramprof/vramprof/probes/event"
)

// maxPoolOOMFindings caps the OOM findings per pool: past the first few,
// later failures repeat the first's evidence.
const maxPoolOOMFindings = 5

// OOMs reports the allocations that failed for want of memory (OOM
// forensics). Where the block layer was traced, each failed segment
// allocation of a pool (at most maxPoolOOMFindings per pool) is explained
// with the allocator's geometry at that moment (View.Pools); a process
// without one gets one finding for all its out-of-memory failures, led by
// the first. Other errors are failed_call findings (the Analyzer's).
func OOMs(v *View) []finding.Finding {
	var out []finding.Finding
	explained := make(map[*Process]bool)
	for _, p := range v.Processes {
		explained[p] = poolOOMs(v, p)
	}
	for _, p := range v.Processes {
		if explained[p] {
			// The block layer explained its failures, one finding each.
			continue
		}
		if f := processOOM(v, p); f != nil {
			out = append(out, *f)
		}
	}
	for i := range v.Pools {
		pl := &v.Pools[i]
		for j := range pl.OOMs {
			if o := &pl.OOMs[j]; finding.IsOutOfMemory(o.Ret) && j < maxPoolOOMFindings {
				out = append(out, poolOOM(v, pl, o))
			}
		}
	}
	return out
}

// poolOOMs reports whether a pool of process p failed for want of memory.
func poolOOMs(v *View, p *Process) bool {
	for i := range v.Pools {
		pl := &v.Pools[i]
		if pl.PID != p.PID || pl.ProcessStart != p.Start {
			continue
		}
		for j := range pl.OOMs {
			if finding.IsOutOfMemory(pl.OOMs[j].Ret) {
				return true
			}
		}
	}
	return false
}

// processOOM reports a process's allocations that failed for want of
// memory, led by the first; nil when none did.
func processOOM(v *View, p *Process) *finding.Finding {
	ff := p.FirstOOM
	if ff == nil {
		return nil
	}
	var oom finding.FailedCalls // the OOM groups of both libraries, merged
	stacks := map[event.StackID]*finding.Usage{}
	for _, fc := range p.FailedCalls {
		if !finding.IsOutOfMemory(fc.Ret) {
			continue
		}
		oom.Count += fc.Count
		oom.Bytes += fc.Bytes
		for _, s := range fc.Stacks {
			u := stacks[s.Stack]
			if u == nil {
				u = &finding.Usage{}
				stacks[s.Stack] = u
			}
			u.Count += s.Count
			u.Bytes += s.Bytes
		}
	}
	return &finding.Finding{
		Kind: finding.KindOOM, Severity: finding.SeverityCritical, PID: p.PID, ProcessStart: p.Start,
		Bytes: ff.Size, Time: ff.Time,
		Stacks:   v.FindingStacks(finding.TopStacks(stacks, 0), v.TopStacks),
		OOMCalls: &finding.OOMCalls{First: *ff, Count: oom.Count, Bytes: oom.Bytes},
	}
}

// poolOOM explains one failed segment allocation with the allocator's
// geometry at that moment.
func poolOOM(v *View, pl *finding.Pool, o *finding.OOM) finding.Finding {
	f := finding.Finding{Kind: finding.KindOOM, PID: pl.PID, ProcessStart: pl.ProcessStart, Bytes: o.RequestBytes,
		Time: o.Time, Stacks: v.FindingStacks(o.LiveStacks, v.TopStacks), Pool: poolEvidence(v, pl, o)}
	oc := *o
	oc.Live = nil
	f.OOM = &oc
	// Under expandable segments that advice is already taken: never give
	// it again.
	expandable := pl.Expandable || o.Expandable
	switch {
	case o.Outcome == finding.OOMRetried:
		f.Severity = finding.SeverityMedium
		f.Pool.Advice = finding.AdviceLowerPeak
		if o.Kind == finding.OOMFragmentation && o.State.LargestFreeRange < o.RequestBytes && !expandable {
			f.Pool.Advice = finding.AdviceExpandable
		}
	case o.Kind == finding.OOMFragmentation && expandable:
		f.Severity, f.Pool.Advice = finding.SeverityCritical, finding.AdviceInterleaved
	case o.Kind == finding.OOMFragmentation:
		f.Severity, f.Pool.Advice = finding.SeverityCritical, finding.AdviceExpandable
	default:
		f.Severity, f.Pool.Advice = finding.SeverityCritical, finding.AdviceReduceBatch
	}
	return f
}

// poolEvidence is the evidence of pool pl's failure o (nil: none).
func poolEvidence(v *View, pl *finding.Pool, o *finding.OOM) *finding.PoolEvidence {
	ev := &finding.PoolEvidence{Device: pl.Device, Expandable: pl.Expandable || (o != nil && o.Expandable)}
	if o != nil {
		g := v.OOMGeometry[o.Index]
		ev.IdleLargeBytes, ev.MaxSharedSegment, ev.SplitSizeMiB = g.IdleLargeBytes, g.MaxSharedSegment,
			splitSizeMiB(o, g.MaxSharedSegment)
	}
	return ev
}

// splitSizeMiB is the max_split_size_mb value this run's blocks support:
// one MiB above the largest segment that held live blocks smaller than the
// failing request (maxShared). Blocks below it keep sharing segments as
// they did; requests of that size and more (the failing one) get blocks
// that are never split, and PyTorch frees such cached blocks before it
// raises out-of-memory. 0 when no such value is at most the request.
func splitSizeMiB(o *finding.OOM, maxShared uint64) uint64 {
	if maxShared == 0 {
		return 0
	}
	n := (maxShared+(1<<20)-1)>>20 + 1
	if n<<20 > o.RequestBytes {
		return 0
	}
	return n
}
