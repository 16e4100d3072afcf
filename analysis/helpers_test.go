package analysis

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vramprof/vramprof/probes/event"
)

const (
	KiB = uint64(1) << 10
	MiB = uint64(1) << 20
	GiB = uint64(1) << 30
	// tick is one leak-grid bucket for a run of 64 ticks: the grid's width
	// is 1024 ns doubled until 64 buckets cover the run, 1024<<20 = 1<<30.
	tick = uint64(1) << 30
	sec  = uint64(1e9)
)

// stream builds a record stream by hand. Every event goes to pid 100,
// device 0, segment layer, unless the helper says otherwise.
type stream struct {
	recs []event.Record
}

func newStream() *stream {
	s := &stream{}
	s.recs = append(s.recs, &event.Header{Version: 1, Tool: "vramprof test", Mode: "run",
		Command: []string{"python", "train.py"}, PID: 100, Start: 0, Host: "h"})
	s.recs = append(s.recs, &event.Process{PID: 100, Command: []string{"python", "train.py"}, Exe: "/usr/bin/python3"})
	s.recs = append(s.recs, &event.Mapping{ID: 1, PID: 100, Start: 0x1000, Limit: 0x9000, File: "/usr/bin/python3", BuildID: "ab"})
	s.recs = append(s.recs, &event.Mapping{ID: 2, PID: 100, Start: 0x7f0000, Limit: 0x7f9000, File: "/usr/lib/libcudart.so.12", BuildID: "cd"})
	return s
}

// stack adds a stack whose leaf is cudaMalloc in libcudart, called from fn
// in train.py at line.
func (s *stream) stack(id event.StackID, fn string, line int64) *stream {
	s.recs = append(s.recs, &event.Stack{ID: id, PID: 100, Frames: []event.Frame{
		{Addr: 0x7f0100, Mapping: 2, Function: "cudaMalloc"},
		{Addr: 0x1000 + uint64(id)*0x10, Mapping: 1, Function: fn, File: "train.py", Line: line},
		{Addr: 0x2000, Mapping: 1, Function: "main", File: "train.py", Line: 1},
	}})
	return s
}

func (s *stream) ev(e event.Event) *stream {
	if e.PID == 0 {
		e.PID = 100
	}
	if e.Layer == event.LayerUnknown {
		e.Layer = event.LayerSegment
	}
	s.recs = append(s.recs, &e)
	return s
}

func (s *stream) alloc(t, addr, size uint64, st event.StackID) *stream {
	return s.ev(event.Event{Time: t, Addr: addr, Size: size, Stack: st, Kind: event.KindAlloc, API: event.APICudaMalloc})
}

func (s *stream) allocOn(t, addr, size uint64, st event.StackID, pid uint32, dev int32) *stream {
	return s.ev(event.Event{Time: t, Addr: addr, Size: size, Stack: st, PID: pid, Device: dev,
		Kind: event.KindAlloc, API: event.APICudaMalloc})
}

func (s *stream) fail(t, size uint64, st event.StackID, ret int32) *stream {
	return s.ev(event.Event{Time: t, Size: size, Stack: st, Ret: ret, Kind: event.KindAlloc, API: event.APICudaMalloc})
}

func (s *stream) free(t, addr uint64) *stream {
	return s.ev(event.Event{Time: t, Addr: addr, Kind: event.KindFree, API: event.APICudaFree})
}

func (s *stream) freeOn(t, addr uint64, pid uint32) *stream {
	return s.ev(event.Event{Time: t, Addr: addr, PID: pid, Kind: event.KindFree, API: event.APICudaFree})
}

func (s *stream) lost(t, total uint64) *stream {
	s.recs = append(s.recs, &event.Lost{Time: t, Total: total})
	return s
}

func (s *stream) end(t uint64) *stream {
	s.recs = append(s.recs, &event.End{Time: t, Reason: "exited", ExitCode: 0})
	return s
}

// mustAnalyze feeds the records to a new Analyzer and finishes it.
func mustAnalyze(tb testing.TB, opts Options, recs []event.Record) *Result {
	tb.Helper()
	a := New(opts)
	for _, r := range recs {
		require.NoError(tb, a.Add(r))
	}
	return a.Finish()
}

func process(tb testing.TB, r *Result, pid uint32) *Process {
	tb.Helper()
	for i := range r.Processes {
		if r.Processes[i].PID == pid {
			return &r.Processes[i]
		}
	}
	require.FailNow(tb, "no process", "pid %d", pid)
	return nil
}

func findings(r *Result, kind string) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Kind == kind {
			out = append(out, f)
		}
	}
	return out
}

// noPeakStacks drops the devices' peak stacks, for tests about their byte
// figures (TestDevicePeakStacks checks the stacks).
func noPeakStacks(ds []Device) []Device {
	out := make([]Device, len(ds))
	for i, d := range ds {
		d.PeakStacks = nil
		out[i] = d
	}
	return out
}
