package analysis

import "github.com/vramprof/vramprof/probes/event"

// Process instances (see doc.go, "Processes and PID reuse") are the
// ledger's (ledger.Ledger.Process): every model key that names a process
// holds an instance id, not a PID; the first instance of a PID has the PID
// itself as its id, so a stream without reuse is keyed exactly as before.

// instance is one process instance as the results show it: the ledger's
// instance (copied by inst and, at Finish, syncInstances) and what the
// analysis learns of it.
type instance struct {
	id  uint32
	pid uint32
	// start is the Process record's Time, or the first event's when the
	// instance was implied by events alone.
	start uint64
	// info is the Process record; nil when none described the instance.
	info *event.Process
	// fromStart says the instance was traced from its first instruction:
	// the probes saw it start (event.Process.FromStart), or, in a trace of
	// run, it is the root or a child forked by a traced process.
	fromStart bool
	// nvml are the NVML ticks that listed the instance, in stream order.
	nvml []procSample
	// nvmlUnsized counts the ticks that listed the instance without a
	// size on any device (NVML_VALUE_NOT_AVAILABLE).
	nvmlUnsized uint64
	// supersededAt is when a later instance took the PID; 0 while current.
	supersededAt uint64
}

// facts returns the analysis's record of instance id, creating it.
func (a *Analyzer) facts(id uint32) *instance {
	in := a.insts[id]
	if in == nil {
		in = &instance{id: id, pid: id}
		a.insts[id] = in
	}
	return in
}

// syncInstances completes the analysis's instances from the ledger's.
func (a *Analyzer) syncInstances() {
	for _, li := range a.ledger.Instances() {
		a.inst(li.ID)
	}
}

// process applies a Process record (see ledger.Ledger.Process for when it
// starts a new instance). A superseded instance keeps its figures, and
// leaves the all-process figures at r.Time (see retire).
func (a *Analyzer) process(r *event.Process) {
	if a.run.PID == 0 {
		// A launched command's PID is known only after the Header is
		// written: the first process is the root.
		a.run.PID = r.PID
	}
	// A child forked by a traced process was added to the targets before
	// it ran: nothing of it predates the trace.
	_, parentTraced := a.ledger.Current(r.PPID)
	parentTraced = parentTraced && r.PPID != 0 && r.PPID != r.PID

	li, old := a.ledger.Process(r)
	inherited := false
	if old != nil {
		a.retire(old.ID)
		// An exec'd image of a process traced from its start is traced
		// from its own start too.
		inherited = a.facts(old.ID).fromStart
	}
	in := a.facts(li.ID)
	// The root is the first instance of the root PID (its id is the PID).
	root := r.PID == a.run.PID && li.ID == r.PID
	// The probes say so for a process they saw start (FromStart: any
	// mode); older traces of run are judged here.
	in.fromStart = r.FromStart || a.run.Mode == "run" && (in.fromStart || inherited || root || parentTraced)
}

// retire takes an instance's live memory out of the all-process figures
// (the driver freed it when the process exited; the ledger retires its own
// levels); the instance's own figures stay as they were, so what it had
// live at its end is what it leaked.
func (a *Analyzer) retire(id uint32) {
	for _, sc := range []scope{deviceScope, hostScope, {layer: event.LayerBlock}} {
		sp := a.accounts[accountKey{id, sc}]
		if sp == nil {
			continue
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
	a.books.retire(id)
	a.vmm.retire(id)
}
