package analysis

import (
	"cmp"
	"slices"

	"github.com/vramprof/vramprof/probes/event"
)

// findings derives every finding from the finished model and ranks them by
// bytes at stake (RankFindings, then the first stack; report breaks the
// remaining ties by wording). Each finding carries the figures of this run
// its words will quote: no advice without evidence.
func (a *Analyzer) findings(r *Result) {
	leaks := a.leakFindings(r)
	pools, explained := a.poolFindings(r)
	for i := range r.Processes {
		p := &r.Processes[i]
		if f := a.peakFinding(r, p); f != nil {
			r.Findings = append(r.Findings, *f)
		}
		if explained[p.PID][p.Start] {
			// The block layer explained its failures, one finding each.
			continue
		}
		if f := a.oomFinding(r, p); f != nil {
			r.Findings = append(r.Findings, *f)
		}
	}
	for i := range r.Processes {
		r.Findings = append(r.Findings, a.failedCallFindings(r, &r.Processes[i])...)
	}
	r.Findings = append(r.Findings, leaks...)
	r.Findings = append(r.Findings, pools...)
	r.Findings = append(r.Findings, a.spikeFindings(r)...)
	r.Findings = append(r.Findings, a.pinnedHostFindings(r)...)
	if f := a.imbalanceFinding(r); f != nil {
		r.Findings = append(r.Findings, *f)
	}
	slices.SortStableFunc(r.Findings, func(x, y Finding) int {
		return cmp.Or(RankFindings(&x, &y), cmp.Compare(FirstStack(&x), FirstStack(&y)))
	})
}

func severityRank(s Severity) int {
	switch s {
	case SeverityCritical:
		return 0
	case SeverityHigh:
		return 1
	case SeverityMedium:
		return 2
	}
	return 3
}

func (r *Result) findingStacks(us []StackUsage, n int) []FindingStack {
	out := make([]FindingStack, 0, min(len(us), n))
	for _, u := range us {
		if len(out) == n {
			break
		}
		out = append(out, FindingStack{Stack: u.Stack, Frames: r.Lines(u.Stack), Site: r.Site(u.Stack),
			Count: u.Count, Bytes: u.Bytes})
	}
	return out
}

// peakFinding states a process's peak and the stacks that made it up. Its
// remediation names the largest stacks at the peak until they cover half of
// it (at most three).
func (a *Analyzer) peakFinding(r *Result, p *Process) *Finding {
	peak := p.Totals.PeakBytes
	if peak == 0 || p.PeakEvent == nil {
		return nil
	}
	ev := &PeakEvidence{Crossing: *p.PeakEvent}
	f := &Finding{
		Kind: KindPeak, Severity: SeverityInfo, PID: p.PID, ProcessStart: p.Start, Bytes: peak, Time: p.PeakTime,
		Stacks: r.findingStacks(p.PeakStacks, a.opts.TopStacks), Peak: ev,
	}
	var covered uint64
	for _, s := range p.PeakStacks {
		if len(ev.Largest) == 3 || 2*covered >= peak {
			break
		}
		covered += s.Bytes
		ev.Largest = append(ev.Largest, s)
	}
	return f
}

// oomFinding reports a process's allocations that failed for want of
// memory, led by the first one. Other errors are failed_call findings.
func (a *Analyzer) oomFinding(r *Result, p *Process) *Finding {
	ff := p.FirstOOM
	if ff == nil {
		return nil
	}
	var oom FailedCalls // the OOM groups of both libraries, merged
	stacks := map[event.StackID]*Usage{}
	for _, fc := range p.FailedCalls {
		if !IsOutOfMemory(fc.Ret) {
			continue
		}
		oom.Count += fc.Count
		oom.Bytes += fc.Bytes
		for _, s := range fc.Stacks {
			u := stacks[s.Stack]
			if u == nil {
				u = &Usage{}
				stacks[s.Stack] = u
			}
			u.Count += s.Count
			u.Bytes += s.Bytes
		}
	}
	return &Finding{
		Kind: KindOOM, Severity: SeverityCritical, PID: p.PID, ProcessStart: p.Start, Bytes: ff.Size, Time: ff.Time,
		Stacks:   r.findingStacks(topStacks(stacks, 0), a.opts.TopStacks),
		OOMCalls: &OOMCalls{First: *ff, Count: oom.Count, Bytes: oom.Bytes},
	}
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
func (a *Analyzer) failedCallFindings(r *Result, p *Process) []Finding {
	var out []Finding
	for _, fc := range p.FailedCalls {
		if IsOutOfMemory(fc.Ret) {
			continue
		}
		f := Finding{Kind: KindFailedCall, Severity: SeverityHigh, PID: p.PID, ProcessStart: p.Start,
			Bytes: fc.Bytes, Time: fc.First.Time,
			Stacks:     r.findingStacks(fc.Stacks, a.opts.TopStacks),
			FailedCall: &FailedCallEvidence{Calls: fc, Setup: IsSetupError(fc.Driver, fc.Ret)}}
		if f.FailedCall.Setup {
			f.Severity = SeverityCritical
		}
		out = append(out, f)
	}
	return out
}

// leakFindings applies the leak rule (see doc.go) to every stack of every
// process at the segment layer.
func (a *Analyzer) leakFindings(r *Result) []Finding {
	n, ends, times := a.leakWindows()
	if ends == nil {
		return nil
	}
	w := len(ends)
	// Keyed by instance id: a reused PID's instances are apart.
	peaks := make(map[uint32]uint64)
	for id, i := range a.procIndex {
		peaks[id] = r.Processes[i].Totals.PeakBytes
	}
	perPID := make(map[uint32][]Finding)
	for _, g := range a.groups {
		if g.key.sc != deviceScope || g.live.Bytes == 0 {
			continue
		}
		vals := g.hist.finish(a.leak, n)
		live := make([]uint64, w)
		for k, e := range ends {
			live[k] = vals[e]
		}
		wtimes := times
		if !isLeak(live) {
			// Time windows judge when the process ran as much as what it
			// did: a loop descheduled for a window or two (a loaded
			// machine) leaves them flat. Its iterations do not.
			var ok bool
			live, wtimes, ok = a.iterationWindows(g, a.loops[g.key.pid], w)
			if !ok || !isLeak(live) {
				continue
			}
		}
		// The bytes at stake are the growth over the run: live at the end
		// minus live at the start of tracing, which is 0 for every stack
		// (tracing knows no stack of what was allocated before it). The
		// windows' growth is the rule's evidence only: a leak from the
		// first iteration grew before the first window ended too.
		growth := g.live.Bytes
		windowGrowth := live[w-1] - live[0]
		secs := float64(wtimes[w-1]-wtimes[0]) / 1e9
		rate := 0.0
		if secs > 0 {
			rate = float64(windowGrowth) / secs
		}
		sev := SeverityMedium
		if growth*10 >= peaks[g.key.pid] {
			sev = SeverityHigh
		}
		in := a.inst(g.key.pid)
		from := max(r.Run.Start, in.start)
		lk := &Leak{GrowthBytes: growth, From: from, To: wtimes[w-1],
			WindowEnds: slices.Clone(wtimes), Live: live, WindowStart: wtimes[0], WindowEnd: wtimes[w-1],
			WindowGrowthBytes: windowGrowth, BytesPerSecond: rate, Seconds: secs}
		a.leakRate(lk, g, a.loops[g.key.pid])
		a.timeToOOM(r, lk, g)
		// The stack's live bytes at the end are its growth (see above).
		f := Finding{
			Kind: KindLeak, Severity: sev, PID: in.pid, ProcessStart: in.start, Bytes: growth, Time: wtimes[0],
			Stacks: []FindingStack{{Stack: g.key.stack, Frames: r.Lines(g.key.stack), Site: r.Site(g.key.stack),
				Count: g.live.Count, Bytes: g.live.Bytes}},
			Leak: lk,
		}
		perPID[g.key.pid] = append(perPID[g.key.pid], f)
	}
	var out []Finding
	for _, fs := range perPID {
		slices.SortFunc(fs, func(x, y Finding) int {
			return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Stacks[0].Stack, y.Stacks[0].Stack))
		})
		out = append(out, fs[:min(len(fs), maxLeakFindings)]...)
	}
	return out
}

// leakWindows cuts the n leak-grid buckets into at most Options.LeakWindows
// windows (see doc.go, "The leak rule"): ends[k] is the bucket that closes
// window k, times[k] its end time, the last one the last event. ends is nil
// when there is no grid or too little of it for three windows.
func (a *Analyzer) leakWindows() (n int, ends []int, times []uint64) {
	if a.leak == nil {
		return 0, nil, nil
	}
	n = a.leak.index(a.lastEvent) + 1
	w := min(a.opts.LeakWindows, n)
	if w < 3 {
		return n, nil, nil
	}
	ends = make([]int, w)
	times = make([]uint64, w)
	for k := range w {
		ends[k] = ((k+1)*n+w-1)/w - 1
		times[k] = a.leak.bucketEnd(ends[k])
	}
	times[w-1] = a.lastEvent
	return n, ends, times
}

// iterationWindows is the leak rule's second look (see doc.go, "The leak
// rule"), for a stack the time windows did not flag: its live bytes at the
// ends of w windows of its process's loop, equal in iterations, and the
// windows' end times. Window k < w ends where iteration ceil(k*count/w)
// starts (the sample the rate per iteration takes there), window w at the
// last event, as the time rule's last window does. ok is false without a
// loop of at least w iterations or without the stack's complete change log.
func (a *Analyzer) iterationWindows(g *groupState, lp *loop, w int) (live, times []uint64, ok bool) {
	if lp == nil || len(lp.seq) < w {
		return nil, nil, false
	}
	log := a.iters.log(g)
	if log == nil {
		return nil, nil, false
	}
	n := len(lp.seq)
	live, times = make([]uint64, w), make([]uint64, w)
	for k := 1; k < w; k++ {
		j := (k*n + w - 1) / w // < n, as n >= w
		live[k-1], times[k-1] = log.before(lp.seq[j]), lp.starts[j]
	}
	live[w-1], times[w-1] = g.live.Bytes, a.lastEvent
	return live, times, true
}

// isLeak is the leak rule on a stack's live bytes at the window ends: never
// falling, higher at the end than after the first window, and rising in at
// least half of the steps between windows (so a single step up, such as a
// loop stopped in the middle of an iteration or a cache filled once, is not
// a leak).
func isLeak(live []uint64) bool {
	w := len(live)
	rises := 0
	for k := 1; k < w; k++ {
		switch {
		case live[k] < live[k-1]:
			return false
		case live[k] > live[k-1]:
			rises++
		}
	}
	return live[w-1] > live[0] && 2*rises >= w-1
}
