package analysis

import (
	"cmp"
	"slices"

	"github.com/vramprof/vramprof/analysis/rules"
	"github.com/vramprof/vramprof/probes/event"
)

// findings derives every finding from the finished model and ranks them by
// bytes at stake (RankFindings, then the first stack; report breaks the
// remaining ties by wording). Each finding carries the figures of this run
// its words will quote: no advice without evidence. The peak and
// failed_call findings are made here; every other rule is in package
// rules, which reads the model through its View.
func (a *Analyzer) findings(r *Result) {
	v := a.view(r)
	for i := range r.Processes {
		if f := a.peakFinding(r, v, &r.Processes[i]); f != nil {
			r.Findings = append(r.Findings, *f)
		}
	}
	for i := range r.Processes {
		r.Findings = append(r.Findings, a.failedCallFindings(v, &r.Processes[i])...)
	}
	r.Findings = append(r.Findings, rules.Run(v)...)
	slices.SortStableFunc(r.Findings, func(x, y Finding) int {
		return cmp.Or(RankFindings(&x, &y), cmp.Compare(FirstStack(&x), FirstStack(&y)))
	})
}

// peakFinding states a process's peak and the stacks that made it up. Its
// remediation names the largest stacks at the peak until they cover half of
// it (at most three).
func (a *Analyzer) peakFinding(r *Result, v *rules.View, p *Process) *Finding {
	peak := p.Totals.PeakBytes
	if peak == 0 || p.PeakEvent == nil {
		return nil
	}
	ev := &PeakEvidence{Crossing: *p.PeakEvent}
	f := &Finding{
		Kind: KindPeak, Severity: SeverityInfo, PID: p.PID, ProcessStart: p.Start, Bytes: peak, Time: p.PeakTime,
		Stacks: v.FindingStacks(p.PeakStacks, a.opts.TopStacks), Peak: ev,
	}
	ev.Largest = covering(p.PeakStacks, peak)
	a.tensorsAtPeak(r, p, ev)
	return f
}

// covering returns the largest of us (sorted, largest first) until they
// cover half of total, at most three.
func covering(us []StackUsage, total uint64) []StackUsage {
	var out []StackUsage
	var covered uint64
	for _, s := range us {
		if len(out) == 3 || 2*covered >= total {
			break
		}
		covered += s.Bytes
		out = append(out, s)
	}
	return out
}

// tensorsAtPeak fills the tensors' side of a peak finding when the
// process's blocks were traced: the segments at the peak are the cache,
// and the tensors live at the tensors' own peak are what to reduce. The
// block classes' peak figures are at the block space's last peak (see
// "Peak" in doc.go).
func (a *Analyzer) tensorsAtPeak(r *Result, p *Process, ev *PeakEvidence) {
	var id uint32
	found := false
	for i, j := range a.procIndex {
		if &r.Processes[j] == p {
			id, found = i, true
			break
		}
	}
	if !found {
		return
	}
	sp := a.accounts[accountKey{id, blockScope}]
	if sp == nil || sp.peak == 0 {
		return
	}
	byStack := make(map[event.StackID]*Usage)
	for _, c := range a.classes {
		if c.key.pid != id || c.key.layer != event.LayerBlock || c.peak.Count == 0 {
			continue
		}
		u := byStack[c.key.stack]
		if u == nil {
			u = &Usage{}
			byStack[c.key.stack] = u
		}
		u.Count += c.peak.Count
		u.Bytes += c.peak.Bytes
	}
	ev.TensorPeakBytes, ev.TensorPeakTime = sp.peak, sp.peakTime
	ev.Tensors = covering(topStacks(byStack, 0), sp.peak)
}

// setupErrors are the codes that say CUDA cannot work in this process at
// all (no driver, no device, a stub library...): the run failed, whatever
// its sizes.
var setupErrors = map[errorKey]bool{
	{false, 3}: true, {true, 3}: true, // not initialized
	{false, 34}: true, {true, 34}: true, // a stub library
	{false, 35}:  true,                    // the driver is older than the runtime
	{false, 100}: true, {true, 100}: true, // no device
	{false, 803}: true, {true, 803}: true, // display and CUDA drivers differ
}

// IsSetupError reports whether error code ret of the driver API (driver)
// or the runtime says that CUDA cannot work in the process at all (no
// driver, no device, a stub library...): the run failed, whatever its
// sizes.
func IsSetupError(driver bool, ret int32) bool {
	return setupErrors[errorKey{driver, ret}]
}

// failedCallFindings reports each error other than out-of-memory that a
// process's allocations returned: its name, how many calls and bytes, and
// where. Freeing memory would not have helped them.
func (a *Analyzer) failedCallFindings(v *rules.View, p *Process) []Finding {
	var out []Finding
	for _, fc := range p.FailedCalls {
		if IsOutOfMemory(fc.Ret) {
			continue
		}
		f := Finding{Kind: KindFailedCall, Severity: SeverityHigh, PID: p.PID, ProcessStart: p.Start,
			Bytes: fc.Bytes, Time: fc.First.Time,
			Stacks:     v.FindingStacks(fc.Stacks, a.opts.TopStacks),
			FailedCall: &FailedCallEvidence{Calls: fc, Setup: IsSetupError(fc.Driver, fc.Ret)}}
		if f.FailedCall.Setup {
			f.Severity = SeverityCritical
		}
		out = append(out, f)
	}
	return out
}
