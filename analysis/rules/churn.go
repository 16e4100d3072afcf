package rules

import "github.com/vramprof/vramprof/analysis/finding"

// minChurnCycles: fewer release-and-reallocate cycles are a phase change,
// not a habit worth a finding.
const minChurnCycles = 3

// churnCostMsPerSecond is the cycles' measured cost, in ms per second of
// run, from which they are worth removing whatever their pattern: 1% of
// the run spent inside cudaFree and cudaMalloc for memory given back.
// Below it the cost alone is no evidence: on a short run a few cycles
// after an evaluation reach a millisecond per second (h_empty_cache_periodic:
// 7 cycles in 2 rounds, 0.80-0.95 ms per second of a 0.35 s run, more on
// a loaded host),
// though their program releases once every 25 steps.
const churnCostMsPerSecond = 10

// Churn prices each process's release-and-reallocate cycles
// (Process.Churn; see the analysis doc, "Churn"). Only a process whose
// caching allocator was traced qualifies (Process.Pooled): there the
// cycles are the cache released and refilled (empty_cache), or, when the
// allocator passed every tensor free to cudaFree (Churn.CachingOff), the
// caching turned off; a program calling cudaMalloc/cudaFree itself every
// step has no cache to keep.
func Churn(v *View) []finding.Finding {
	var out []finding.Finding
	for _, p := range v.Processes {
		c := p.Churn
		if c == nil || c.Cycles < minChurnCycles || !p.Pooled {
			continue
		}
		sev := finding.SeverityInfo
		// With caching off the cycles are every tensor's own cudaMalloc
		// and cudaFree: no empty_cache() to remove, and the setting is a
		// choice (a memory debugging run), so it is said, at info.
		if !c.CachingOff && (habitualRelease(c, p.Loop) || c.CostMsPerSecond >= churnCostMsPerSecond) {
			sev = finding.SeverityMedium
		}
		f := finding.Finding{Kind: finding.KindChurn, Severity: sev, PID: p.PID, ProcessStart: p.Start,
			Bytes: c.CycleBytes, Time: p.Start}
		// The release stacks first (where empty_cache() is called), when
		// the frees had stacks; then the allocations that took the memory
		// back.
		for _, s := range c.FreeStacks {
			if s.Stack != 0 {
				f.Stacks = append(f.Stacks, v.FindingStacks([]finding.StackUsage{s}, 1)...)
			}
		}
		f.Stacks = append(f.Stacks, v.FindingStacks(c.AllocStacks, v.TopStacks)...)
		f.Churn = c
		out = append(out, f)
	}
	return out
}

// habitualRelease reports whether the cache was released and refilled in
// at least every other iteration of the process's loop (at least
// minChurnCycles rounds): empty_cache() inside the step, the habit the
// finding asks to remove. A release after each evaluation or epoch is a
// round every many steps, a choice whose cost the measured figure prices.
func habitualRelease(c *finding.Churn, l *Loop) bool {
	return l != nil && l.Count > 0 && c.Releases >= minChurnCycles && 2*c.Releases >= l.Count
}
