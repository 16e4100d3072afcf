package analysis

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report/units"
)

// findings derives every finding from the finished model and ranks them by
// bytes at stake. Each text quotes this run's numbers: no advice without
// evidence.
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
		return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(severityRank(x.Severity), severityRank(y.Severity)),
			cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.PID, y.PID), cmp.Compare(x.ProcessStart, y.ProcessStart),
			cmp.Compare(x.Summary, y.Summary),
			cmp.Compare(firstStack(x), firstStack(y)))
	})
}

func firstStack(f Finding) event.StackID {
	if len(f.Stacks) == 0 {
		return 0
	}
	return f.Stacks[0].Stack
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

// seconds renders a stream time as the time since the run's start, in the
// unit that fits ("+412 µs", "+1.25 s"); "an unknown time" when the
// stream's times are an order only (Run.TimesKnown).
func seconds(r *Result, t uint64) string {
	if !r.Run.TimesKnown() {
		return "an unknown time"
	}
	return units.Offset(r.Rel(t))
}

func percent(part, whole uint64) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * float64(part) / float64(whole)
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
	ev := p.PeakEvent
	f := &Finding{
		Kind: KindPeak, Severity: SeverityInfo, PID: p.PID, ProcessStart: p.Start, Bytes: peak, Time: p.PeakTime,
		Summary: fmt.Sprintf("process %s peaked at %d bytes (%s) at %s; the allocation that crossed it: %d bytes at %s on device %s",
			r.Run.PIDText(p.PID), peak, FormatBytes(peak), seconds(r, p.PeakTime), ev.Size, r.Site(ev.Stack), DeviceName(ev.Device)),
		Stacks: r.findingStacks(p.PeakStacks, a.opts.TopStacks),
	}
	var covered uint64
	for _, s := range p.PeakStacks {
		if len(f.Remediation) == 3 || 2*covered >= peak {
			break
		}
		covered += s.Bytes
		f.Remediation = append(f.Remediation, fmt.Sprintf(
			"reduce, reuse or free earlier the buffers allocated at %s: %d bytes (%s, %.1f%% of the peak) in %d allocations were live at the peak",
			r.Site(s.Stack), s.Bytes, FormatBytes(s.Bytes), percent(s.Bytes, peak), s.Count))
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
	site := r.Site(ff.Stack)
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
	f := &Finding{
		Kind: KindOOM, Severity: SeverityCritical, PID: p.PID, ProcessStart: p.Start, Bytes: ff.Size, Time: ff.Time,
		Summary: fmt.Sprintf("a request for %d bytes (%s) at %s failed with error %s on device %s at %s while %d bytes (%s) were live in process %s (%d on that device; peak so far %d)",
			ff.Size, FormatBytes(ff.Size), site, ErrorName(ff.API, ff.Ret), DeviceName(ff.Device), seconds(r, ff.Time),
			ff.LiveBytes, FormatBytes(ff.LiveBytes), r.Run.PIDText(p.PID), ff.DeviceLiveBytes, ff.PeakBytes),
		Stacks: r.findingStacks(topStacks(stacks, 0), a.opts.TopStacks),
	}
	if len(ff.LiveStacks) == 0 {
		f.Remediation = append(f.Remediation, fmt.Sprintf(
			"nothing traced was live when %d bytes were requested at %s: the request alone exceeded the free memory; shrink it, or look for memory not traced here (other processes, allocations before attach)",
			ff.Size, site))
	} else {
		top := ff.LiveStacks[0]
		f.Remediation = append(f.Remediation, fmt.Sprintf(
			"free or shrink memory before the request at %s (%d bytes): the largest live allocation site then was %s with %d bytes (%.1f%% of the %d live) in %d allocations",
			site, ff.Size, r.Site(top.Stack), top.Bytes, percent(top.Bytes, ff.LiveBytes), ff.LiveBytes, top.Count))
	}
	if oom.Count > 1 {
		f.Remediation = append(f.Remediation, fmt.Sprintf(
			"%d allocation calls ran out of memory in all (%d bytes requested); fix the first at %s, later ones may follow from it",
			oom.Count, oom.Bytes, site))
	}
	return f
}

// setupErrors are the codes that say CUDA cannot work in this process at
// all (no driver, no device, a stub library...): the run failed, whatever
// its sizes.
var setupErrors = map[errorKey]string{
	{false, 3}:   "CUDA could not initialize: check that the NVIDIA driver is loaded (nvidia-smi, dmesg)",
	{true, 3}:    "the driver API was called before cuInit, or cuInit failed: check that the NVIDIA driver is loaded (nvidia-smi, dmesg)",
	{false, 34}:  "the CUDA library loaded is a stub (libcuda.so from the toolkit's stubs directory): put the driver's libcuda.so.1 first on the library path",
	{true, 34}:   "the CUDA library loaded is a stub (libcuda.so from the toolkit's stubs directory): put the driver's libcuda.so.1 first on the library path",
	{false, 35}:  "the NVIDIA driver is missing or older than this CUDA runtime: install a driver that supports the runtime's CUDA version (nvidia-smi shows the driver's), or use a runtime built for the installed driver",
	{false, 100}: "no CUDA device is visible: check nvidia-smi, CUDA_VISIBLE_DEVICES and the container's device access (--gpus)",
	{true, 100}:  "no CUDA device is visible: check nvidia-smi, CUDA_VISIBLE_DEVICES and the container's device access (--gpus)",
	{false, 803}: "the display driver and the CUDA driver are different versions: reinstall the driver or reboot after an upgrade",
	{true, 803}:  "the display driver and the CUDA driver are different versions: reinstall the driver or reboot after an upgrade",
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
		site := r.Site(fc.First.Stack)
		f := Finding{Kind: KindFailedCall, Severity: SeverityHigh, PID: p.PID, ProcessStart: p.Start,
			Bytes: fc.Bytes, Time: fc.First.Time,
			Summary: fmt.Sprintf("%d allocation %s failed with error %s (not out-of-memory), %d bytes (%s) requested; the first, %s of %d bytes at %s on device %s at %s",
				fc.Count, plural(fc.Count, "call", "calls"), fc.Error, fc.Bytes, FormatBytes(fc.Bytes),
				fc.First.API, fc.First.Size, site, DeviceName(fc.First.Device), seconds(r, fc.First.Time)),
			Stacks: r.findingStacks(fc.Stacks, a.opts.TopStacks)}
		if hint, ok := setupErrors[errorKey{fc.Driver, fc.Ret}]; ok {
			f.Severity = SeverityCritical
			f.Remediation = append(f.Remediation, hint)
		} else {
			f.Remediation = append(f.Remediation, fmt.Sprintf(
				"error %s is not out-of-memory: check the call's arguments at %s and the driver and device setup before the sizes", fc.Error, site))
		}
		out = append(out, f)
	}
	return out
}

func plural(n uint64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
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
		if !isLeak(live) {
			continue
		}
		// The bytes at stake are the growth over the run: live at the end
		// minus live at the start of tracing, which is 0 for every stack
		// (tracing knows no stack of what was allocated before it). The
		// windows' growth is the rule's evidence only: a leak from the
		// first iteration grew before the first window ended too.
		growth := g.live.Bytes
		windowGrowth := live[w-1] - live[0]
		secs := float64(times[w-1]-times[0]) / 1e9
		rate := 0.0
		if secs > 0 {
			rate = float64(windowGrowth) / secs
		}
		site := r.Site(g.key.stack)
		sev := SeverityMedium
		if growth*10 >= peaks[g.key.pid] {
			sev = SeverityHigh
		}
		in := a.inst(g.key.pid)
		from := max(r.Run.Start, in.start)
		lk := &Leak{GrowthBytes: growth, From: from, To: times[w-1],
			WindowEnds: slices.Clone(times), Live: live, WindowStart: times[0], WindowEnd: times[w-1],
			WindowGrowthBytes: windowGrowth, BytesPerSecond: rate, Seconds: secs}
		a.leakRate(lk, g, a.loops[g.key.pid])
		a.timeToOOM(r, lk, g)
		f := Finding{
			Kind: KindLeak, Severity: sev, PID: in.pid, ProcessStart: in.start, Bytes: growth, Time: times[0],
			Summary: fmt.Sprintf("live bytes allocated at %s in process %s grew by %d bytes (%s) over the run (%s to %s, %s) without falling in the detection windows (+%d bytes, %s, from %s to %s); %d bytes in %d allocations were still live at the end%s",
				site, r.Run.PIDText(in.pid), growth, FormatBytes(growth), seconds(r, from), seconds(r, times[w-1]), units.Duration(times[w-1]-from),
				windowGrowth, FormatBytes(windowGrowth), seconds(r, times[0]), seconds(r, times[w-1]),
				g.live.Bytes, g.live.Count, lk.rateText("the stack")),
			Stacks: []FindingStack{{Stack: g.key.stack, Frames: r.Lines(g.key.stack), Site: site,
				Count: g.live.Count, Bytes: g.live.Bytes}},
			Remediation: []string{fmt.Sprintf(
				"free or detach the buffers allocated at %s: +%d bytes (%s) over %s; %d allocations from there were still live at the end",
				site, growth, FormatBytes(growth), units.Duration(times[w-1]-from), g.live.Count)},
			Leak: lk,
		}
		if lk.Iterations > 0 {
			fix := fmt.Sprintf("each iteration keeps %.0f more bytes (%s) allocated at %s: release what the iteration no longer needs at its end (drop the reference, detach the tensor from the graph, or keep a bounded cache)",
				lk.BytesPerIteration, units.FloatBytes(lk.BytesPerIteration), site)
			if lk.TimeToOOMProjectable() {
				fix += fmt.Sprintf("; at this rate device %s's %d bytes run out in %s",
					DeviceName(lk.Device), lk.CapacityBytes, units.Seconds(lk.TimeToOOMSeconds))
			}
			f.Remediation = append(f.Remediation, fix)
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
