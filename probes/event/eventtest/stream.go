package eventtest

import "github.com/vramprof/vramprof/probes/event"

const (
	kiB = uint64(1) << 10
	miB = uint64(1) << 20
	giB = uint64(1) << 30
)

// Stream builds a record stream by hand. Every event goes to pid 100,
// device 0, segment layer, unless the method says otherwise.
type Stream struct {
	// Recs are the records built so far, in order.
	Recs []event.Record
}

// NewStream starts a stream with the header of a run of python train.py
// (pid 100), its process, and its two mappings: python3 (ID 1) and
// libcudart (ID 2).
func NewStream() *Stream {
	s := &Stream{}
	s.Recs = append(s.Recs, &event.Header{Version: 1, Tool: "vramprof test", Mode: "run",
		Command: []string{"python", "train.py"}, PID: 100, Start: 0, Host: "h"})
	s.Recs = append(s.Recs, &event.Process{PID: 100, Command: []string{"python", "train.py"}, Exe: "/usr/bin/python3"})
	s.Recs = append(s.Recs, &event.Mapping{ID: 1, PID: 100, Start: 0x1000, Limit: 0x9000, File: "/usr/bin/python3", BuildID: "ab"})
	s.Recs = append(s.Recs, &event.Mapping{ID: 2, PID: 100, Start: 0x7f0000, Limit: 0x7f9000, File: "/usr/lib/libcudart.so.12", BuildID: "cd"})
	return s
}

// Add appends records as they are.
func (s *Stream) Add(recs ...event.Record) *Stream {
	s.Recs = append(s.Recs, recs...)
	return s
}

// Stack adds a stack whose leaf is cudaMalloc in libcudart, called from fn
// in train.py at line.
func (s *Stream) Stack(id event.StackID, fn string, line int64) *Stream {
	s.Recs = append(s.Recs, &event.Stack{ID: id, PID: 100, Frames: []event.Frame{
		{Addr: 0x7f0100, Mapping: 2, Function: "cudaMalloc"},
		{Addr: 0x1000 + uint64(id)*0x10, Mapping: 1, Function: fn, File: "train.py", Line: line},
		{Addr: 0x2000, Mapping: 1, Function: "main", File: "train.py", Line: 1},
	}})
	return s
}

// Ev adds e, with pid 100 if it has none and the segment layer if it has
// none.
func (s *Stream) Ev(e event.Event) *Stream {
	if e.PID == 0 {
		e.PID = 100
	}
	if e.Layer == event.LayerUnknown {
		e.Layer = event.LayerSegment
	}
	s.Recs = append(s.Recs, &e)
	return s
}

// Call adds one traced call as the probes emit it: the runtime call e, then
// the driver call made inside it (FlagNested, 1 ns later) when nested is
// not APIUnknown.
func (s *Stream) Call(e event.Event, nested event.API) *Stream {
	s.Ev(e)
	if nested != event.APIUnknown {
		n := e
		n.API, n.Flags, n.Time = nested, event.FlagNested, e.Time+1
		s.Ev(n)
	}
	return s
}

// Alloc adds a successful cudaMalloc of size bytes at addr.
func (s *Stream) Alloc(t, addr, size uint64, st event.StackID) *Stream {
	return s.Ev(event.Event{Time: t, Addr: addr, Size: size, Stack: st, Kind: event.KindAlloc, API: event.APICudaMalloc})
}

// AllocOn is Alloc in process pid on device dev.
func (s *Stream) AllocOn(t, addr, size uint64, st event.StackID, pid uint32, dev int32) *Stream {
	return s.Ev(event.Event{Time: t, Addr: addr, Size: size, Stack: st, PID: pid, Device: dev,
		Kind: event.KindAlloc, API: event.APICudaMalloc})
}

// Fail adds a cudaMalloc of size bytes that returned ret.
func (s *Stream) Fail(t, size uint64, st event.StackID, ret int32) *Stream {
	return s.Ev(event.Event{Time: t, Size: size, Stack: st, Ret: ret, Kind: event.KindAlloc, API: event.APICudaMalloc})
}

// Free adds a cudaFree of addr.
func (s *Stream) Free(t, addr uint64) *Stream {
	return s.Ev(event.Event{Time: t, Addr: addr, Kind: event.KindFree, API: event.APICudaFree})
}

// FreeOn is Free in process pid.
func (s *Stream) FreeOn(t, addr uint64, pid uint32) *Stream {
	return s.Ev(event.Event{Time: t, Addr: addr, PID: pid, Kind: event.KindFree, API: event.APICudaFree})
}

// HostAlloc adds a cudaMallocHost (pinned host memory, no device) of size
// bytes at addr.
func (s *Stream) HostAlloc(t, addr, size uint64, st event.StackID) *Stream {
	return s.Ev(event.Event{Time: t, Addr: addr, Size: size, Stack: st, Device: event.DeviceUnknown,
		Kind: event.KindHostAlloc, API: event.APICudaMallocHost})
}

// HostFree adds a cudaFreeHost of addr.
func (s *Stream) HostFree(t, addr uint64) *Stream {
	return s.Ev(event.Event{Time: t, Addr: addr, Device: event.DeviceUnknown, Kind: event.KindHostFree, API: event.APICudaFreeHost})
}

// Lost adds a Lost record: total events dropped so far.
func (s *Stream) Lost(t, total uint64) *Stream {
	s.Recs = append(s.Recs, &event.Lost{Time: t, Total: total})
	return s
}

// End adds the End of a run that exited with code 0.
func (s *Stream) End(t uint64) *Stream {
	s.Recs = append(s.Recs, &event.End{Time: t, Reason: "exited", ExitCode: 0})
	return s
}
