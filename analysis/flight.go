package analysis

import (
	"slices"

	"github.com/vramprof/vramprof/probes/event"
)

// checkpoint restores what a flight recorder's checkpoint summarises (see
// event.Checkpoint): it comes before any event of its stream, and the live
// allocations follow it as FlagRestored events, which the model takes as
// any allocation. The summarised counts and bytes are added to the totals
// here (they leave out the restored allocations, counted as they arrive),
// and the summarised stretch's peak becomes each scope's peak so far, with
// what was live at it (restorePeak). A
// second checkpoint in one stream (a reader that did not skip it) is
// ignored: its stretch is already in the model.
func (a *Analyzer) checkpoint(c *event.Checkpoint) {
	if a.run.Flight != nil || a.run.Events > 0 {
		return
	}
	a.run.Flight = &Flight{Segment: c.Segment, SummarisedEvents: c.Events, FirstTime: c.FirstTime, CutTime: c.Time,
		PeakStacks: len(c.Peaks) > 0 || !slices.ContainsFunc(c.Totals, func(t event.CheckpointTotals) bool { return t.PeakBytes > 0 })}
	if c.FirstTime != 0 {
		a.see(c.FirstTime)
	}
	for i := range c.Totals {
		t := &c.Totals[i]
		if t.Book != event.BookNone {
			a.restoreBook(t)
			continue
		}
		if t.PerDevice {
			a.restoreDevice(t)
			continue
		}
		layer := t.Layer
		if layer == event.LayerUnknown {
			layer = event.LayerSegment
		}
		mem := SpaceDevice
		if t.Host {
			mem = SpaceHost
		}
		sc := scopeOf(layer, mem)
		add := func(x *Totals) {
			x.Allocations += t.Allocations
			x.Frees += t.Frees
			x.AllocatedBytes += t.AllocatedBytes
			x.FreedBytes += t.FreedBytes
			x.FailedAllocations += t.Failed
			x.FailedBytes += t.FailedBytes
			x.UnknownFrees += t.UnknownFrees
			x.FailedFrees += t.FailedFrees
		}
		if t.All {
			ls := a.layer(sc)
			add(&ls.totals)
			if t.PeakBytes > ls.totals.PeakBytes {
				ls.totals.PeakBytes, ls.totals.PeakTime = t.PeakBytes, t.PeakTime
			}
			continue
		}
		a.pids[t.PID] = true
		a.ledger.Implied(t.PID, t.PeakTime)
		sp := a.account(t.PID, sc)
		add(&sp.totals)
		if t.PeakBytes > sp.peak {
			sp.peak, sp.peakTime = t.PeakBytes, t.PeakTime
		}
	}
	for i := range c.Peaks {
		a.restorePeak(&c.Peaks[i])
	}
	a.restoreTimelines(c)
}

// restoreTimelines makes a checkpoint's timelines the processes' timelines
// so far; the restored allocations that follow are in them already
// (inTimelines). The grid takes the checkpoint's level, then grows as far
// as the cut needs with TimelinePoints: a grid of fewer buckets than the
// checkpoint's ends as the whole stream's does, one of more is coarser.
func (a *Analyzer) restoreTimelines(c *event.Checkpoint) {
	g := a.timelines.grid
	if len(c.Timelines) == 0 || g == nil {
		return
	}
	a.run.Flight.Timelines = true
	for uint64(g.level) < c.TimelineLevel {
		g.double()
	}
	g.index(c.Time)
	for i := range c.Timelines {
		tl := &c.Timelines[i]
		layer := tl.Layer
		if layer == event.LayerUnknown {
			layer = event.LayerSegment
		}
		mem := SpaceDevice
		if tl.Host {
			mem = SpaceHost
		}
		a.pids[tl.PID] = true
		s := series{level: uint(c.TimelineLevel)}
		for _, b := range tl.Buckets {
			for uint64(len(s.buckets)) <= b.Index {
				s.buckets = append(s.buckets, minMax{})
			}
			s.buckets[b.Index] = minMax{minT: b.MinTime, maxT: b.MaxTime, minV: b.MinBytes, maxV: b.MaxBytes, ok: true}
		}
		s.sync(g)
		*a.timelines.series(a.account(tl.PID, scopeOf(layer, mem)).ix, tl.Device) = s
	}
}

// inTimelines reports whether e is an allocation restored from a
// checkpoint that carried the timelines: it is in them already, at its
// time, and the level it made there is not the one it makes now.
func (a *Analyzer) inTimelines(e *event.Event) bool {
	return e.Flags&event.FlagRestored != 0 && a.run.Flight != nil && a.run.Flight.Timelines
}

// restorePeak makes a checkpoint's live set at a peak the classes' set at
// that peak: a process's in one scope (with the allocation that reached
// it), or a device's over every process. Each class is marked changed
// since the peak, so that a peak reached later replaces the set whole, as
// in the stream the checkpoint cut (its classes changed after the peak
// there, before the cut).
func (a *Analyzer) restorePeak(p *event.CheckpointPeak) {
	layer := p.Layer
	if layer == event.LayerUnknown {
		layer = event.LayerSegment
	}
	class := func(l *event.PeakClass) (int32, *classState, Usage) {
		mem := SpaceDevice
		switch l.Kind {
		case event.KindHostAlloc:
			mem = SpaceHost
		case event.KindCreate:
			mem = SpacePhysical
		}
		ci := a.class(classKey{l.Size, l.PID, l.Stack, l.Device, l.API, layer, mem})
		return ci, a.classes[ci], Usage{Count: l.Count, Bytes: l.Count * l.Size}
	}
	switch {
	case p.PerDevice && p.All:
		ds := a.device(p.Device, deviceScope)
		for i := range p.Live {
			ci, c, u := class(&p.Live[i])
			c.devPeak = u
			ds.devTouch(ci, c)
		}
	case !p.PerDevice && !p.All:
		mem := SpaceDevice
		if p.Host {
			mem = SpaceHost
		}
		sp := a.account(p.PID, scopeOf(layer, mem))
		for i := range p.Live {
			ci, c, u := class(&p.Live[i])
			c.peak = u
			a.touch(sp, ci, c)
		}
		if sp.peak > 0 && sp.peakTime == p.At.Time {
			at := &p.At
			atLayer := at.Layer
			if atLayer == event.LayerUnknown {
				atLayer = event.LayerSegment
			}
			sp.peakEvent = Allocation{Time: at.Time, Addr: at.Addr, Size: at.Size, Device: at.Device,
				API: at.API, Layer: atLayer, Stack: at.Stack}
		}
	}
}

// restoreBook adds a checkpoint's summarised figures to an API book.
func (a *Analyzer) restoreBook(t *event.CheckpointTotals) {
	b := a.books.state(bookKey{pid: t.PID, all: t.All, driver: t.Book == event.BookDriver})
	b.book.Allocations += t.Allocations
	b.book.Frees += t.Frees
	b.book.AllocatedBytes += t.AllocatedBytes
	b.book.FailedAllocations += t.Failed
	b.book.FailedFrees += t.FailedFrees
	b.book.UnknownFrees += t.UnknownFrees
	if t.PeakBytes > b.level.peak {
		b.level.peak, b.level.peakTime = t.PeakBytes, t.PeakTime
	}
}

// restoreDevice makes a checkpoint's peak of one device (in one process or
// all) the peak so far.
func (a *Analyzer) restoreDevice(t *event.CheckpointTotals) {
	if t.All {
		ds := a.device(t.Device, deviceScope)
		if t.PeakBytes > ds.peak {
			ds.peak, ds.peakTime = t.PeakBytes, t.PeakTime
		}
		a.seenDevices[t.Device] = true
		return
	}
	pd := a.account(t.PID, deviceScope).device(t.Device)
	if t.PeakBytes > pd.peak {
		pd.peak, pd.peakTime = t.PeakBytes, t.PeakTime
	}
}
