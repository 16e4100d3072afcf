package ledger

import "github.com/vramprof/vramprof/probes/event"

// Apply applies one record as the analysis applies it to live memory, for
// readers that want the levels only (the live status line): a Process
// record starts or describes an instance; an event marks its instance
// active and, at the segment layer (an unset layer is the segment layer),
// unless nested in an outer call already counted, allocates or frees
// device, physical or pinned host memory, or maps or unmaps a range; at
// the block layer it allocates or frees a block. Other records change
// nothing. Unlike the analysis, Apply does not infer the device of an
// allocation that carries none: Entry.Device stays as the event had it.
func (l *Ledger) Apply(rec event.Record) {
	switch r := rec.(type) {
	case *event.Process:
		if r != nil {
			l.Process(r)
		}
	case *event.Event:
		if r != nil {
			l.event(r)
		}
	}
}

func (l *Ledger) event(e *event.Event) {
	id := l.Active(e.PID, e.Time)
	switch e.Layer {
	case event.LayerBlock:
		k := Key{Inst: id, Layer: event.LayerBlock, Space: Device}
		switch e.Kind {
		case event.KindAlloc:
			l.Alloc(k, e)
		case event.KindFree:
			l.Free(k, e)
		}
	case event.LayerSegment, event.LayerUnknown:
		if e.Flags&event.FlagNested != 0 {
			return
		}
		k := Key{Inst: id, Layer: event.LayerSegment, Space: Device}
		switch e.Kind {
		case event.KindAlloc:
			l.Alloc(k, e)
		case event.KindFree:
			l.Free(k, e)
		case event.KindHostAlloc:
			k.Space = Host
			l.Alloc(k, e)
		case event.KindHostFree:
			k.Space = Host
			l.Free(k, e)
		case event.KindCreate:
			l.Create(id, e)
		case event.KindRelease:
			l.Release(id, e)
		case event.KindMap:
			l.Map(id, e)
		case event.KindUnmap:
			l.Unmap(id, e)
		}
	}
}
