package analysis

import (
	"github.com/vramprof/vramprof/probes/event"
)

// DefaultChurnWindow is how soon a segment of the same size must come back
// after a release for the pair to count as a release-and-reallocate cycle:
// empty_cache() called every step releases segments that the next step
// (milliseconds to a few seconds later in training loops) asks for again.
// Longer gaps are phases (evaluation, a new epoch's shapes), not churn.
const DefaultChurnWindow = 2_000_000_000 // 2 s, in ns

// churnKey is one segment size on one device of one process.
type churnKey struct {
	pid    uint32
	device int32
	size   uint64
}

// released is a segment free waiting for a same-size allocation.
type released struct {
	time, duration uint64
	stack          event.StackID
}

// churnState is one process's segment traffic.
type churnState struct {
	c          Churn
	freeStacks map[event.StackID]*Usage
	allocStack map[event.StackID]*Usage
}

func (a *Analyzer) churnOf(pid uint32) *churnState {
	cs := a.churn[pid]
	if cs == nil {
		cs = &churnState{freeStacks: make(map[event.StackID]*Usage), allocStack: make(map[event.StackID]*Usage)}
		a.churn[pid] = cs
	}
	return cs
}

// churnEvent counts a non-nested device-memory allocation or free at the
// segment layer and matches releases with same-size reallocations. Each
// size keeps a queue of releases; an allocation takes the oldest release
// still within the window (older ones expire), so the cost is O(1)
// amortized per event.
func (a *Analyzer) churnEvent(e *event.Event) {
	cs := a.churnOf(e.PID)
	switch e.Kind {
	case event.KindAlloc:
		cs.c.Allocs++
		cs.c.AllocNs += e.Duration
		if e.Ret != 0 || e.Size == 0 || e.Addr == 0 {
			return
		}
		k := churnKey{e.PID, e.Device, e.Size}
		q := a.releases[k]
		for len(q) > 0 && e.Time-q[0].time > a.opts.ChurnWindow {
			q = q[1:]
		}
		if len(q) > 0 {
			r := q[0]
			q = q[1:]
			cs.c.Cycles++
			cs.c.CycleBytes += e.Size
			cs.c.CycleNs += r.duration + e.Duration
			cs.c.CycleGapNs += e.Time - r.time
			addUsage(cs.freeStacks, r.stack, e.Size)
			addUsage(cs.allocStack, e.Stack, e.Size)
		}
		if len(q) == 0 {
			delete(a.releases, k)
		} else {
			a.releases[k] = q
		}
	case event.KindFree:
		cs.c.Frees++
		cs.c.FreeNs += e.Duration
		if e.Ret != 0 || e.Addr == 0 {
			return
		}
		la, ok := a.ledger.Get(liveKey(e.PID, event.LayerSegment, SpaceDevice), e.Addr)
		if !ok {
			return
		}
		ck := a.classes[la.Tag].key
		k := churnKey{e.PID, ck.device, ck.size}
		a.releases[k] = append(a.releases[k], released{time: e.Time, duration: e.Duration, stack: e.Stack})
	}
}

func addUsage(m map[event.StackID]*Usage, id event.StackID, size uint64) {
	u := m[id]
	if u == nil {
		u = &Usage{}
		m[id] = u
	}
	u.add(size)
}

// finishChurn returns a process's churn figures; nil without calls.
func (a *Analyzer) finishChurn(id uint32, duration uint64) *Churn {
	cs := a.churn[id]
	if cs == nil || cs.c.Allocs+cs.c.Frees == 0 {
		return nil
	}
	c := cs.c
	c.ObservedNs = duration
	if duration > 0 {
		secs := float64(duration) / 1e9
		c.CallsPerSecond = float64(c.Allocs+c.Frees) / secs
		c.CostMsPerSecond = float64(c.CycleNs) / 1e6 / secs
	}
	c.FreeStacks = topStacks(cs.freeStacks, 0)
	c.AllocStacks = topStacks(cs.allocStack, 0)
	return &c
}
