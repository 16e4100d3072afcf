package analysis

import (
	"github.com/vramprof/vramprof/analysis/ledger"
	"github.com/vramprof/vramprof/probes/event"
)

// The models kept beside the ledger are observers with their own state;
// the findings rules (package rules) read that state at Finish, through
// the View (view.go), and keep none of their own.
// Two kinds of observer exist, by what they need to see:
//
//   - an observer sees the calls that allocate or free device memory, with
//     what the ledger made of each (the pools' geometry, the churn of
//     segments);
//   - a liveObserver sees every allocation made live and every one let go,
//     in every scope, once the aggregates counted it (the spikes, the
//     timelines, the iteration logs).

// observer is a model kept beside the ledger with its own state (the
// pools' geometry, the churn of segments): it sees every non-nested
// allocation or free of device memory (event.KindAlloc, event.KindFree) at
// the segment or block layer, after the ledger applied it. ch is what the
// ledger made of it: whether memory became live (Added, Replaced) or was
// freed, and the allocation that went (ch.Old), whose device and size a
// free does not carry. e.PID is the process instance's id. An observer
// must not change the ledger or ch, nor keep ch past the call; the
// findings rules read the observers' state at Finish.
type observer interface {
	observe(e *event.Event, layer event.Layer, ch *ledger.Change)
}

// The Analyzer calls its models directly (see Analyzer.pools and
// Analyzer.spikes); these keep them to the contracts above.
var (
	_ observer     = (*poolModel)(nil)
	_ observer     = (*churnModel)(nil)
	_ liveObserver = (*spikeModel)(nil)
	_ liveObserver = (*timelineModel)(nil)
	_ liveObserver = (*iterationModel)(nil)
)

// liveChange is one allocation made live or let go, in any layer and
// memory space (device, physical and pinned host memory), as the
// aggregates counted it: the values it carries are those after the change.
// A missed free (an allocation replaced at its address) is a let-go change
// followed by a live one.
type liveChange struct {
	// alloc is set when the allocation became live, clear when it went;
	// replaced is set when it went because another allocation took its
	// address (its free was missed), not by a free.
	alloc, replaced bool
	// seq is the event's sequence number (Run.Events after it), time the
	// change's time, born when the allocation became live (its allocation
	// time; time itself for a live change).
	seq, time, born uint64
	// size is the allocation's size and device its device.
	size   uint64
	device int32
	// layer and mem are the allocation's layer and memory space.
	layer event.Layer
	mem   MemorySpace
	// sc is the scope both count in. group is the index of the
	// allocation's stack in its process and scope (Analyzer.groups) and
	// groupLive its live bytes; account is the index of its process in
	// the scope (account.ix) and allocated the bytes the process allocated
	// there. Indexes and values, no pointers: the change is written for
	// every event, and pointers would cost a write barrier each.
	sc        scope
	group     int32
	groupLive uint64
	account   int32
	allocated uint64
	// live is the process's live bytes in the scope (the ledger's), and
	// deviceLive its live bytes on the device, after the change.
	live, deviceLive uint64
	// restored is set for an allocation a flight checkpoint restored
	// whose level the checkpoint's timelines hold already (inTimelines).
	restored bool
}

// liveObserver is a model fed every liveChange in stream order (the
// spikes, the timelines, the iteration logs). It must change neither the
// ledger, the aggregates nor c, and must not keep c past the call.
type liveObserver interface {
	changed(c *liveChange)
}

// Change is one allocation made live or let go, as the analysis counted
// it, for a watcher outside the package (Options.Watch): the Perfetto
// trace draws its counters and slices from these, so its levels are the
// report's. The levels it carries are those after the change. A missed
// free (an allocation replaced at its address) is a let-go change with
// Replaced set, followed by a live one at the same time.
type Change struct {
	// Alloc is set when the allocation became live, clear when it went.
	// Replaced is set when it went because another allocation took its
	// address (its free was missed), not by a free. Restored is set for an
	// allocation a flight recorder's checkpoint restored: it was live when
	// the kept stretch of the trace began.
	Alloc, Replaced, Restored bool
	// Time is the change's time (ns, the trace's clock); Born the
	// allocation's time (Time itself for a live change).
	Time, Born uint64
	// PID is the process's PID, Instance its instance's id (the PID itself
	// unless the PID was reused: see analysis/ledger).
	PID, Instance uint32
	// Addr is the allocation's address (a physical allocation's handle).
	Addr uint64
	// Size is its size in bytes, Device its device (DeviceUnknown: -1).
	Size   uint64
	Device int32
	// Layer and Space are the allocation's layer and memory space, API
	// the call that made it; Stack its allocation stack (Result.Stacks
	// renders it).
	Layer event.Layer
	Space MemorySpace
	API   event.API
	Stack event.StackID
	// Live is the process instance's live bytes in the allocation's scope
	// (its layer; device and physical memory together, or pinned host
	// memory), and DeviceLive its live bytes on Device in that scope.
	Live, DeviceLive uint64
}

// watch feeds the change just fed to the liveObservers to Options.Watch,
// with what they do not need: the instance, the address, the stack and
// the API.
func (a *Analyzer) watch(c *liveChange, inst uint32, addr uint64, stack event.StackID, api event.API) {
	w := &a.watched
	w.Alloc, w.Replaced, w.Restored = c.alloc, c.replaced, c.restored
	w.Time, w.Born = c.time, c.born
	w.Instance, w.PID = inst, inst
	if in := a.ledger.Instance(inst); in != nil {
		w.PID = in.PID
	}
	w.Addr, w.Size, w.Device = addr, c.size, c.device
	w.Layer, w.Space, w.API, w.Stack = c.layer, c.mem, api, stack
	w.Live, w.DeviceLive = c.live, c.deviceLive
	a.opts.Watch(w)
}
