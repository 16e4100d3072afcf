package rules

import "github.com/vramprof/vramprof/analysis/finding"

// Rule is one rule: a function of the finished model that returns its
// findings. A rule keeps no state and changes nothing it reads.
type Rule struct {
	// Name names the rule (its file and its corpus test: TestCorpus<Name>).
	Name string
	// Kinds are the finding kinds it returns.
	Kinds []string
	// Find applies it.
	Find func(v *View) []finding.Finding
}

// All are the rules the Analyzer runs at Finish, in this order (the order
// only matters within a kind: Result.Findings is ranked after). The peak
// and failed_call findings are the Analyzer's own (analysis/findings.go).
var All = []Rule{
	{Name: "OOM", Kinds: []string{finding.KindOOM}, Find: OOMs},
	{Name: "Leak", Kinds: []string{finding.KindLeak}, Find: Leaks},
	{Name: "Cache", Kinds: []string{finding.KindCacheGrowth}, Find: CacheGrowth},
	{Name: "Fragmentation", Kinds: []string{finding.KindFragmentation}, Find: Fragmentation},
	{Name: "Churn", Kinds: []string{finding.KindChurn}, Find: Churn},
	{Name: "Spike", Kinds: []string{finding.KindSpike}, Find: Spikes},
	{Name: "Pinned", Kinds: []string{finding.KindPinnedHostGrowth}, Find: PinnedHostGrowth},
	{Name: "Imbalance", Kinds: []string{finding.KindDeviceImbalance}, Find: Imbalance},
}

// Run applies every rule of All to v, in order.
func Run(v *View) []finding.Finding {
	var out []finding.Finding
	for _, r := range All {
		out = append(out, r.Find(v)...)
	}
	return out
}
