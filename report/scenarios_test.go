package report

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

// The scenarios of analysis's finding tests, rebuilt here so that the
// words of their findings are tested where they are written (findings.go).
// Each is a copy of its analysis test helper: stream of helpers_test.go,
// poolStream and scatteredPool of forensics_test.go, leakStream of
// iterations_test.go, pinnedStream of pinned_test.go, ranksStream of
// imbalance_test.go.

const (
	KiB = uint64(1) << 10
	// gridTick is one leak-grid bucket for a run of 64 ticks: the grid's width
	// is 1024 ns doubled until 64 buckets cover the run, 1024<<20 = 1<<30.
	gridTick = uint64(1) << 30
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

func (s *stream) end(t uint64) *stream {
	s.recs = append(s.recs, &event.End{Time: t, Reason: "exited", ExitCode: 0})
	return s
}

// mustAnalyze feeds the records to a new Analyzer and finishes it.
func mustAnalyze(tb testing.TB, opts analysis.Options, recs []event.Record) *analysis.Result {
	tb.Helper()
	a := analysis.New(opts)
	for _, r := range recs {
		require.NoError(tb, a.Add(r))
	}
	return a.Finish()
}

// poolStream drives a caching allocator by hand: segments through
// cudaMalloc/cudaFree (thread 1), blocks through pytorch:malloc/free. The
// clock advances 1 ms per event; each CUDA call lasts 10 µs.
type poolStream struct {
	*stream
	t uint64
}

func newPoolStream() *poolStream {
	return &poolStream{stream: newStream().stack(1, "alloc_block", 1).stack(2, "train", 2)}
}

func (s *poolStream) next() uint64 { s.t += 1e6; return s.t }

func (s *poolStream) seg(addr, size uint64) {
	s.ev(event.Event{Time: s.next(), Duration: 10e3, Addr: addr, Size: size, Stack: 1, TID: 1, Kind: event.KindAlloc, API: event.APICudaMalloc})
}

func (s *poolStream) segFail(size uint64) {
	s.ev(event.Event{Time: s.next(), Duration: 10e3, Size: size, Stack: 1, TID: 1, Ret: 2, Kind: event.KindAlloc, API: event.APICudaMalloc})
}

func (s *poolStream) segFree(addr uint64) {
	s.ev(event.Event{Time: s.next(), Duration: 10e3, Addr: addr, TID: 1, Kind: event.KindFree, API: event.APICudaFree})
}

func (s *poolStream) block(addr, size uint64) {
	s.ev(event.Event{Time: s.next(), Addr: addr, Size: size, Stack: 2, TID: 1, Layer: event.LayerBlock, Kind: event.KindAlloc, API: event.APIPyTorchMalloc})
}

func (s *poolStream) blockFree(addr uint64) {
	s.ev(event.Event{Time: s.next(), Addr: addr, TID: 1, Layer: event.LayerBlock, Kind: event.KindFree, API: event.APIPyTorchFree})
}

func (s *poolStream) result(tb testing.TB) *analysis.Result {
	s.end(s.next())
	return mustAnalyze(tb, analysis.Options{}, s.recs)
}

const segBase = uint64(0x7f20_0000_0000)

func (s *stream) hostAlloc(t, addr, size uint64, st event.StackID) *stream {
	return s.ev(event.Event{Time: t, Addr: addr, Size: size, Stack: st, Device: event.DeviceUnknown,
		Kind: event.KindHostAlloc, API: event.APICudaMallocHost})
}

func (s *stream) hostFree(t, addr uint64) *stream {
	return s.ev(event.Event{Time: t, Addr: addr, Device: event.DeviceUnknown, Kind: event.KindHostFree, API: event.APICudaFreeHost})
}

// pinnedStream is a loop of 40 iterations, 10 ms apart: forward allocates
// and frees device memory (the loop's pace), stage_batch pins 2 MiB + 4096
// bytes each iteration and never frees them, copy_staging pins and frees 1
// MiB (steady), and setup pinned 8 MiB once before the loop.
func pinnedStream() *stream {
	const perIter = 2*MiB + 4096
	s := newStream().stack(1, "forward", 10).stack(2, "stage_batch", 20).stack(3, "copy_staging", 30).
		stack(4, "setup", 40)
	s.hostAlloc(1e6, 0x5000_0000, 8*MiB, 4)
	for i := range uint64(40) {
		t := 10e6 + i*10e6 + (i*7919)%200_000
		s.alloc(t, 0x7f00_0000_0000, 64*MiB, 1)
		s.hostAlloc(t+10_000, 0x6000_0000+i<<24, perIter, 2)
		s.hostAlloc(t+20_000, 0x5100_0000, MiB, 3)
		s.hostFree(t+30_000, 0x5100_0000)
		s.free(t+40_000, 0x7f00_0000_0000)
	}
	return s.end(420e6)
}

// leakStream mirrors testdata/scenarios/leak.c over trainer.c: load_model's
// four weights, then 100 iterations of forward (4 allocations from one
// call site), cache_activations(i) keeping 1 MiB + i*4096 bytes, backward (4
// allocations), optimizer_step (8 frees), then teardown. Each step is a
// few µs apart with some jitter, an iteration about 10 ms.
func leakStream(withCapacity bool) *stream {
	s := newStream().stack(1, "load_model", 10).stack(2, "forward", 20).stack(3, "cache_activations", 30).
		stack(4, "backward", 40)
	if withCapacity {
		s.recs = append(s.recs, &event.DeviceInfo{Index: 0, Name: "GPU", TotalBytes: 40 * GiB})
	}
	weights := []uint64{256 * MiB, 128 * MiB, 64 * MiB, 1000000}
	acts := []uint64{8 * MiB, 4 * MiB, 2*MiB + 12345, 1 * MiB}
	grads := []uint64{16 * MiB, 8 * MiB, 3000000, 777}
	t := uint64(1e6)
	for k, w := range weights {
		s.alloc(t, 0x10000000+uint64(k)<<32, w, 1)
		t += 50_000
	}
	for i := uint64(0); i < 100; i++ {
		t = 10e6 + i*10e6 + (i*7919)%300_000 // jitter within 3% of the period
		for k, a := range acts {
			s.alloc(t, 0x20000000+uint64(k)<<32, a, 2)
			t += 20_000
		}
		s.alloc(t, 0x90000000000+i<<24, MiB+i*4096, 3)
		t += 20_000
		for k, g := range grads {
			s.alloc(t, 0x30000000+uint64(k)<<32, g, 4)
			t += 20_000
		}
		for k := range acts {
			s.free(t, 0x20000000+uint64(k)<<32)
			s.free(t+1, 0x30000000+uint64(k)<<32)
			t += 10_000
		}
	}
	t += 1e6
	for k := range weights {
		s.free(t, 0x10000000+uint64(k)<<32)
		t += 10_000
	}
	return s.end(t + 1e6)
}

// rankStacks adds, for a rank process, the stacks of params, optimizer
// state and a checkpoint gather: the same frames in every rank, one stack
// ID per process.
func rankStacks(s *stream, pid uint32, base event.StackID) {
	for i, fn := range []string{"load_params", "init_optimizer", "gather_checkpoint"} {
		s.recs = append(s.recs, &event.Stack{ID: base + event.StackID(i), PID: pid, Frames: []event.Frame{
			{Addr: 0x7f0100, Mapping: 2, Function: "cudaMalloc"},
			{Addr: 0x1000 + uint64(i)*0x10, Mapping: 1, Function: fn, File: "rank.py", Line: int64(10 * (i + 1))},
		}})
	}
}

// ranksStream: a launcher (pid 100) and two ranks (101 on device 0, 102 on
// device 1) with 256 MiB of params and 512 MiB of optimizer state each;
// rank 0 also gathers a 768 MiB + 123 byte checkpoint and frees it.
func ranksStream(gather uint64) *stream {
	s := newStream()
	for r, pid := range []uint32{101, 102} {
		s.recs = append(s.recs, &event.Process{PID: pid, PPID: 100, Command: []string{"rank"}, Time: 1})
		rankStacks(s, pid, event.StackID(10*(r+1)))
	}
	for r, pid := range []uint32{101, 102} {
		base := event.StackID(10 * (r + 1))
		dev := int32(r)
		t := uint64(r+1) * 1e6
		s.allocOn(t, 0x7f20_0000_0000-uint64(r)<<38, 256*MiB, base, pid, dev)
		s.allocOn(t+1000, 0x7f21_0000_0000-uint64(r)<<38, 512*MiB, base+1, pid, dev)
	}
	if gather > 0 {
		s.allocOn(5e6, 0x7f22_0000_0000, gather, 12, 101, 0)
		s.freeOn(6e6, 0x7f22_0000_0000, 101)
	}
	return s.end(10e6)
}

// scatteredPool: 4 segments of 20 MiB, each with five 4 MiB blocks, the
// second and fourth freed: 83886080 reserved, 50331648 allocated, 33554432
// cached free in 8 ranges of 4194304, no failure.
func scatteredPool() *poolStream {
	s := newPoolStream()
	var freed []uint64
	for k := range uint64(4) {
		seg := segBase + k*20*MiB
		s.seg(seg, 20*MiB)
		for i := range uint64(5) {
			s.block(seg+i*4*MiB, 4*MiB)
		}
		freed = append(freed, seg+4*MiB, seg+12*MiB)
	}
	for _, b := range freed {
		s.blockFree(b)
	}
	return s
}

// worded words res's findings and keeps those of kind.
func worded(res *analysis.Result, kind string) []wordedFinding {
	var out []wordedFinding
	for _, f := range wordFindings(res) {
		if f.Kind == kind {
			out = append(out, f)
		}
	}
	return out
}
