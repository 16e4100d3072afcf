package rules

import "github.com/vramprof/vramprof/analysis/finding"

// minChurnCycles: fewer release-and-reallocate cycles are a phase change,
// not a habit worth a finding.
const minChurnCycles = 3

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
		if !c.CachingOff && (c.CostMsPerSecond >= 1 || c.Cycles >= 10) {
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
