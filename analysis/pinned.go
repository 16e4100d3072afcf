package analysis

import (
	"cmp"
	"slices"
	"strings"

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
	g    *groupState
	live []uint64
	// growth is the stack's growth over the run: its live bytes at the
	// end (see doc.go, "Pinned host growth").
	growth uint64
}

// pinnedHostFindings applies the leak rule to every stack of pinned host
// memory (see doc.go, "Pinned host growth"): one finding per process,
// naming the stacks whose live host bytes grow. Host figures only: nothing
// here is added to device memory.
func (a *Analyzer) pinnedHostFindings(r *Result) []Finding {
	n, ends, times := a.leakWindows()
	if ends == nil {
		return nil
	}
	w := len(ends)
	perPID := make(map[uint32][]growingStack)
	for _, g := range a.groups {
		if g.key.sc != hostScope || g.live.Bytes == 0 {
			continue
		}
		vals := g.hist.finish(a.leak, n)
		live := make([]uint64, w)
		for k, e := range ends {
			live[k] = vals[e]
		}
		if isLeak(live) {
			perPID[g.key.pid] = append(perPID[g.key.pid], growingStack{g: g, live: live})
		}
	}
	ids := make([]uint32, 0, len(perPID))
	for id := range perPID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []Finding
	for _, id := range ids {
		out = append(out, a.pinnedHostFinding(r, id, perPID[id], times))
	}
	return out
}

// pinnedHostFinding builds the finding of one process's growing pinned
// host stacks.
func (a *Analyzer) pinnedHostFinding(r *Result, id uint32, gs []growingStack, times []uint64) Finding {
	w := len(times)
	lp := a.loops[id]
	sum := make([]uint64, w)
	for i := range gs {
		for k, v := range gs[i].live {
			sum[k] += v
		}
	}
	secs := float64(times[w-1]-times[0]) / 1e9
	lk := &Leak{WindowEnds: slices.Clone(times), Live: sum, Seconds: secs,
		WindowStart: times[0], WindowEnd: times[w-1], WindowGrowthBytes: sum[w-1] - sum[0]}
	if secs > 0 {
		lk.BytesPerSecond = float64(lk.WindowGrowthBytes) / secs
	}
	a.pinnedLoopRate(lk, gs, lp)
	// Each stack's growth is over the run, as a leak's: its live bytes at
	// the end minus at the start of tracing (0: no stack is known from
	// before), what it pinned during the run and kept.
	for i := range gs {
		gs[i].growth = gs[i].g.live.Bytes
	}
	slices.SortFunc(gs, func(x, y growingStack) int {
		return cmp.Or(cmp.Compare(y.growth, x.growth), cmp.Compare(x.g.key.stack, y.g.key.stack))
	})
	var growth uint64
	for _, s := range gs {
		growth += s.growth
	}
	in := a.inst(id)
	lk.GrowthBytes, lk.From, lk.To = growth, max(r.Run.Start, in.start), times[w-1]
	host := r.Processes[a.procIndex[id]].Host
	sev := SeverityMedium
	if growth >= pinnedGrowthHigh {
		sev = SeverityHigh
	}
	ev := &PinnedEvidence{HostPeakBytes: host.PeakBytes, HostLiveBytesAtEnd: host.LiveBytesAtEnd}
	f := Finding{Kind: KindPinnedHostGrowth, Severity: sev, PID: in.pid, ProcessStart: in.start, Bytes: growth,
		Time: times[0], Leak: lk, Pinned: ev}
	for i, s := range gs {
		if i < a.opts.TopStacks {
			f.Stacks = append(f.Stacks, FindingStack{Stack: s.g.key.stack, Frames: r.Lines(s.g.key.stack),
				Site: r.Site(s.g.key.stack), Count: s.g.live.Count, Bytes: s.growth})
		}
		ev.Growing = append(ev.Growing, StackUsage{Stack: s.g.key.stack, Usage: Usage{Count: s.g.live.Count, Bytes: s.growth}})
	}
	for _, s := range gs {
		if frame := framesWith(r, s.g.key.stack, pinMemoryFrame); frame != "" {
			ev.PinMemoryStack, ev.PinMemoryFrame = s.g.key.stack, frame
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
func (a *Analyzer) pinnedLoopRate(lk *Leak, gs []growingStack, lp *loop) {
	if lp == nil {
		return
	}
	complete := true
	for _, s := range gs {
		if a.iters.log(s.g) == nil {
			complete = false
		}
	}
	var per float64
	if complete {
		ys := make([]float64, len(lp.seq)+1)
		end := min(lp.starts[len(lp.starts)-1]+lp.period, a.lastEvent)
		for i := range gs {
			log := a.iters.log(gs[i].g)
			for j, s := range lp.seq {
				ys[j] += float64(log.before(s))
			}
			ys[len(lp.seq)] += float64(log.at(end))
		}
		per = slope(ys)
	} else {
		w := len(lk.Live)
		lo, hi := lk.WindowEnds[0], lk.WindowEnds[w-1]
		n := 0
		for _, t := range lp.starts {
			if t > lo && t <= hi {
				n++
			}
		}
		if n > 0 {
			per = float64(lk.Live[w-1]-lk.Live[0]) / float64(n)
		}
	}
	if per > 0 {
		lk.Iterations = lp.count
		lk.PeriodNs = lp.period
		lk.BytesPerIteration = per
		lk.BytesPerMinute = per * 60e9 / float64(lp.period)
	}
}

// framesWith returns the first rendered frame of stack id containing s,
// "" when none does.
func framesWith(r *Result, id event.StackID, s string) string {
	for _, l := range r.Lines(id) {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}
