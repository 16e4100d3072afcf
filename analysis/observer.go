package analysis

import (
	"github.com/vramprof/vramprof/analysis/ledger"
	"github.com/vramprof/vramprof/probes/event"
)

// observer is a model kept beside the ledger with its own state (the
// pools' geometry, the churn of segments): it sees every non-nested
// allocation or free of device memory (event.KindAlloc, event.KindFree) at
// the segment or block layer, after the ledger applied it. ch is what the
// ledger made of it: whether memory became live (Added, Replaced) or was
// freed, and the allocation that went (ch.Old), whose device and size a
// free does not carry. e.PID is the process instance's id. An observer
// must not change the ledger; the findings rules read the observers' state
// at Finish.
type observer interface {
	observe(e *event.Event, layer event.Layer, ch ledger.Change)
}
