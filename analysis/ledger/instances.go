package ledger

import (
	"slices"

	"github.com/vramprof/vramprof/probes/event"
)

// Process instances. Every key that names a process holds an instance id,
// not a PID: the first instance of a PID has the PID itself as its id, so
// a stream without reuse is keyed by PID; a later instance of the same PID
// gets an id from ReusedBase up, which no PID reaches (Linux caps PIDs at
// 2^22).

// ReusedBase is the first id of an instance that reuses a PID.
const ReusedBase = uint32(1) << 31

// Instance is one process: a PID from its Process record (or its first
// event, when no record came first) until the next Process record for the
// same PID once it had events (see Ledger.Process).
type Instance struct {
	// ID keys the instance's memory; PID is the process's.
	ID, PID uint32
	// Start is the Process record's Time, or the first event's when the
	// instance was implied by events alone.
	Start uint64
	// Info is the Process record; nil when none described the instance.
	Info *event.Process
	// Active is set by the instance's first event.
	Active bool
	// SupersededAt is when a later instance took the PID; 0 while current.
	SupersededAt uint64
}

type instances struct {
	insts   map[uint32]*Instance
	order   []*Instance
	current map[uint32]uint32
	// last caches the latest lookup (the hot path).
	last   *Instance
	reused uint32
}

func newInstances() instances {
	return instances{insts: make(map[uint32]*Instance), current: make(map[uint32]uint32)}
}

// Active returns the id of pid's current instance, creating the first one
// (implied by an event at time t) when the PID is new, and marks it
// active: call it for every event.
func (l *Ledger) Active(pid uint32, t uint64) uint32 {
	if in := l.last; in != nil && in.PID == pid {
		in.Active = true
		return in.ID
	}
	id := l.Implied(pid, t)
	l.last.Active = true
	return id
}

// Implied is Active for a record that is no event (a checkpoint's
// summary): the instance is created when new but not marked active.
func (l *Ledger) Implied(pid uint32, t uint64) uint32 {
	if in := l.last; in != nil && in.PID == pid {
		return in.ID
	}
	id, ok := l.current[pid]
	if !ok {
		id = l.newInstance(pid, t)
	}
	l.last = l.insts[id]
	return id
}

// Current returns the id of pid's current instance; false when the PID
// has none.
func (l *Ledger) Current(pid uint32) (uint32, bool) {
	id, ok := l.current[pid]
	return id, ok
}

// Instance returns the instance of an id; nil when there is none.
func (l *Ledger) Instance(id uint32) *Instance { return l.insts[id] }

// Instances returns every instance, in order of appearance. The caller
// must not change them.
func (l *Ledger) Instances() []*Instance { return l.order }

// newInstance makes pid's next instance, started at t, its current one.
func (l *Ledger) newInstance(pid uint32, t uint64) uint32 {
	id := pid
	if _, taken := l.insts[id]; taken || pid >= ReusedBase {
		id = ReusedBase + l.reused
		l.reused++
	}
	in := &Instance{ID: id, PID: pid, Start: t}
	l.insts[id] = in
	l.order = append(l.order, in)
	l.current[pid] = id
	l.last = nil
	return id
}

// Process applies a Process record and returns the instance it describes,
// and the instance it superseded (nil when none). A PID's first record
// starts its first instance, or describes the instance its events implied
// (hand-made or imported streams, where events may come first). A later
// record for the same PID is either an exec (the probes describe a process
// again when it runs a new image) or another process that got the PID (the
// first exited, a fork reused it); the record cannot tell which. Either
// way the memory of what ran before is gone (the driver frees it at exec
// and at exit), so:
//
//   - when the current instance had no event yet, or no record described
//     it, the record describes it (a fork child that execs before using
//     CUDA is one process, named for what it runs);
//   - otherwise the record starts a new instance. The old one keeps its
//     levels and live allocations, and leaves the all-process levels.
func (l *Ledger) Process(r *event.Process) (in, old *Instance) {
	p := *r
	p.Command = slices.Clone(r.Command)
	id, ok := l.current[r.PID]
	switch {
	case !ok:
		id = l.newInstance(r.PID, r.Time)
	case l.insts[id].Info != nil && l.insts[id].Active:
		old = l.insts[id]
		l.retire(id)
		old.SupersededAt = r.Time
		id = l.newInstance(r.PID, r.Time)
	case l.insts[id].Info == nil && r.Time != 0 && r.Time < l.insts[id].Start:
		// Implied by events that came after the record's time.
		l.insts[id].Start = r.Time
	}
	in = l.insts[id]
	in.Info = &p
	return in, old
}

// Forget drops what superseded instance id still holds: its live
// allocations, levels, physical handles and mappings (its Instance stays).
// The analysis keeps them (what an instance had live at its end is what it
// leaked); a reader that cannot show a superseded instance (a flight
// recorder's checkpoint, which names processes by PID) forgets them, so
// that its memory follows what is live. The instance's memory left the
// all-process levels when it was superseded; Forget of a current instance
// does nothing.
func (l *Ledger) Forget(id uint32) {
	in := l.insts[id]
	if in == nil || l.current[in.PID] == id {
		return
	}
	for k := range l.spaces {
		if k.Inst == id {
			delete(l.spaces, k)
		}
	}
	for i, r := range l.recent {
		if r.ks != nil && r.ks.key.Inst == id {
			l.recent[i] = recentSpace{}
		}
	}
	for k := range l.instLevels {
		if k.inst == id {
			delete(l.instLevels, k)
		}
	}
	for k := range l.handles {
		if k.inst == id {
			delete(l.handles, k)
		}
	}
	for k := range l.mapped {
		if k.inst == id {
			delete(l.mapped, k)
		}
	}
}
