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
	// groupLive its live bytes; space is the index of its process in the
	// scope (space.ix) and allocated the bytes the process allocated
	// there. Indexes and values, no pointers: the change is written for
	// every event, and pointers would cost a write barrier each.
	sc        scope
	group     int32
	groupLive uint64
	space     int32
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
