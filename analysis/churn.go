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

// released is a segment free waiting for a same-size allocation.
type released struct {
	time, duration uint64
	stack          event.StackID
}

// churnState is one process's segment traffic: its figures, the bytes
// of its cycles by the stack that freed and that allocated again (keyed
// by stack ID plus one: a table key is never 0), and per device the
// releases waiting for a same-size allocation, by size.
type churnState struct {
	c Churn
	// tensorFree is the latest tensor free (block layer) while no other
	// call of its thread followed it: a segment free of the same pointer
	// and size right after it is the allocator passing the free through.
	tensorFree passThrough
	freeStacks ledger.Table[Usage]
	allocStack ledger.Table[Usage]
	releases   map[int32]*ledger.Table[*releaseQueue]
	// lastCycle is the latest cycle's allocation time: a cycle whose
	// release came after it starts another round (Churn.Releases).
	lastCycle uint64
	// last caches releases[lastDev] (the hot path).
	last    *ledger.Table[*releaseQueue]
	lastDev int32
}

// queues returns the device's release queues by size, creating them.
func (cs *churnState) queues(device int32) *ledger.Table[*releaseQueue] {
	if cs.last != nil && cs.lastDev == device {
		return cs.last
	}
	t := cs.releases[device]
	if t == nil {
		t = &ledger.Table[*releaseQueue]{}
		cs.releases[device] = t
	}
	cs.last, cs.lastDev = t, device
	return t
}

// passThrough is a tensor free waiting to be seen passed to cudaFree.
type passThrough struct {
	tid        uint32
	addr, size uint64
	ok         bool
}

// cachingOffShare: when at least this many tenths of the tensor frees
// were passed straight to cudaFree, the allocator is not caching
// (PYTORCH_NO_CUDA_MEMORY_CACHING=1 or an allocator without a cache), and
// its segment cycles are every tensor's, not a cache release's. With
// caching on, a tensor free reaches cudaFree only when it happened to be
// the last one before an empty_cache() releasing its segment: a few per
// release at most, among every other tensor freed into the cache.
const cachingOffShare = 9

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
	return &churnModel{window: window, procs: make(map[uint32]*churnState)}
}

func (m *churnModel) of(pid uint32) *churnState {
	if m.last != nil && m.lastPID == pid {
		return m.last
	}
	cs := m.procs[pid]
	if cs == nil {
		cs = &churnState{releases: make(map[int32]*ledger.Table[*releaseQueue])}
		m.procs[pid] = cs
	}
	m.last, m.lastPID = cs, pid
	return cs
}

// observe counts a segment-layer allocation or free: every call, and the
// cycles of what the ledger freed and allocated again.
func (m *churnModel) observe(e *event.Event, layer event.Layer, ch *ledger.Change) {
	switch layer {
	case event.LayerSegment:
		m.segment(e, ch)
	case event.LayerBlock:
		m.block(e, ch)
	}
}

// block notes a tensor free, to tell whether the allocator passes it to
// cudaFree (see cachingOffShare).
func (m *churnModel) block(e *event.Event, ch *ledger.Change) {
	cs := m.of(e.PID)
	if e.Kind != event.KindFree || ch.Verdict != ledger.Freed {
		if cs.tensorFree.tid == e.TID {
			cs.tensorFree.ok = false
		}
		return
	}
	cs.c.TensorFrees++
	cs.tensorFree = passThrough{tid: e.TID, addr: e.Addr, size: ch.Old.Size, ok: true}
}

// segment is observe for a segment-layer call; apart so that the test
// every call takes inlines.
func (m *churnModel) segment(e *event.Event, ch *ledger.Change) {
	cs := m.of(e.PID)
	tf := cs.tensorFree
	if tf.tid == e.TID {
		cs.tensorFree.ok = false
	}
	switch e.Kind {
	case event.KindAlloc:
		cs.c.Allocs++
		cs.c.AllocNs += e.Duration
		if ch.Verdict != ledger.Added && ch.Verdict != ledger.Replaced {
			return
		}
		q, _ := cs.queues(e.Device).Get(e.Size)
		if q == nil {
			return
		}
		for q.len() > 0 && e.Time-q.q[q.head].time > m.window {
			q.pop()
		}
		if q.len() > 0 {
			r := q.pop()
			if cs.c.Cycles == 0 || r.time > cs.lastCycle {
				cs.c.Releases++
			}
			cs.lastCycle = e.Time
			cs.c.Cycles++
			cs.c.CycleBytes += e.Size
			cs.c.CycleNs += r.duration + e.Duration
			cs.c.CycleGapNs += e.Time - r.time
			cs.freeStacks.Ref(uint64(r.stack) + 1).Add(e.Size)
			cs.allocStack.Ref(uint64(e.Stack) + 1).Add(e.Size)
		}
	case event.KindFree:
		cs.c.Frees++
		cs.c.FreeNs += e.Duration
		if ch.Verdict != ledger.Freed {
			return
		}
		if tf.ok && tf.tid == e.TID && tf.addr == e.Addr && tf.size == ch.Old.Size {
			cs.c.PassedFrees++
		}
		qs := cs.queues(ch.Old.Device)
		q, _ := qs.Get(ch.Old.Size)
		if q == nil {
			q = &releaseQueue{}
			qs.Put(ch.Old.Size, q)
		}
		q.push(released{time: e.Time, duration: e.Duration, stack: e.Stack})
	}
}

// byStack returns a table of usage by stack ID plus one as a map by
// stack.
func byStack(t *ledger.Table[Usage]) map[event.StackID]*Usage {
	m := make(map[event.StackID]*Usage, t.Len())
	t.All(func(k uint64, u Usage) bool {
		m[event.StackID(k-1)] = &u
		return true
	})
	return m
}

// finishChurn returns a process's churn figures; nil without calls.
func (m *churnModel) finish(id uint32, duration uint64) *Churn {
	cs := m.procs[id]
	if cs == nil || cs.c.Allocs+cs.c.Frees == 0 {
		return nil
	}
	c := cs.c
	c.ObservedNs = duration
	c.CachingOff = c.TensorFrees > 0 && 10*c.PassedFrees >= cachingOffShare*c.TensorFrees
	if duration > 0 {
		secs := float64(duration) / 1e9
		c.CallsPerSecond = float64(c.Allocs+c.Frees) / secs
		c.CostMsPerSecond = float64(c.CycleNs) / 1e6 / secs
	}
	c.FreeStacks = topStacks(byStack(&cs.freeStacks), 0)
	c.AllocStacks = topStacks(byStack(&cs.allocStack), 0)
	return &c
}
