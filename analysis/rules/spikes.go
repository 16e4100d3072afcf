package rules

import (
	"cmp"
	"slices"

	"github.com/vramprof/vramprof/analysis/finding"
)

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

// Spikes names the sites whose rare, brief allocations reach a quarter of
// the process's peak. Brief: freed within View.SpikeWindow (Series.Brief)
// and within 5% of the run's span. Rare: the site's brief allocations are at
// most a tenth of the busiest site's allocations in the process. Bytes is
// the spike's height, its largest brief allocation. High severity when the
// process's peak fell inside one of them (it set the peak), else medium.
// With a block layer, tensors decide (as for leaks): the spikes are the
// tensors', against the tensors' peak; the allocator's segments are its
// cache (a brief tensor's segment is kept cached, or freed at once by
// empty_cache: its spike is the tensor's).
func Spikes(v *View) []finding.Finding {
	if v.Grid == nil {
		return nil // no events
	}
	// Brief is also relative: in a run of a few milliseconds everything
	// lives a few milliseconds, and the weights are no spike.
	maxLife := min(v.SpikeWindow, (v.LastEvent-v.Grid.Origin())/20)
	type key struct {
		p  *Process
		sc Scope
	}
	busiest := make(map[key]uint64) // per process and layer: the most allocations of one site
	for _, s := range v.Series {
		if s.Scope == ScopeSegments || s.Scope == ScopeTensors {
			k := key{s.Process, s.Scope}
			busiest[k] = max(busiest[k], s.Alloc.Count)
		}
	}
	var out []finding.Finding
	for _, s := range v.Series {
		b := s.Brief
		if b == nil || !s.Process.Listed {
			continue
		}
		p := s.Process
		peak, peakTime := p.PeakBytes, p.PeakTime
		if p.CacheStacks != nil {
			if s.Scope == ScopeSegments && p.CacheStacks[s.Stack] {
				continue
			}
			if s.Scope == ScopeTensors {
				peak, peakTime = p.Tensors.PeakBytes, p.Tensors.PeakTime
			}
		} else if s.Scope != ScopeSegments {
			continue
		}
		if peak == 0 || float64(b.Count) > spikeMaxShare*float64(busiest[key{p, s.Scope}]) {
			continue
		}
		setPeak := false
		var longest, height, brief, first uint64
		for _, iv := range b.Lives {
			if iv.To-iv.From > maxLife {
				continue
			}
			brief++
			if brief == 1 || iv.From < first {
				first = iv.From
			}
			longest = max(longest, iv.To-iv.From)
			height = max(height, iv.Size)
			if peakTime >= iv.From && peakTime < iv.To {
				setPeak = true
			}
		}
		if brief == 0 || float64(height) < spikeMinPeakShare*float64(peak) {
			continue
		}
		f := finding.Finding{
			Kind: finding.KindSpike, Severity: finding.SeverityMedium, PID: p.PID, ProcessStart: p.Start, Bytes: height,
			Time: first,
			Stacks: []finding.FindingStack{{Stack: s.Stack, Frames: v.Lines(s.Stack), Site: v.Site(s.Stack),
				Count: brief, Bytes: height}},
			Spike: &finding.SpikeEvidence{LongestNs: longest, SetPeak: setPeak, PeakBytes: peak, PeakTime: peakTime,
				Layer: s.Layer},
		}
		if setPeak {
			f.Severity = finding.SeverityHigh
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(x, y finding.Finding) int {
		return cmp.Or(cmp.Compare(x.PID, y.PID), cmp.Compare(x.ProcessStart, y.ProcessStart),
			cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Stacks[0].Stack, y.Stacks[0].Stack))
	})
	// At most maxSpikeFindings per process instance, the largest.
	type inst struct {
		pid   uint32
		start uint64
	}
	per := make(map[inst]int)
	var kept []finding.Finding
	for _, f := range out {
		k := inst{f.PID, f.ProcessStart}
		if per[k] < maxSpikeFindings {
			per[k]++
			kept = append(kept, f)
		}
	}
	return kept
}
