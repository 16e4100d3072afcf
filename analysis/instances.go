package analysis

import (
	"slices"

	"github.com/vramprof/vramprof/probes/event"
)

// Process instances (see doc.go, "Processes and PID reuse"). Every model
// key that names a process holds an instance id, not a PID: the first
// instance of a PID has the PID itself as its id, so a stream without reuse
// is keyed exactly as before; a later instance of the same PID gets an id
// from reusedBase up, which no PID reaches (Linux caps PIDs at 2^22).

// reusedBase is the first id of an instance that reuses a PID.
const reusedBase = uint32(1) << 31

// instance is one process: a PID from its Process record (or its first
// event, when no record came first) until the next Process record for the
// same PID.
type instance struct {
	id  uint32
	pid uint32
	// start is the Process record's Time, or the first event's when the
	// instance was implied by events alone.
	start uint64
	// info is the Process record; nil when none described the instance.
	info *event.Process
	// fromStart says the instance was traced from its first instruction:
	// a run-mode root, or a child forked by a traced process.
	fromStart bool
	// nvml are the NVML ticks that listed the instance, in stream order.
	nvml []procSample
	// supersededAt is when a later instance took the PID; 0 while current.
	supersededAt uint64
	// active is set by the instance's first event.
	active bool
}

// instanceOf returns the id of pid's current instance, creating the first
// one (implied by an event at time t) when the PID is new.
func (a *Analyzer) instanceOf(pid uint32, t uint64) uint32 {
	if a.lastInst != nil && a.lastInst.pid == pid {
		return a.lastInst.id
	}
	id, ok := a.current[pid]
	if !ok {
		id = a.newInstance(pid, t)
	}
	a.lastInst = a.insts[id]
	return id
}

// newInstance makes pid's next instance, started at t, its current one.
func (a *Analyzer) newInstance(pid uint32, t uint64) uint32 {
	id := pid
	if _, taken := a.insts[id]; taken || pid >= reusedBase {
		id = reusedBase + a.reused
		a.reused++
	}
	a.insts[id] = &instance{id: id, pid: pid, start: t}
	a.current[pid] = id
	a.lastInst = nil
	return id
}

// process applies a Process record. A PID's first record starts its first
// instance, or describes the instance its events implied (hand-made or
// imported streams, where events may come first). A later record for the
// same PID is either an exec (the probes describe a process again when it
// runs a new image) or another process that got the PID (the first exited,
// a fork reused it); the record cannot tell which. Either way the memory of
// what ran before is gone (the driver frees it at exec and at exit), so:
//
//   - when the current instance had no event yet, the record describes it
//     anew (a fork child that execs before using CUDA is one process, named
//     for what it runs);
//   - otherwise the record starts a new instance. The old one keeps its
//     figures, and leaves the all-process figures at r.Time (see retire).
func (a *Analyzer) process(r *event.Process) {
	p := *r
	p.Command = slices.Clone(r.Command)
	if a.run.PID == 0 {
		// A launched command's PID is known only after the Header is
		// written: the first process is the root.
		a.run.PID = r.PID
	}
	// A child forked by a traced process was added to the targets before
	// it ran: nothing of it predates the trace.
	_, parentTraced := a.current[r.PPID]
	parentTraced = parentTraced && r.PPID != 0 && r.PPID != r.PID

	id, ok := a.current[r.PID]
	inherited := false
	switch {
	case !ok:
		id = a.newInstance(r.PID, r.Time)
	case a.insts[id].info != nil && a.insts[id].active:
		old := a.insts[id]
		a.retire(id)
		old.supersededAt = r.Time
		// An exec'd image of a process traced from its start is traced
		// from its own start too.
		inherited = old.fromStart
		id = a.newInstance(r.PID, r.Time)
	case a.insts[id].info == nil && r.Time != 0 && r.Time < a.insts[id].start:
		// Implied by events that came after the record's time.
		a.insts[id].start = r.Time
	}
	in := a.insts[id]
	in.info = &p
	// The root is the first instance of the root PID (its id is the PID).
	root := r.PID == a.run.PID && id == r.PID
	in.fromStart = a.run.Mode == "run" && (in.fromStart || inherited || root || parentTraced)
}

// retire takes an instance's live memory out of the all-process figures
// (the driver freed it when the process exited); the instance's own figures
// stay as they were, so what it had live at its end is what it leaked.
func (a *Analyzer) retire(id uint32) {
	for _, sc := range []scope{deviceScope, hostScope, {layer: event.LayerBlock}} {
		sp := a.spaces[spaceKey{id, sc}]
		if sp == nil {
			continue
		}
		if ls := a.layers[sc]; ls != nil {
			ls.live.Count -= sp.live.Count
			ls.live.Bytes -= sp.live.Bytes
		}
		for d, pd := range sp.devices {
			a.device(d, sc).sub(pd.live)
		}
	}
	// Its classes leave their devices' all-process levels with it: the
	// next device peak must not count them (rare: a walk is affordable).
	for i, c := range a.classes {
		if c.key.pid == id && !c.retired && scopeOf(c.key.layer, c.key.mem) == deviceScope {
			c.retired = true
			a.device(c.key.device, deviceScope).devTouch(int32(i), c)
		}
	}
	for _, driver := range []bool{false, true} {
		if b := a.books[bookKey{pid: id, driver: driver}]; b != nil {
			a.bookState(bookKey{all: true, driver: driver}).level.sub(b.level.live)
		}
	}
	for k, v := range a.vmm {
		if k.pid != id || k.allPIDs || k.allDevices {
			continue
		}
		for _, all := range []vmmKey{{allPIDs: true, device: k.device}, {allPIDs: true, allDevices: true}} {
			s := a.vmmAt(all)
			s.reserved.sub(v.reserved.live)
			s.physical.sub(v.physical.live)
			s.mapped.sub(v.mapped.live)
		}
	}
}
