package checkpoint

import (
	"cmp"
	"slices"

	"github.com/vramprof/vramprof/probes/event"
)

// peakSet is one scope's live allocations by class and what was live at
// its peak, kept as the analysis keeps a process's (classState.peak): at a
// new peak only the classes changed since the last one are copied, so the
// cost is O(events) however often the peak moves. A class neither live nor
// at the peak (idle) is forgotten once idle ones are as many as the others
// and minIdle: memory follows what is live and the peak, and a class
// allocated and freed over and over stays put in between.
type peakSet struct {
	classes map[event.PeakClass]*peakCount
	// dirty are the classes changed since the last peak, each once.
	dirty []*peakCount
	// idle counts the classes neither live nor at the peak, at most.
	idle int
	// at is the allocation that reached the peak.
	at event.Event
}

// minIdle is how many idle classes a peakSet may keep whatever its size:
// a sweep costs the whole set, so it waits for as many idle ones.
const minIdle = 1024

// peakCount is one class's count live now and at the peak.
type peakCount struct {
	live, peak uint64
	dirty      bool
}

// classOf is the class of allocation e.
func classOf(e *event.Event) event.PeakClass {
	return event.PeakClass{PID: e.PID, Stack: e.Stack, Device: e.Device, Kind: e.Kind, API: e.API, Size: e.Size}
}

// add adds allocation e to the live set and returns its class there; at
// a new peak (peak set), what is live becomes the set at the peak.
func (ps *peakSet) add(e *event.Event, peak bool) *peakCount {
	k := classOf(e)
	c := ps.classes[k]
	if c == nil {
		c = &peakCount{}
		ps.classes[k] = c
	}
	c.live++
	ps.touch(c)
	if peak {
		ps.snapshot(e)
	}
	return c
}

// drop takes an allocation of class c out of the live set (a nil c: one
// the set never counted).
func (ps *peakSet) drop(c *peakCount) {
	if c == nil || c.live == 0 {
		return
	}
	c.live--
	if c.live == 0 && c.peak == 0 {
		ps.idle++
	}
	ps.touch(c)
	if ps.idle >= minIdle && ps.idle >= len(ps.classes)/2 {
		ps.sweep()
	}
}

// touch marks c changed since the peak.
func (ps *peakSet) touch(c *peakCount) {
	if !c.dirty {
		c.dirty = true
		ps.dirty = append(ps.dirty, c)
	}
}

// sweep forgets the idle classes.
func (ps *peakSet) sweep() {
	for k, c := range ps.classes {
		if c.live == 0 && c.peak == 0 {
			delete(ps.classes, k)
		}
	}
	ps.dirty = slices.DeleteFunc(ps.dirty, func(c *peakCount) bool {
		if c.live == 0 && c.peak == 0 {
			c.dirty = false
			return true
		}
		return false
	})
	ps.idle = 0
}

// snapshot makes what is live the set at the peak, which e reached.
func (ps *peakSet) snapshot(e *event.Event) {
	for _, c := range ps.dirty {
		if c.live == 0 && c.peak > 0 {
			ps.idle++
		}
		c.peak, c.dirty = c.live, false
	}
	clear(ps.dirty) // no pointers held past the length
	ps.dirty = ps.dirty[:0]
	ps.at = *e
	ps.at.Flags = 0
}

// clearPID takes every allocation of pid out of the live set, as gone
// with its process image.
func (ps *peakSet) clearPID(pid uint32) {
	for k, c := range ps.classes {
		if k.PID != pid || c.live == 0 {
			continue
		}
		c.live = 0
		if c.peak == 0 {
			ps.idle++
		}
		ps.touch(c)
	}
}

// checkpoint returns the set at the peak of the scope whose figures are x.
func (ps *peakSet) checkpoint(x *event.CheckpointTotals) event.CheckpointPeak {
	p := event.CheckpointPeak{PID: x.PID, All: x.All, Layer: x.Layer, Host: x.Host, PerDevice: x.PerDevice, Device: x.Device}
	if !x.All {
		p.At = event.Event{Time: x.PeakTime, Addr: ps.at.Addr, Size: ps.at.Size, Device: ps.at.Device, API: ps.at.API,
			Layer: ps.at.Layer, Stack: ps.at.Stack}
	}
	for k, c := range ps.classes {
		if c.peak > 0 {
			l := k
			l.Count = c.peak
			p.Live = append(p.Live, l)
		}
	}
	slices.SortFunc(p.Live, func(a, b event.PeakClass) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Stack, b.Stack), cmp.Compare(a.Device, b.Device),
			cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.API, b.API), cmp.Compare(a.Size, b.Size))
	})
	return p
}
