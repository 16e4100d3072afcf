package analysis

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

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

// leakSite is what the leak rule judges: one code path of a process in one
// scope, the stacks whose rendered frames are the same (a source line
// called from a loop the compiler unrolled, or from a call duplicated by
// inlining, has one stack per return address, and a person reads them as
// one site). gs is heaviest first (live bytes at the end, then stack ID).
type leakSite struct {
	gs []*groupState
}

// live is the site's live bytes and allocations at the end.
func (s *leakSite) live() (bytes, count uint64) {
	for _, g := range s.gs {
		bytes += g.live.Bytes
		count += g.live.Count
	}
	return bytes, count
}

// vals sums the stacks' live bytes at each leak-grid bucket end.
func (s *leakSite) vals(a *Analyzer, n int) []uint64 {
	out := make([]uint64, n)
	for _, g := range s.gs {
		for i, v := range g.hist.finish(a.leak, n) {
			out[i] += v
		}
	}
	return out
}

// siteLog is a site's stacks' live-bytes logs, read as one.
type siteLog []*liveLog

// before returns the site's live bytes just before event seq.
func (l siteLog) before(seq uint64) uint64 {
	var v uint64
	for _, x := range l {
		v += x.before(seq)
	}
	return v
}

// at returns the site's live bytes at time t.
func (l siteLog) at(t uint64) uint64 {
	var v uint64
	for _, x := range l {
		v += x.at(t)
	}
	return v
}

// siteLog returns the site's logs when every stack's is complete; nil
// otherwise.
func (a *Analyzer) siteLog(s *leakSite) siteLog {
	out := make(siteLog, 0, len(s.gs))
	for _, g := range s.gs {
		log := a.iters.log(g)
		if log == nil {
			return nil
		}
		out = append(out, log)
	}
	return out
}

// leakSites groups the stacks the leak rule reads (see leakFindings) into
// sites: per process and scope, by their rendered frames (a stack with no
// frames is a site of its own).
func (a *Analyzer) leakSites(r *Result, views map[uint32]*leakView) []*leakSite {
	type siteKey struct {
		pid   uint32
		sc    scope
		lines string
		stack event.StackID
	}
	byKey := make(map[siteKey]*leakSite)
	var out []*leakSite
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
		k := siteKey{pid: g.key.pid, sc: g.key.sc}
		if st := r.Stacks[g.key.stack]; st != nil && len(st.Frames) > 0 {
			k.lines = sourceKey(st.Frames)
		} else {
			k.stack = g.key.stack
		}
		s := byKey[k]
		if s == nil {
			s = &leakSite{}
			byKey[k] = s
			out = append(out, s)
		}
		s.gs = append(s.gs, g)
	}
	for _, s := range out {
		slices.SortFunc(s.gs, func(x, y *groupState) int {
			return cmp.Or(cmp.Compare(y.live.Bytes, x.live.Bytes), cmp.Compare(x.key.stack, y.key.stack))
		})
	}
	return out
}

// sourceKey identifies a stack by its source lines: a frame with a file
// and line is that line of that function, any other its address (two
// frames of one function without line information are not known to be
// one call).
func sourceKey(frames []event.Frame) string {
	var b strings.Builder
	for _, f := range frames {
		if f.File != "" && f.Line > 0 {
			fmt.Fprintf(&b, "%s (%s:%d)\n", f.Function, f.File, f.Line)
		} else {
			fmt.Fprintf(&b, "%#x\n", f.Addr)
		}
	}
	return b.String()
}

// leakFindings applies the leak rule (see doc.go) to every site of every
// process: to its blocks (tensors) when the block layer was traced, and to
// its segments but those a caching allocator placed blocks in (the cache:
// cacheFindings says what it did); without a block layer, to its segments.
func (a *Analyzer) leakFindings(r *Result) []Finding {
	n, ends, times := a.leakWindows()
	if ends == nil {
		return nil
	}
	w := len(ends)
	perPID := make(map[uint32][]Finding)
	for _, s := range a.leakSites(r, a.leakViews()) {
		g := s.gs[0]
		lp := a.loops[g.key.pid]
		log := a.siteLog(s)
		in := a.inst(g.key.pid)
		from := max(r.Run.Start, in.start)
		growth, count := s.live()
		vals := s.vals(a, n)
		live := make([]uint64, w)
		for k, e := range ends {
			live[k] = vals[e]
		}
		wtimes := times
		since := uint64(0)
		if isLeak(live) && a.persists(g, growth, vals, in, from) {
			if lp != nil && log != nil {
				since = leakSince(lp, log, growth)
			}
		} else {
			// Time windows judge when the process ran as much as what it
			// did: a loop descheduled for a window or two (a loaded
			// machine) leaves them flat, and a leak that began late rises
			// in its last windows only. The loop is the second look: what
			// the site held at each iteration start, however the machine
			// scheduled them.
			if lp == nil || log == nil || len(lp.seq) < w {
				continue
			}
			var ok bool
			live, wtimes, ok = iterationTail(lp, log, growth, a.lastEvent, w)
			if !ok || !a.persists(g, growth, vals, in, from) {
				// A loop of the warm-up alone rises at every window of
				// its own iterations: the growth must persist through
				// the process's span too.
				continue
			}
			since = leakSince(lp, log, growth)
		}
		// The bytes at stake are the growth over the run: live at the end
		// minus live at the start of tracing, which is 0 for every stack
		// (tracing knows no stack of what was allocated before it). The
		// windows' growth is the rule's evidence only: a leak from the
		// first iteration grew before the first window ended too.
		last := len(live) - 1
		windowGrowth := live[last] - live[0]
		secs := float64(wtimes[last]-wtimes[0]) / 1e9
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
		lk := &Leak{GrowthBytes: growth, From: from, To: wtimes[last],
			WindowEnds: slices.Clone(wtimes), Live: live, WindowStart: wtimes[0], WindowEnd: wtimes[last],
			WindowGrowthBytes: windowGrowth, BytesPerSecond: rate, Seconds: secs, Layer: g.key.sc.layer,
			Since: since}
		a.leakRate(lk, log, lp)
		a.timeToOOM(r, lk, s.gs)
		// The site's live bytes at the end are its growth (see above).
		f := Finding{
			Kind: KindLeak, Severity: sev, PID: in.pid, ProcessStart: in.start, Bytes: growth, Time: wtimes[0],
			Stacks: []FindingStack{{Stack: g.key.stack, Frames: r.Lines(g.key.stack), Site: r.Site(g.key.stack),
				Count: count, Bytes: growth}},
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

// iterationTail is the leak rule's second look (see doc.go, "The leak
// rule"), on a site's live bytes read at its process's iteration starts:
// y[j] before iteration j starts, y[count] at the end (end, the site's
// live bytes then, at lastEvent). The growth's run is the tail of y that
// never falls, from the iteration before its first rise; it is cut into w
// windows equal in iterations (window k < w ends where iteration
// s + ceil(k*m/w) of the run's m starts, window w at lastEvent), and the
// site leaks when the run has at least w iterations, isLeak holds on the
// windows' values, and the site holds more at the end than before the
// loop's middle iteration (the growth persists through the steady part of
// the loop). live are the windows' values and times their end times.
func iterationTail(lp *loop, log siteLog, end, lastEvent uint64, w int) (live, times []uint64, ok bool) {
	n := len(lp.seq)
	y := make([]uint64, n+1)
	for j, s := range lp.seq {
		y[j] = log.before(s)
	}
	y[n] = end
	if y[n] <= y[n/2] {
		return nil, nil, false
	}
	s := n
	for s > 0 && y[s-1] <= y[s] {
		s--
	}
	for s < n && y[s+1] == y[s] {
		s++
	}
	m := n - s
	if m < w {
		return nil, nil, false
	}
	live, times = make([]uint64, w), make([]uint64, w)
	for k := 1; k < w; k++ {
		j := s + (k*m+w-1)/w // < n, as m >= w
		live[k-1], times[k-1] = y[j], lp.starts[j]
	}
	live[w-1], times[w-1] = end, lastEvent
	return live, times, isLeak(live)
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
func (a *Analyzer) persists(g *groupState, liveEnd uint64, vals []uint64, in *instance, from uint64) bool {
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
	return liveEnd > vals[a.leak.index(mid)]
}

// leakSince is when a site's growth began: the start of the loop's
// iteration from which its live bytes at the iteration starts never fell
// back (the iteration before the first rise of that run); 0 when it never
// rose (the windows say when).
func leakSince(lp *loop, log siteLog, end uint64) uint64 {
	// From the end backwards: the last iteration start whose live bytes
	// are at most every later start's, and below the end.
	since := uint64(0)
	low := end
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
