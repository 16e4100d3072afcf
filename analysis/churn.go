package analysis

import (
	"github.com/vramprof/vramprof/analysis/ledger"
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

// churnModel is the segment traffic per process instance, an observer:
// it matches releases with same-size reallocations. Each size keeps a
// queue of releases; an allocation takes the oldest release still within
// the window (older ones expire), so the cost is O(1) amortized per event.
type churnModel struct {
	window uint64
	procs  map[uint32]*churnState
	// last caches the latest process's state (the hot path).
	last    *churnState
	lastPID uint32
	// releases are the segment frees waiting for a same-size
	// reallocation.
	releases map[churnKey]*releaseQueue
}

// releaseQueue is a FIFO of releases: pops advance head, and the popped
// prefix is dropped when it is most of the slice, so that a steady
// release-and-reallocate loop reuses one array.
type releaseQueue struct {
	q    []released
	head int
}

func (rq *releaseQueue) len() int { return len(rq.q) - rq.head }

func (rq *releaseQueue) pop() released {
	r := rq.q[rq.head]
	rq.head++
	if rq.head == len(rq.q) {
		rq.q, rq.head = rq.q[:0], 0
	}
	return r
}

func (rq *releaseQueue) push(r released) {
	if rq.head > 0 && rq.head >= len(rq.q)/2 && len(rq.q) == cap(rq.q) {
		n := copy(rq.q, rq.q[rq.head:])
		rq.q, rq.head = rq.q[:n], 0
	}
	rq.q = append(rq.q, r)
}

func newChurnModel(window uint64) *churnModel {
	return &churnModel{window: window, procs: make(map[uint32]*churnState),
		releases: make(map[churnKey]*releaseQueue)}
}

func (m *churnModel) of(pid uint32) *churnState {
	if m.last != nil && m.lastPID == pid {
		return m.last
	}
	cs := m.procs[pid]
	if cs == nil {
		cs = &churnState{freeStacks: make(map[event.StackID]*Usage), allocStack: make(map[event.StackID]*Usage)}
		m.procs[pid] = cs
	}
	m.last, m.lastPID = cs, pid
	return cs
}

func (m *churnModel) queue(k churnKey) *releaseQueue {
	q := m.releases[k]
	if q == nil {
		q = &releaseQueue{}
		m.releases[k] = q
	}
	return q
}

// observe counts a segment-layer allocation or free: every call, and the
// cycles of what the ledger freed and allocated again.
func (m *churnModel) observe(e *event.Event, layer event.Layer, ch ledger.Change) {
	if layer != event.LayerSegment {
		return
	}
	cs := m.of(e.PID)
	switch e.Kind {
	case event.KindAlloc:
		cs.c.Allocs++
		cs.c.AllocNs += e.Duration
		if ch.Verdict != ledger.Added && ch.Verdict != ledger.Replaced {
			return
		}
		q := m.releases[churnKey{e.PID, e.Device, e.Size}]
		if q == nil {
			return
		}
		for q.len() > 0 && e.Time-q.q[q.head].time > m.window {
			q.pop()
		}
		if q.len() > 0 {
			r := q.pop()
			cs.c.Cycles++
			cs.c.CycleBytes += e.Size
			cs.c.CycleNs += r.duration + e.Duration
			cs.c.CycleGapNs += e.Time - r.time
			addUsage(cs.freeStacks, r.stack, e.Size)
			addUsage(cs.allocStack, e.Stack, e.Size)
		}
	case event.KindFree:
		cs.c.Frees++
		cs.c.FreeNs += e.Duration
		if ch.Verdict != ledger.Freed {
			return
		}
		m.queue(churnKey{e.PID, ch.Old.Device, ch.Old.Size}).push(released{time: e.Time, duration: e.Duration, stack: e.Stack})
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
func (m *churnModel) finish(id uint32, duration uint64) *Churn {
	cs := m.procs[id]
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
