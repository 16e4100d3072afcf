package rules

import (
	"cmp"
	"slices"
	"strings"

	"github.com/vramprof/vramprof/analysis/finding"
	"github.com/vramprof/vramprof/probes/event"
)

// pinnedGrowthHigh: pinned host memory is page-locked RAM taken from what
// the OS, the page cache and the DataLoader workers can use, and the
// kernel cannot swap it; a run that pins a GiB more than it frees is a
// problem on any machine, smaller growth is one on a long run.
const pinnedGrowthHigh = 1 << 30

// pinMemoryFrame marks a stack through PyTorch's pin_memory (the
// DataLoader's pin-memory thread calls Tensor.pin_memory): only then is
// DataLoader advice backed by the stack.
const pinMemoryFrame = "pin_memory"

// growingStack is a pinned host stack the leak rule flagged, with its live
// bytes at the window ends.
type growingStack struct {
	s    *Series
	live []uint64
	// growth is the stack's growth over the run: its live bytes at the
	// end (see the analysis doc, "Pinned host growth").
	growth uint64
}

// PinnedHostGrowth applies the leak rule to every stack of pinned host
// memory (see the analysis doc, "Pinned host growth"): one finding per
// process, naming the stacks whose live host bytes grow. Host figures
// only: nothing here is added to device memory.
func PinnedHostGrowth(v *View) []finding.Finding {
	n, ends, times := leakWindows(v)
	if ends == nil {
		return nil
	}
	w := len(ends)
	perProc := make(map[*Process][]growingStack)
	var procs []*Process
	for _, s := range v.Series {
		if s.Scope != ScopeHost || s.Live.Bytes == 0 {
			continue
		}
		vals := s.History.Buckets(n)
		live := make([]uint64, w)
		for k, e := range ends {
			live[k] = vals[e]
		}
		if isLeak(live) {
			if perProc[s.Process] == nil {
				procs = append(procs, s.Process)
			}
			perProc[s.Process] = append(perProc[s.Process], growingStack{s: s, live: live})
		}
	}
	slices.SortFunc(procs, func(x, y *Process) int { return cmp.Or(cmp.Compare(x.PID, y.PID), cmp.Compare(x.Start, y.Start)) })
	var out []finding.Finding
	for _, p := range procs {
		out = append(out, pinnedHostFinding(v, p, perProc[p], times))
	}
	return out
}

// pinnedHostFinding builds the finding of one process's growing pinned
// host stacks.
func pinnedHostFinding(v *View, p *Process, gs []growingStack, times []uint64) finding.Finding {
	w := len(times)
	sum := make([]uint64, w)
	for i := range gs {
		for k, x := range gs[i].live {
			sum[k] += x
		}
	}
	secs := float64(times[w-1]-times[0]) / 1e9
	lk := &finding.Leak{WindowEnds: slices.Clone(times), Live: sum, Seconds: secs,
		WindowStart: times[0], WindowEnd: times[w-1], WindowGrowthBytes: sum[w-1] - sum[0]}
	if secs > 0 {
		lk.BytesPerSecond = float64(lk.WindowGrowthBytes) / secs
	}
	pinnedLoopRate(v, lk, gs, p.Loop)
	// Each stack's growth is over the run, as a leak's: its live bytes at
	// the end minus at the start of tracing (0: no stack is known from
	// before), what it pinned during the run and kept.
	for i := range gs {
		gs[i].growth = gs[i].s.Live.Bytes
	}
	slices.SortFunc(gs, func(x, y growingStack) int {
		return cmp.Or(cmp.Compare(y.growth, x.growth), cmp.Compare(x.s.Stack, y.s.Stack))
	})
	var growth uint64
	for _, s := range gs {
		growth += s.growth
	}
	lk.GrowthBytes, lk.From, lk.To = growth, max(v.Start, p.Start), times[w-1]
	sev := finding.SeverityMedium
	if growth >= pinnedGrowthHigh {
		sev = finding.SeverityHigh
	}
	ev := &finding.PinnedEvidence{HostPeakBytes: p.HostPeakBytes, HostLiveBytesAtEnd: p.HostLiveBytesAtEnd}
	f := finding.Finding{Kind: finding.KindPinnedHostGrowth, Severity: sev, PID: p.PID, ProcessStart: p.Start,
		Bytes: growth, Time: times[0], Leak: lk, Pinned: ev}
	for i, s := range gs {
		if i < v.TopStacks {
			f.Stacks = append(f.Stacks, finding.FindingStack{Stack: s.s.Stack, Frames: v.Lines(s.s.Stack),
				Site: v.Site(s.s.Stack), Count: s.s.Live.Count, Bytes: s.growth})
		}
		ev.Growing = append(ev.Growing, finding.StackUsage{Stack: s.s.Stack,
			Usage: finding.Usage{Count: s.s.Live.Count, Bytes: s.growth}})
	}
	for _, s := range gs {
		if frame := framesWith(v, s.s.Stack, pinMemoryFrame); frame != "" {
			ev.PinMemoryStack, ev.PinMemoryFrame = s.s.Stack, frame
			break
		}
	}
	return f
}

// pinnedLoopRate fills the per-iteration figures of a pinned host growth
// from the process's loop, the growing stacks summed: the slope at the
// iteration boundaries when every stack's change log is complete, else
// the windows' growth over the iterations that started within them, as a
// leak's.
func pinnedLoopRate(v *View, lk *finding.Leak, gs []growingStack, lp *Loop) {
	if lp == nil {
		return
	}
	complete := true
	for _, s := range gs {
		if s.s.History.Log() == nil {
			complete = false
		}
	}
	var per float64
	if complete {
		ys := make([]float64, len(lp.Seq)+1)
		end := min(lp.Starts[len(lp.Starts)-1]+lp.PeriodNs, v.LastEvent)
		for i := range gs {
			log := gs[i].s.History.Log()
			for j, s := range lp.Seq {
				ys[j] += float64(log.Before(s))
			}
			ys[len(lp.Seq)] += float64(log.At(end))
		}
		per = slope(ys)
	} else {
		w := len(lk.Live)
		lo, hi := lk.WindowEnds[0], lk.WindowEnds[w-1]
		n := 0
		for _, t := range lp.Starts {
			if t > lo && t <= hi {
				n++
			}
		}
		if n > 0 {
			per = float64(lk.Live[w-1]-lk.Live[0]) / float64(n)
		}
	}
	if per > 0 {
		lk.Iterations = lp.Count
		lk.PeriodNs = lp.PeriodNs
		lk.BytesPerIteration = per
		lk.BytesPerMinute = per * 60e9 / float64(lp.PeriodNs)
	}
}

// slope is the least-squares slope of ys against 0, 1, 2...
func slope(ys []float64) float64 {
	n := float64(len(ys))
	if n < 2 {
		return 0
	}
	mx := (n - 1) / 2
	var my float64
	for _, y := range ys {
		my += y
	}
	my /= n
	var sxy, sxx float64
	for i, y := range ys {
		dx := float64(i) - mx
		sxy += dx * (y - my)
		sxx += dx * dx
	}
	return sxy / sxx
}

// framesWith returns the first rendered frame of stack id containing s,
// "" when none does.
func framesWith(v *View, id event.StackID, s string) string {
	for _, l := range v.Lines(id) {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}
