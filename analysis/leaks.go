package analysis

import (
	"cmp"
	"slices"

	"github.com/vramprof/vramprof/probes/event"
)

// The leak rule (see doc.go, "The leak rule") reads the finished model and
// keeps no state of its own: the stacks' live-bytes histories on the leak
// grid (groupState.hist), the iteration logs (iterationModel), the loops
// (Analyzer.loops) and the stacks of the segments a caching allocator
// placed blocks in (pool.hosts).

// leakView is what the leak rule reads of a process whose blocks were
// traced (its tensors decide): the segment stacks that held blocks (the
// allocator's cache, never a leak).
type leakView struct {
	hosts map[event.StackID]bool
}

// leakViews returns the leak rule's view of every process instance with a
// block layer, keyed by instance id; a process absent from it has none.
func (a *Analyzer) leakViews() map[uint32]*leakView {
	out := make(map[uint32]*leakView)
	for _, g := range a.groups {
		if g.key.sc == blockScope && g.alloc.Count > 0 && out[g.key.pid] == nil {
			out[g.key.pid] = &leakView{hosts: make(map[event.StackID]bool)}
		}
	}
	for _, p := range a.pools.pools {
		v := out[p.key.pid]
		if v == nil {
			continue
		}
		for st := range p.hosts {
			v.hosts[st] = true
		}
	}
	return out
}

// leakFindings applies the leak rule (see doc.go) to every stack of every
// process: to its blocks (tensors) when the block layer was traced, and to
// its segments but those a caching allocator placed blocks in (the cache:
// cacheFindings says what it did); without a block layer, to its segments.
func (a *Analyzer) leakFindings(r *Result) []Finding {
	n, ends, times := a.leakWindows()
	if ends == nil {
		return nil
	}
	w := len(ends)
	views := a.leakViews()
	perPID := make(map[uint32][]Finding)
	for _, g := range a.groups {
		if g.live.Bytes == 0 {
			continue
		}
		v := views[g.key.pid]
		switch {
		case g.key.sc == blockScope:
		case g.key.sc == deviceScope && (v == nil || !v.hosts[g.key.stack]):
		default:
			continue
		}
		vals := g.hist.finish(a.leak, n)
		live := make([]uint64, w)
		for k, e := range ends {
			live[k] = vals[e]
		}
		wtimes := times
		lp := a.loops[g.key.pid]
		if !isLeak(live) {
			// Time windows judge when the process ran as much as what it
			// did: a loop descheduled for a window or two (a loaded
			// machine) leaves them flat. Its iterations do not.
			var ok bool
			live, wtimes, ok = a.iterationWindows(g, lp, w)
			if !ok || !isLeak(live) {
				continue
			}
		}
		in := a.inst(g.key.pid)
		from := max(r.Run.Start, in.start)
		if !a.persists(g, vals, in, from) {
			// Grown in a warm-up, flat since: not a leak.
			continue
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
		// Severity weighs the growth against the process's peak in the
		// stack's own layer: tensors against the tensors' peak.
		var peak uint64
		if sp := a.spaces[spaceKey{g.key.pid, g.key.sc}]; sp != nil {
			peak = sp.peak
		}
		sev := SeverityMedium
		if growth*10 >= peak {
			sev = SeverityHigh
		}
		lk := &Leak{GrowthBytes: growth, From: from, To: wtimes[w-1],
			WindowEnds: slices.Clone(wtimes), Live: live, WindowStart: wtimes[0], WindowEnd: wtimes[w-1],
			WindowGrowthBytes: windowGrowth, BytesPerSecond: rate, Seconds: secs, Layer: g.key.sc.layer,
			Since: a.leakSince(g, lp)}
		a.leakRate(lk, g, lp)
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

// persists is the leak rule's steadiness test (see doc.go, "The leak
// rule"): the stack's live bytes at the end exceed those at the middle of
// its process's span, read on the leak grid (vals, the stack's live bytes
// at each bucket end). The span runs from the process's first traced
// moment (from) to the end of the run for the run's own process (its
// exit in run mode, the end of the recording in attach mode: it ran on
// all that time), else to the last time memory became live or went in
// the stack's scope (a child's exit is not recorded). Growth that stopped
// in the first half, a cache warming up or sizes that stopped growing, is
// not a leak.
func (a *Analyzer) persists(g *groupState, vals []uint64, in *instance, from uint64) bool {
	sp := a.spaces[spaceKey{g.key.pid, g.key.sc}]
	if sp == nil {
		return false
	}
	end := sp.last
	if a.run.Ended && in.pid == a.run.PID && in.supersededAt == 0 {
		end = max(end, a.run.End)
	}
	if end <= from {
		return false
	}
	mid := from + (end-from)/2
	if mid >= a.lastEvent {
		// Nothing changed after the middle.
		return false
	}
	// mid is before the last event: within the grid, which index does
	// not grow then.
	return g.live.Bytes > vals[a.leak.index(mid)]
}

// leakSince is when the stack's growth began: the start of the loop's
// iteration from which its live bytes at the iteration starts never fell
// back (the iteration before the first rise of that run), when the process
// has a loop and the stack's change log is complete; else 0 (unknown: the
// windows say it).
func (a *Analyzer) leakSince(g *groupState, lp *loop) uint64 {
	if lp == nil {
		return 0
	}
	log := a.iters.log(g)
	if log == nil {
		return 0
	}
	// From the end backwards: the last iteration start whose live bytes
	// are at most every later start's, and below the end.
	since := uint64(0)
	low := g.live.Bytes
	for j := len(lp.seq) - 1; j >= 0; j-- {
		v := log.before(lp.seq[j])
		if v > low {
			break
		}
		if v < low {
			since = lp.starts[j]
		}
		low = v
	}
	return since
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
