package analysis

import (
	"cmp"
	"fmt"
	"math"
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
	// growth is the stack's growth: over the loop when one was detected
	// (live at the end minus live just before the first iteration), else
	// from the end of the first window to the end.
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
	lk := &Leak{WindowEnds: slices.Clone(times), Live: sum, Seconds: secs}
	if secs > 0 {
		lk.BytesPerSecond = float64(sum[w-1]-sum[0]) / secs
	}
	overLoop := a.pinnedLoopRate(lk, gs, lp)
	if overLoop {
		// A stack that grew before the loop only is not part of the
		// loop's growth; none left means the growth preceded the loop.
		kept := gs[:0]
		for _, s := range gs {
			if s.growth > 0 {
				kept = append(kept, s)
			}
		}
		if len(kept) > 0 {
			gs = kept
			clear(sum)
			for i := range gs {
				for k, v := range gs[i].live {
					sum[k] += v
				}
			}
			if secs > 0 {
				lk.BytesPerSecond = float64(sum[w-1]-sum[0]) / secs
			}
		} else {
			overLoop = false
		}
	}
	if !overLoop {
		for i := range gs {
			gs[i].growth = gs[i].live[w-1] - gs[i].live[0]
		}
	}
	slices.SortFunc(gs, func(x, y growingStack) int {
		return cmp.Or(cmp.Compare(y.growth, x.growth), cmp.Compare(x.g.key.stack, y.g.key.stack))
	})
	var growth uint64
	var liveCount, liveBytes uint64
	for _, s := range gs {
		growth += s.growth
		liveCount += s.g.live.Count
		liveBytes += s.g.live.Bytes
	}
	in := a.inst(id)
	host := r.Processes[a.procIndex[id]].Host
	sev := SeverityMedium
	if growth >= pinnedGrowthHigh {
		sev = SeverityHigh
	}
	f := Finding{Kind: KindPinnedHostGrowth, Severity: sev, PID: in.pid, ProcessStart: in.start, Bytes: growth,
		Time: times[0], Leak: lk}
	var sites []string
	for i, s := range gs {
		if i < a.opts.TopStacks {
			f.Stacks = append(f.Stacks, FindingStack{Stack: s.g.key.stack, Frames: r.Lines(s.g.key.stack),
				Site: r.Site(s.g.key.stack), Count: s.g.live.Count, Bytes: s.growth})
		}
		sites = append(sites, fmt.Sprintf("%s (+%d bytes, %d allocations live at the end)", r.Site(s.g.key.stack), s.growth, s.g.live.Count))
	}
	span := fmt.Sprintf("from %s to %s", seconds(r, times[0]), seconds(r, times[w-1]))
	perMinute := lk.BytesPerSecond * 60
	if overLoop {
		span = fmt.Sprintf("over its %d iterations (from %s, just before the first, to %s)", lp.count, seconds(r, lp.starts[0]), seconds(r, times[w-1]))
		f.Time = lp.starts[0]
	}
	if lk.Iterations > 0 {
		perMinute = lk.BytesPerMinute
	}
	f.Summary = fmt.Sprintf("pinned host memory of process %d grew by %d bytes (%s) %s without falling, allocated at %s; %.0f bytes (%s) per minute%s; pinned host peak %d bytes, %d live at the end (host RAM, not device memory)",
		in.pid, growth, FormatBytes(growth), span, strings.Join(sites, ", "), perMinute,
		FormatBytes(uint64(math.Round(max(perMinute, 0)))), lk.describePinned(), host.PeakBytes, host.LiveBytesAtEnd)

	top := r.Site(gs[0].g.key.stack)
	f.Remediation = append(f.Remediation, fmt.Sprintf(
		"free the pinned buffers allocated at %s with cudaFreeHost (or drop the tensors holding them) once their copy is done: %d allocations (%d bytes) from the growing sites were still live at the end",
		top, liveCount, liveBytes))
	if liveCount >= 2 {
		rate := fmt.Sprintf("%.0f bytes/s", lk.BytesPerSecond)
		if lk.Iterations > 0 {
			rate = fmt.Sprintf("%.0f bytes per iteration", lk.BytesPerIteration)
		}
		f.Remediation = append(f.Remediation, fmt.Sprintf(
			"pin once, reuse: the run pinned new buffers %d times without freeing them (%s); allocate a fixed set of pinned staging buffers (a pinned-memory pool) up front and copy each batch through them",
			liveCount, rate))
	}
	for _, s := range gs {
		if frame := framesWith(r, s.g.key.stack, pinMemoryFrame); frame != "" {
			f.Remediation = append(f.Remediation, fmt.Sprintf(
				"the growing stack at %s runs through %s: with a DataLoader(pin_memory=True), use persistent_workers=True and a bounded prefetch_factor so the pinned batches in flight stay bounded, and keep no reference to a pinned batch after its step",
				r.Site(s.g.key.stack), frame))
			break
		}
	}
	return f
}

// pinnedLoopRate fills the per-iteration figures of a pinned host growth
// from the process's loop, the growing stacks summed, and sets each
// stack's growth over the loop. It reports whether the growth is over the
// loop (every stack's change log complete); otherwise the per-iteration
// rate, if any, comes from the windows as a leak's does.
func (a *Analyzer) pinnedLoopRate(lk *Leak, gs []growingStack, lp *loop) bool {
	if lp == nil {
		return false
	}
	complete := true
	for _, s := range gs {
		if log := a.liveLogs[s.g.key]; log == nil || log.full {
			complete = false
		}
	}
	var per float64
	if complete {
		ys := make([]float64, len(lp.seq)+1)
		end := min(lp.starts[len(lp.starts)-1]+lp.period, a.lastEvent)
		for i := range gs {
			log := a.liveLogs[gs[i].g.key]
			for j, s := range lp.seq {
				ys[j] += float64(log.before(s))
			}
			ys[len(lp.seq)] += float64(log.at(end))
			if first := log.before(lp.seq[0]); gs[i].g.live.Bytes > first {
				gs[i].growth = gs[i].g.live.Bytes - first
			}
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
	return complete
}

// describePinned renders the per-iteration figures, "" without a loop.
func (l *Leak) describePinned() string {
	if l.Iterations == 0 {
		return ""
	}
	return fmt.Sprintf("; %.0f bytes (%s) per iteration over %d iterations of %.3f s",
		l.BytesPerIteration, FormatBytes(uint64(math.Round(l.BytesPerIteration))), l.Iterations, float64(l.PeriodNs)/1e9)
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
