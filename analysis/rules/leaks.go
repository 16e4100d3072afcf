package rules

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/vramprof/vramprof/analysis/finding"
	"github.com/vramprof/vramprof/probes/event"
)

// maxLeakFindings caps leak findings per process: past that the report
// lists noise, and the top ones hold most of the bytes.
const maxLeakFindings = 10

// Leaks applies the leak rule (see the analysis doc, "The leak rule") to
// every site of every process: to its tensors when the block layer was
// traced, and to its device memory but the segments a caching allocator
// placed blocks in (the cache: CacheGrowth says what it did); without a
// block layer, to its device memory. At most maxLeakFindings per process,
// the largest.
func Leaks(v *View) []finding.Finding {
	n, ends, times := leakWindows(v)
	if ends == nil {
		return nil
	}
	w := len(ends)
	perProc := make(map[*Process][]finding.Finding)
	for _, s := range leakSites(v) {
		g := s.series[0]
		p := g.Process
		lp := p.Loop
		log := s.log()
		from := max(v.Start, p.Start)
		growth, count := s.live()
		vals := s.buckets(n)
		live := make([]uint64, w)
		for k, e := range ends {
			live[k] = vals[e]
		}
		wtimes := times
		since := uint64(0)
		if isLeak(live) && persists(v, g, growth, vals, from) {
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
			if lp == nil || log == nil || len(lp.Seq) < w {
				continue
			}
			var ok bool
			live, wtimes, ok = iterationTail(lp, log, growth, v.LastEvent, w)
			if !ok || !persists(v, g, growth, vals, from) {
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
		if sp := g.space(); sp != nil {
			peak = sp.PeakBytes
		}
		sev := finding.SeverityMedium
		if growth*10 >= peak {
			sev = finding.SeverityHigh
		}
		lk := &finding.Leak{GrowthBytes: growth, From: from, To: wtimes[last],
			WindowEnds: slices.Clone(wtimes), Live: live, WindowStart: wtimes[0], WindowEnd: wtimes[last],
			WindowGrowthBytes: windowGrowth, BytesPerSecond: rate, Seconds: secs, Layer: g.Layer,
			Since: since}
		leakRate(v, lk, log, lp)
		timeToOOM(v, lk, s.series)
		// The site's live bytes at the end are its growth (see above).
		f := finding.Finding{
			Kind: finding.KindLeak, Severity: sev, PID: p.PID, ProcessStart: p.Start, Bytes: growth, Time: wtimes[0],
			Stacks: []finding.FindingStack{{Stack: g.Stack, Frames: v.Lines(g.Stack), Site: v.Site(g.Stack),
				Count: count, Bytes: growth}},
			Leak: lk,
		}
		perProc[p] = append(perProc[p], f)
	}
	var out []finding.Finding
	for _, fs := range perProc {
		slices.SortFunc(fs, func(x, y finding.Finding) int {
			return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Stacks[0].Stack, y.Stacks[0].Stack))
		})
		out = append(out, fs[:min(len(fs), maxLeakFindings)]...)
	}
	return out
}

// space returns the series' process's memory in the series' scope; nil
// when it had none there.
func (s *Series) space() *Space {
	switch s.Scope {
	case ScopeSegments:
		return s.Process.Segments
	case ScopeTensors:
		return s.Process.Tensors
	case ScopeHost:
		return s.Process.Host
	}
	return nil
}

// leakSite is what the leak rule judges: one code path of a process in one
// scope, the stacks whose rendered frames are the same (a source line
// called from a loop the compiler unrolled, or from a call duplicated by
// inlining, has one stack per return address, and a person reads them as
// one site). series is heaviest first (live bytes at the end, then stack
// ID).
type leakSite struct {
	series []*Series
}

// live is the site's live bytes and allocations at the end.
func (s *leakSite) live() (bytes, count uint64) {
	for _, g := range s.series {
		bytes += g.Live.Bytes
		count += g.Live.Count
	}
	return bytes, count
}

// buckets sums the stacks' live bytes at each leak-grid bucket end.
func (s *leakSite) buckets(n int) []uint64 {
	out := make([]uint64, n)
	for _, g := range s.series {
		for i, x := range g.History.Buckets(n) {
			out[i] += x
		}
	}
	return out
}

// siteLog is a site's stacks' live-bytes logs, read as one.
type siteLog []LiveLog

// before returns the site's live bytes just before event seq.
func (l siteLog) before(seq uint64) uint64 {
	var v uint64
	for _, x := range l {
		v += x.Before(seq)
	}
	return v
}

// at returns the site's live bytes at time t.
func (l siteLog) at(t uint64) uint64 {
	var v uint64
	for _, x := range l {
		v += x.At(t)
	}
	return v
}

// log returns the site's logs when every stack's is complete; nil
// otherwise.
func (s *leakSite) log() siteLog {
	out := make(siteLog, 0, len(s.series))
	for _, g := range s.series {
		log := g.History.Log()
		if log == nil {
			return nil
		}
		out = append(out, log)
	}
	return out
}

// leakSites groups the series the leak rule reads (see Leaks) into sites:
// per process and scope, by their rendered frames (a stack with no frames
// is a site of its own).
func leakSites(v *View) []*leakSite {
	type siteKey struct {
		p     *Process
		sc    Scope
		lines string
		stack event.StackID
	}
	byKey := make(map[siteKey]*leakSite)
	var out []*leakSite
	for _, g := range v.Series {
		if g.Live.Bytes == 0 {
			continue
		}
		switch {
		case g.Scope == ScopeTensors:
		case g.Scope == ScopeSegments && !g.Process.CacheStacks[g.Stack]:
		default:
			continue
		}
		k := siteKey{p: g.Process, sc: g.Scope}
		if st := v.Stacks[g.Stack]; st != nil && len(st.Frames) > 0 {
			k.lines = SourceKey(st.Frames)
		} else {
			k.stack = g.Stack
		}
		s := byKey[k]
		if s == nil {
			s = &leakSite{}
			byKey[k] = s
			out = append(out, s)
		}
		s.series = append(s.series, g)
	}
	for _, s := range out {
		slices.SortFunc(s.series, func(x, y *Series) int {
			return cmp.Or(cmp.Compare(y.Live.Bytes, x.Live.Bytes), cmp.Compare(x.Stack, y.Stack))
		})
	}
	return out
}

// SourceKey identifies a stack by its source lines: a frame with a file
// and line is that line of that function, any other its address (two
// frames of one function without line information are not known to be
// one call). The leak rule's sites and the analysis's loop sites group
// stacks by it.
func SourceKey(frames []event.Frame) string {
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

// iterationTail is the leak rule's second look (see the analysis doc, "The
// leak rule"), on a site's live bytes read at its process's iteration
// starts: y[j] before iteration j starts, y[count] at the end (end, the
// site's live bytes then, at lastEvent). The growth's run is the tail of y
// that never falls, from the iteration before its first rise; it is cut
// into w windows equal in iterations (window k < w ends where iteration
// s + ceil(k*m/w) of the run's m starts, window w at lastEvent), and the
// site leaks when the run has at least w iterations, isLeak holds on the
// windows' values, and the site holds more at the end than before the
// loop's middle iteration (the growth persists through the steady part of
// the loop). live are the windows' values and times their end times.
func iterationTail(lp *Loop, log siteLog, end, lastEvent uint64, w int) (live, times []uint64, ok bool) {
	n := len(lp.Seq)
	y := make([]uint64, n+1)
	for j, s := range lp.Seq {
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
		live[k-1], times[k-1] = y[j], lp.Starts[j]
	}
	live[w-1], times[w-1] = end, lastEvent
	return live, times, isLeak(live)
}

// persists is the leak rule's steadiness test (see the analysis doc, "The
// leak rule"): the stack's live bytes at the end exceed those at the
// middle of its process's span, read on the leak grid (vals, the stack's
// live bytes at each bucket end). The span runs from the process's first
// traced moment (from) to the end of the run for the run's own process
// (its exit in run mode, the end of the recording in attach mode: it ran
// on all that time), else to the last time memory became live or went in
// the stack's scope (a child's exit is not recorded). Growth that stopped
// in the first half, a cache warming up or sizes that stopped growing, is
// not a leak.
func persists(v *View, g *Series, liveEnd uint64, vals []uint64, from uint64) bool {
	sp := g.space()
	if sp == nil {
		return false
	}
	p := g.Process
	end := sp.LastChange
	if v.RootEnded && p.PID == v.RootPID && p.SupersededAt == 0 {
		end = max(end, v.RootEnd)
	}
	if end <= from {
		return false
	}
	mid := from + (end-from)/2
	if mid >= v.LastEvent {
		// Nothing changed after the middle.
		return false
	}
	// mid is before the last event: within the grid, which index does
	// not grow then.
	return liveEnd > vals[v.Grid.Index(mid)]
}

// leakSince is when a site's growth began: the start of the loop's
// iteration from which its live bytes at the iteration starts never fell
// back (the iteration before the first rise of that run); 0 when it never
// rose (the windows say when).
func leakSince(lp *Loop, log siteLog, end uint64) uint64 {
	// From the end backwards: the last iteration start whose live bytes
	// are at most every later start's, and below the end.
	since := uint64(0)
	low := end
	for j := len(lp.Seq) - 1; j >= 0; j-- {
		x := log.before(lp.Seq[j])
		if x > low {
			break
		}
		if x < low {
			since = lp.Starts[j]
		}
		low = x
	}
	return since
}

// leakWindows cuts the n leak-grid buckets into at most View.LeakWindows
// windows (see the analysis doc, "The leak rule"): ends[k] is the bucket
// that closes window k, times[k] its end time, the last one the last
// event. ends is nil when there is no grid or too little of it for three
// windows.
func leakWindows(v *View) (n int, ends []int, times []uint64) {
	if v.Grid == nil {
		return 0, nil, nil
	}
	n = v.Grid.Index(v.LastEvent) + 1
	w := min(v.LeakWindows, n)
	if w < 3 {
		return n, nil, nil
	}
	ends = make([]int, w)
	times = make([]uint64, w)
	for k := range w {
		ends[k] = ((k+1)*n+w-1)/w - 1
		times[k] = v.Grid.BucketEnd(ends[k])
	}
	times[w-1] = v.LastEvent
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

// leakRate fills the per-iteration figures of a leak from its process's
// loop: the slope of the site's live bytes at the iteration boundaries
// when its change log is complete, else the windows' growth over the
// iterations that started within them.
func leakRate(v *View, l *finding.Leak, log siteLog, lp *Loop) {
	if lp == nil {
		return
	}
	var per float64
	if log != nil {
		n := len(lp.Seq)
		xs, ys := make([]uint64, 0, n+1), make([]float64, 0, n+1)
		for j, s := range lp.Seq {
			xs, ys = append(xs, lp.Index[j]), append(ys, float64(log.before(s)))
		}
		end := min(lp.Starts[n-1]+lp.PeriodNs, v.LastEvent)
		xs, ys = append(xs, lp.Index[n-1]+1), append(ys, float64(log.at(end)))
		per = SlopeAt(xs, ys)
	} else {
		lo, hi := l.WindowEnds[0], l.WindowEnds[len(l.WindowEnds)-1]
		n := 0
		for _, t := range lp.Starts {
			if t > lo && t <= hi {
				n++
			}
		}
		if n == 0 {
			return
		}
		per = float64(l.Live[len(l.Live)-1]-l.Live[0]) / float64(n)
	}
	if per <= 0 {
		return
	}
	l.Iterations = lp.Count
	l.PeriodNs = lp.PeriodNs
	l.BytesPerIteration = per
	l.BytesPerMinute = per * 60e9 / float64(lp.PeriodNs)
}

// SlopeAt is the least-squares slope of ys against xs (0 with fewer than
// two points or one x): the leak rule's and the loops' rates per
// iteration.
func SlopeAt(xs []uint64, ys []float64) float64 {
	n := float64(len(ys))
	if n < 2 {
		return 0
	}
	var mx, my float64
	for i, y := range ys {
		mx += float64(xs[i])
		my += y
	}
	mx, my = mx/n, my/n
	var sxy, sxx float64
	for i, y := range ys {
		dx := float64(xs[i]) - mx
		sxy += dx * (y - my)
		sxx += dx * dx
	}
	if sxx == 0 {
		return 0
	}
	return sxy / sxx
}

// timeToOOM sets the leak's projected time to out-of-memory on the device
// where the site's stacks hold the most live bytes, when its capacity is
// known (View.Capacity): the device's headroom at the end over the rate.
// The headroom is NVML's free bytes when NVML sampled the device (unless
// the user gave the capacity), read at the last sample, or the last at or
// before the root process's exit when it exited: a sample taken after the
// exit has the process's memory back. Samples after the leak's last event
// count: the memory is still held while the process idles.
func timeToOOM(v *View, l *finding.Leak, site []*Series) {
	if l.BytesPerMinute <= 0 {
		return
	}
	byDev := make(map[int32]uint64)
	for _, s := range site {
		for d, b := range s.LiveByDevice {
			byDev[d] += b
		}
	}
	dev, most := int32(0), uint64(0)
	found := false
	for d, b := range byDev {
		if !found || b > most || b == most && d < dev {
			dev, most, found = d, b, true
		}
	}
	if !found {
		return
	}
	capacity := v.Capacity(dev)
	if capacity == 0 {
		return
	}
	var live uint64
	for _, d := range v.Devices {
		if d.Index == dev {
			live = d.LiveBytesAtEnd
		}
	}
	l.Device = dev
	l.CapacityBytes = capacity
	end := uint64(math.MaxUint64)
	if v.RootEnded {
		end = v.RootEnd
	}
	if free, at, ok := v.nvmlFree(dev, end); ok && v.CapacityOption == 0 {
		l.HeadroomBytes, l.HeadroomTime, l.HeadroomNVML = free, at, true
	} else if capacity > live {
		l.HeadroomBytes = capacity - live
	}
	if l.HeadroomBytes > 0 {
		l.TimeToOOMSeconds = float64(l.HeadroomBytes) / (l.BytesPerMinute / 60)
	}
}
