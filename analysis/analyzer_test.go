package analysis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

func TestAccounting(t *testing.T) {
	tests := []struct {
		name  string
		build func(s *eventtest.Stream)
		want  Totals // LostEvents is ignored here
	}{
		{
			name: "3 allocs of 1 MiB, free 1: live 2 MiB, peak 3 MiB",
			build: func(s *eventtest.Stream) {
				s.Alloc(1, 0xa, MiB, 1).Alloc(2, 0xb, MiB, 1).Alloc(3, 0xc, MiB, 1).Free(4, 0xb)
			},
			want: Totals{Allocations: 3, Frees: 1, AllocatedBytes: 3 * MiB, FreedBytes: MiB,
				PeakBytes: 3 * MiB, PeakTime: 3, LiveBytesAtEnd: 2 * MiB, LiveAllocationsAtEnd: 2},
		},
		{
			name: "failed alloc is counted and never live",
			build: func(s *eventtest.Stream) {
				s.Alloc(1, 0xa, MiB, 1).Fail(2, 4*GiB, 2, 2)
			},
			want: Totals{Allocations: 1, AllocatedBytes: MiB, FailedAllocations: 1, FailedBytes: 4 * GiB,
				PeakBytes: MiB, PeakTime: 1, LiveBytesAtEnd: MiB, LiveAllocationsAtEnd: 1},
		},
		{
			name: "failed alloc with an address still is not live",
			build: func(s *eventtest.Stream) {
				s.Ev(event.Event{Time: 1, Addr: 0xa, Size: MiB, Ret: 2, Kind: event.KindAlloc})
				s.Free(2, 0xa)
			},
			want: Totals{FailedAllocations: 1, FailedBytes: MiB, UnknownFrees: 1},
		},
		{
			name: "free of an address allocated before attach",
			build: func(s *eventtest.Stream) {
				s.Free(1, 0xdead).Alloc(2, 0xa, MiB, 1)
			},
			want: Totals{Allocations: 1, AllocatedBytes: MiB, UnknownFrees: 1, PeakBytes: MiB, PeakTime: 2,
				LiveBytesAtEnd: MiB, LiveAllocationsAtEnd: 1},
		},
		{
			name: "cudaFree(NULL) is ignored",
			build: func(s *eventtest.Stream) {
				s.Alloc(1, 0xa, MiB, 1).Free(2, 0).Free(3, 0)
			},
			want: Totals{Allocations: 1, AllocatedBytes: MiB, NullFrees: 2, PeakBytes: MiB, PeakTime: 1,
				LiveBytesAtEnd: MiB, LiveAllocationsAtEnd: 1},
		},
		{
			name: "zero-size alloc is not an allocation",
			build: func(s *eventtest.Stream) {
				s.Alloc(1, 0xa, 0, 1)
			},
			want: Totals{ZeroSizeAllocations: 1},
		},
		{
			name: "alloc at a live address replaces it: 1 MiB then 2 MiB at 0xa, then free",
			build: func(s *eventtest.Stream) {
				s.Alloc(1, 0xa, MiB, 1).Alloc(2, 0xa, 2*MiB, 2).Free(3, 0xa)
			},
			want: Totals{Allocations: 2, AllocatedBytes: 3 * MiB, ReplacedAllocations: 1, Frees: 1,
				FreedBytes: 2 * MiB, PeakBytes: 2 * MiB, PeakTime: 2},
		},
		{
			name: "free that returned an error frees nothing",
			build: func(s *eventtest.Stream) {
				s.Alloc(1, 0xa, MiB, 1)
				s.Ev(event.Event{Time: 2, Addr: 0xa, Ret: 1, Kind: event.KindFree})
			},
			want: Totals{Allocations: 1, AllocatedBytes: MiB, FailedFrees: 1, PeakBytes: MiB, PeakTime: 1,
				LiveBytesAtEnd: MiB, LiveAllocationsAtEnd: 1},
		},
		{
			name: "double free: the second is unknown",
			build: func(s *eventtest.Stream) {
				s.Alloc(1, 0xa, MiB, 1).Free(2, 0xa).Free(3, 0xa)
			},
			want: Totals{Allocations: 1, AllocatedBytes: MiB, Frees: 1, FreedBytes: MiB, UnknownFrees: 1,
				PeakBytes: MiB, PeakTime: 1},
		},
		{
			name: "unknown kind and invalid kind are ignored",
			build: func(s *eventtest.Stream) {
				s.Ev(event.Event{Time: 1, Addr: 0xa, Size: MiB, Kind: event.Kind(200)})
				s.Ev(event.Event{Time: 2, Addr: 0xb, Size: MiB, Kind: event.KindInvalid})
			},
			want: Totals{IgnoredEvents: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := eventtest.NewStream().Stack(1, "f", 10).Stack(2, "g", 20)
			tt.build(s)
			s.Lost(10, 7).End(10)
			r := mustAnalyze(t, Options{}, s.Recs)
			want := tt.want
			want.LostEvents = 7
			assert.Equal(t, want, r.Totals)
			assert.Equal(t, uint64(7), r.LostEvents)
			assert.Nil(t, r.Blocks, "no block-layer events")
			// The process agrees with the totals: one process only.
			p := process(t, r, 100)
			assert.Equal(t, want, p.Totals)
		})
	}
}

func TestFailedAllocationIsAnOOMFinding(t *testing.T) {
	// 3 GiB live at stack 1, then a 2 GiB request at stack 2 fails with
	// cudaErrorMemoryAllocation, then a 1 GiB one at stack 2 fails too.
	s := eventtest.NewStream().Stack(1, "load_model", 5).Stack(2, "forward", 42)
	s.Alloc(1*sec, 0xa, 3*GiB, 1).Fail(2*sec, 2*GiB, 2, 2).Fail(3*sec, GiB, 2, 2).End(4 * sec)
	r := mustAnalyze(t, Options{}, s.Recs)

	p := process(t, r, 100)
	require.NotNil(t, p.FirstFailure)
	assert.Equal(t, 2*GiB, p.FirstFailure.Size)
	assert.Equal(t, 3*GiB, p.FirstFailure.LiveBytes)
	assert.Equal(t, []StackUsage{{Stack: 1, Usage: Usage{Count: 1, Bytes: 3 * GiB}}}, p.FirstFailure.LiveStacks)
	assert.Equal(t, []StackUsage{{Stack: 2, Usage: Usage{Count: 2, Bytes: 3 * GiB}}}, p.Failed)

	oom := findings(r, KindOOM)
	require.Len(t, oom, 1)
	assert.Equal(t, 2*GiB, oom[0].Bytes, "an OOM's bytes are the first failing request")
	assert.Equal(t, SeverityCritical, oom[0].Severity)
	// The words are report's (TestWordsOOM); the facts they quote:
	require.NotNil(t, oom[0].OOMCalls)
	assert.Equal(t, *p.FirstOOM, oom[0].OOMCalls.First)
	assert.Equal(t, event.StackID(2), oom[0].OOMCalls.First.Stack)
	assert.Equal(t, 3*GiB, oom[0].OOMCalls.First.LiveBytes)
	assert.Equal(t, uint64(2), oom[0].OOMCalls.Count, "both failures ran out of memory")
	assert.Equal(t, 3*GiB, oom[0].OOMCalls.Bytes)
	assert.Empty(t, findings(r, KindFailedCall), "out-of-memory is no failed_call")
}

// TestFailedCallIsNotAnOOM: errors other than out-of-memory (no driver, no
// device, not initialized) are failed_call findings with the error's name
// from the library that returned it, never oom (before: "oom (critical)",
// and driver codes named as the runtime's).
func TestFailedCallIsNotAnOOM(t *testing.T) {
	// Stack 1: three cudaMalloc calls fail with 35 (cudaErrorInsufficientDriver);
	// stack 2: one cuMemAlloc_v2 fails with 3 (CUDA_ERROR_NOT_INITIALIZED,
	// which would be cudaErrorInitializationError from the runtime).
	s := eventtest.NewStream().Stack(1, "load_model", 5).Stack(2, "init_pool", 9)
	s.Fail(1*sec, GiB, 1, 35).Fail(2*sec, GiB, 1, 35).Fail(3*sec, MiB, 1, 35)
	s.Ev(event.Event{Time: 4 * sec, Size: 4 * MiB, Stack: 2, Ret: 3, Kind: event.KindAlloc, API: event.APICuMemAlloc})
	s.End(5 * sec)
	r := mustAnalyze(t, Options{}, s.Recs)

	assert.Empty(t, findings(r, KindOOM), "no OOM")
	p := process(t, r, 100)
	assert.Nil(t, p.FirstOOM)
	require.NotNil(t, p.FirstFailure, "the first failure is still kept")
	fc := findings(r, KindFailedCall)
	require.Len(t, fc, 2)
	// Ranked by bytes at stake: the 35s first.
	assert.Equal(t, 2*GiB+MiB, fc[0].Bytes)
	assert.Equal(t, SeverityCritical, fc[0].Severity)
	// The words are report's (TestWordsFailedCall); the facts they quote:
	require.NotNil(t, fc[0].FailedCall)
	c := fc[0].FailedCall.Calls
	assert.Equal(t, "35 (cudaErrorInsufficientDriver)", c.Error)
	assert.Equal(t, uint64(3), c.Count)
	assert.Equal(t, event.APICudaMalloc, c.First.API)
	assert.Equal(t, GiB, c.First.Size)
	assert.Equal(t, event.StackID(1), c.First.Stack)
	assert.True(t, fc[0].FailedCall.Setup, "a driver too old is a setup error")
	require.Len(t, fc[0].Stacks, 1)
	assert.Equal(t, uint64(3), fc[0].Stacks[0].Count)

	assert.Equal(t, 4*MiB, fc[1].Bytes)
	c = fc[1].FailedCall.Calls
	assert.Equal(t, "3 (CUDA_ERROR_NOT_INITIALIZED)", c.Error, "named by the driver API, not the runtime")
	assert.Equal(t, uint64(1), c.Count)
	assert.True(t, c.Driver)
	assert.Equal(t, event.APICuMemAlloc, c.First.API)
	assert.Equal(t, 4*MiB, c.First.Size)
	assert.Equal(t, event.StackID(2), c.First.Stack)
	assert.True(t, fc[1].FailedCall.Setup)
}

func TestErrorName(t *testing.T) {
	for _, tc := range []struct {
		api  event.API
		ret  int32
		want string
	}{
		{event.APICudaMalloc, 2, "2 (cudaErrorMemoryAllocation)"},
		{event.APICudaMalloc, 3, "3 (cudaErrorInitializationError)"},
		{event.APICudaMalloc, 35, "35 (cudaErrorInsufficientDriver)"},
		{event.APICudaMalloc, 100, "100 (cudaErrorNoDevice)"},
		{event.APICuMemAlloc, 1, "1 (CUDA_ERROR_INVALID_VALUE)"},
		{event.APICuMemAlloc, 2, "2 (CUDA_ERROR_OUT_OF_MEMORY)"},
		{event.APICuMemAlloc, 3, "3 (CUDA_ERROR_NOT_INITIALIZED)"},
		{event.APICuMemAlloc, 100, "100 (CUDA_ERROR_NO_DEVICE)"},
		{event.APICuMemAllocPitch, 2, "2 (CUDA_ERROR_OUT_OF_MEMORY)"},
		{event.APICuMemAlloc, 35, "35"}, // no such CUresult
		{event.APICudaMalloc, 12345, "12345"},
	} {
		assert.Equal(t, tc.want, ErrorName(tc.api, tc.ret), "%s %d", tc.api, tc.ret)
	}
}

func TestPeak(t *testing.T) {
	t.Run("first time counts", func(t *testing.T) {
		// 1 MiB at stack 1, freed, then 1 MiB at stack 2: the peak (1 MiB) was
		// first reached by stack 1.
		s := eventtest.NewStream().Stack(1, "f", 1).Stack(2, "g", 2)
		s.Alloc(10, 0xa, MiB, 1).Free(20, 0xa).Alloc(30, 0xb, MiB, 2).End(40)
		r := mustAnalyze(t, Options{}, s.Recs)
		p := process(t, r, 100)
		assert.Equal(t, MiB, p.Totals.PeakBytes)
		assert.Equal(t, uint64(10), p.PeakTime)
		require.NotNil(t, p.PeakEvent)
		assert.Equal(t, event.StackID(1), p.PeakEvent.Stack)
		assert.Equal(t, []StackUsage{{Stack: 1, Usage: Usage{Count: 1, Bytes: MiB}}}, p.PeakStacks)
		assert.Equal(t, []StackUsage{{Stack: 2, Usage: Usage{Count: 1, Bytes: MiB}}}, p.LiveAtEnd)
	})
	t.Run("set by stack, snapshot not disturbed by later events", func(t *testing.T) {
		// t1 s1 +1 MiB (1), t2 s2 +2 MiB (3, peak), t3 free s1 (2),
		// t4 s3 +1 MiB (3 = peak: not new), t5 s3 +512 KiB (3.5 MiB: new peak,
		// crossed by s3's 512 KiB), then everything freed and s1 allocs 1 MiB.
		s := eventtest.NewStream().Stack(1, "f", 1).Stack(2, "g", 2).Stack(3, "h", 3)
		s.Alloc(1, 0xa, MiB, 1).Alloc(2, 0xb, 2*MiB, 2).Free(3, 0xa).
			Alloc(4, 0xc, MiB, 3).Alloc(5, 0xd, 512*KiB, 3).
			Free(6, 0xb).Free(7, 0xc).Free(8, 0xd).Alloc(9, 0xe, MiB, 1).End(10)
		r := mustAnalyze(t, Options{}, s.Recs)
		p := process(t, r, 100)
		assert.Equal(t, 3*MiB+512*KiB, p.Totals.PeakBytes)
		assert.Equal(t, uint64(5), p.PeakTime)
		assert.Equal(t, &Allocation{Time: 5, Addr: 0xd, Size: 512 * KiB, Device: 0, API: event.APICudaMalloc,
			Layer: event.LayerSegment, Stack: 3}, p.PeakEvent)
		assert.Equal(t, []StackUsage{
			{Stack: 2, Usage: Usage{Count: 1, Bytes: 2 * MiB}},
			{Stack: 3, Usage: Usage{Count: 2, Bytes: MiB + 512*KiB}},
		}, p.PeakStacks)
		// The classes carry the same snapshot: one per (stack, size).
		var peakSum, peakCount uint64
		for _, c := range r.Classes {
			peakSum += c.Peak.Bytes
			peakCount += c.Peak.Count
		}
		assert.Equal(t, 3*MiB+512*KiB, peakSum)
		assert.Equal(t, uint64(3), peakCount)
		peak := findings(r, KindPeak)
		require.Len(t, peak, 1)
		assert.Equal(t, 3*MiB+512*KiB, peak[0].Bytes)
		assert.Equal(t, "g (train.py:2)", peak[0].Stacks[0].Site)
		// g's 2 MiB cover more than half of the 3.5 MiB peak: the one stack
		// to reduce (report words it, TestWordsPeak).
		require.NotNil(t, peak[0].Peak)
		assert.Equal(t, *p.PeakEvent, peak[0].Peak.Crossing)
		assert.Equal(t, []StackUsage{{Stack: 2, Usage: Usage{Count: 1, Bytes: 2 * MiB}}}, peak[0].Peak.Largest)
	})
	t.Run("devices and processes", func(t *testing.T) {
		// pid 100: 1 MiB on dev 0, 2 MiB on dev 1 (process peak 3 MiB at t2).
		// pid 200: 4 MiB on dev 1 at t3, freed at t4, then 1 MiB on dev 1.
		// Overall: 1+2+4 = 7 MiB at t3. Device 1: 2+4 = 6 MiB at t3.
		s := eventtest.NewStream().Stack(1, "f", 1)
		s.AllocOn(1, 0xa, MiB, 1, 100, 0).AllocOn(2, 0xb, 2*MiB, 1, 100, 1).
			AllocOn(3, 0xa, 4*MiB, 1, 200, 1).FreeOn(4, 0xa, 200).AllocOn(5, 0xc, MiB, 1, 200, 1)
		r := mustAnalyze(t, Options{}, s.Recs)
		assert.Equal(t, 7*MiB, r.Totals.PeakBytes)
		assert.Equal(t, uint64(3), r.Totals.PeakTime)
		assert.Equal(t, 4*MiB, r.Totals.LiveBytesAtEnd)
		assert.Equal(t, []Device{
			{Index: 0, PeakBytes: MiB, PeakTime: 1, LiveBytesAtEnd: MiB},
			{Index: 1, PeakBytes: 6 * MiB, PeakTime: 3, LiveBytesAtEnd: 3 * MiB},
		}, noPeakStacks(r.Devices))
		p := process(t, r, 100)
		assert.Equal(t, 3*MiB, p.Totals.PeakBytes)
		assert.Equal(t, []ProcessDevice{
			{Index: 0, PeakBytes: MiB, PeakTime: 1, LiveBytesAtEnd: MiB},
			{Index: 1, PeakBytes: 2 * MiB, PeakTime: 2, LiveBytesAtEnd: 2 * MiB},
		}, p.Devices)
		q := process(t, r, 200)
		assert.Equal(t, 4*MiB, q.Totals.PeakBytes)
		assert.Equal(t, MiB, q.Totals.LiveBytesAtEnd)
	})
	t.Run("free under another current device releases the allocation's device", func(t *testing.T) {
		s := eventtest.NewStream().Stack(1, "f", 1)
		s.AllocOn(1, 0xa, MiB, 1, 100, 1)
		s.Ev(event.Event{Time: 2, Addr: 0xa, Device: 0, Kind: event.KindFree})
		r := mustAnalyze(t, Options{}, s.Recs)
		// Device 0 is listed (an event carried it) with nothing on it.
		assert.Equal(t, []Device{{Index: 0}, {Index: 1, PeakBytes: MiB, PeakTime: 1}}, noPeakStacks(r.Devices))
		assert.Zero(t, r.Totals.UnknownFrees)
	})
}

func TestStreamWithoutEnd(t *testing.T) {
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.Alloc(1*sec, 0xa, MiB, 1).Alloc(2*sec, 0xb, MiB, 1).Lost(3*sec, 5)
	r := mustAnalyze(t, Options{}, s.Recs)
	assert.False(t, r.Run.Ended)
	assert.Equal(t, 3*sec, r.Run.End, "the latest time seen")
	assert.Equal(t, 3*sec, r.Run.Duration)
	assert.Equal(t, 2*MiB, r.Totals.LiveBytesAtEnd)
	assert.Equal(t, uint64(5), r.Totals.LostEvents)
	assert.NotEmpty(t, findings(r, KindPeak))
}

func TestRunFacts(t *testing.T) {
	s := eventtest.NewStream()
	lib := &event.Library{PID: 100, Path: "/usr/lib/libcudart.so.12", Symbols: []string{"cudaMalloc", "cudaFree"}}
	s.Recs = append(s.Recs, lib, lib, &event.End{Time: 5 * sec, Reason: "exited", ExitCode: 3})
	r := mustAnalyze(t, Options{}, s.Recs)
	assert.Equal(t, Run{Tool: "vramprof test", Version: 1, Mode: "run", Command: []string{"python", "train.py"},
		PID: 100, Host: "h", End: 5 * sec, Duration: 5 * sec, Ended: true, EndReason: "exited", ExitCode: 3,
		Libraries: []event.Library{*lib}}, r.Run)
	p := process(t, r, 100)
	assert.Equal(t, "/usr/bin/python3", p.Exe)
}

func TestRecordsAreCopied(t *testing.T) {
	// The producer reuses its records after Add returns.
	a := New(Options{})
	st := &event.Stack{ID: 1, PID: 100, Frames: []event.Frame{{Addr: 1, Function: "f"}}}
	require.NoError(t, a.Add(st))
	st.Frames[0].Function = "clobbered"
	e := &event.Event{Time: 1, PID: 100, Addr: 0xa, Size: MiB, Stack: 1, Kind: event.KindAlloc}
	require.NoError(t, a.Add(e))
	*e = event.Event{Time: 2, PID: 100, Addr: 0xb, Size: 2 * MiB, Stack: 1, Kind: event.KindAlloc}
	require.NoError(t, a.Add(e))
	e.Size = 99
	r := a.Finish()
	assert.Equal(t, "f", r.Site(1))
	assert.Equal(t, 3*MiB, r.Totals.LiveBytesAtEnd)
	assert.Equal(t, uint64(2), process(t, r, 100).PeakEvent.Time)
}

func TestAddErrors(t *testing.T) {
	a := New(Options{})
	assert.Error(t, a.Add(nil))
	assert.Error(t, a.Add((*event.Event)(nil)))
	r := a.Finish()
	assert.Same(t, r, a.Finish())
	assert.ErrorIs(t, a.Add(&event.Lost{}), ErrFinished)
	assert.Empty(t, r.Processes)
	assert.Empty(t, r.Findings)
}

func TestFrames(t *testing.T) {
	lib := &event.Mapping{ID: 2, File: "/usr/lib/libcudart.so.12"}
	tests := []struct {
		name string
		f    event.Frame
		m    *event.Mapping
		want string
	}{
		{"full", event.Frame{Function: "step", File: "train.py", Line: 7}, nil, "step (train.py:7)"},
		{"no file", event.Frame{Function: "cudaMalloc"}, lib, "cudaMalloc"},
		{"no line", event.Frame{Function: "f", File: "a.c"}, nil, "f (a.c)"},
		{"no function", event.Frame{Addr: 0x7f12}, lib, "0x7f12 (libcudart.so.12)"},
		{"nothing", event.Frame{Addr: 0x7f12}, nil, "0x7f12"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, RenderFrame(tt.f, tt.m))
		})
	}
	s := eventtest.NewStream().Stack(1, "step", 7)
	r := mustAnalyze(t, Options{}, s.Recs)
	assert.Equal(t, "step (train.py:7)", r.Site(1), "the site skips libcudart frames")
	assert.Equal(t, []string{"cudaMalloc", "step (train.py:7)", "main (train.py:1)"}, r.Lines(1))
	assert.Equal(t, NoStack, r.Site(42))
	assert.Equal(t, []string{NoStack}, r.Lines(0))
}

func TestTimelineKeepsPeak(t *testing.T) {
	// A sawtooth between 0 and 1 MiB for 10000 ms with a single 9 MiB spike
	// at 4321 ms; 16 points cannot hold every step but must hold the spike.
	s := eventtest.NewStream().Stack(1, "f", 1)
	ms := uint64(1e6)
	for i := range uint64(10000) {
		s.Alloc(i*ms, 0xa, MiB, 1)
		if i == 4321 {
			s.Alloc(i*ms+1, 0xb, 8*MiB, 1).Free(i*ms+2, 0xb)
		}
		s.Free(i*ms+ms/2, 0xa)
	}
	r := mustAnalyze(t, Options{TimelinePoints: 16}, s.Recs)
	require.Len(t, r.Timelines, 1)
	pts := r.Timelines[0].Points
	assert.LessOrEqual(t, len(pts), 16)
	var top Point
	for i, p := range pts {
		if p.Bytes > top.Bytes {
			top = p
		}
		if i > 0 {
			assert.LessOrEqual(t, pts[i-1].Time, p.Time, "points in time order")
		}
	}
	assert.Equal(t, Point{Time: 4321*ms + 1, Bytes: 9 * MiB}, top)
}

func TestLeakRule(t *testing.T) {
	// 64 ticks, 4 windows ending at ticks 16, 32, 48 and the end.
	build := func(add func(s *eventtest.Stream)) *Result {
		s := eventtest.NewStream().Stack(1, "leaky", 10).Stack(2, "steady", 20).Stack(3, "weights", 30)
		add(s)
		s.End(64*tick - 1)
		return mustAnalyze(t, Options{LeakWindows: 4}, s.Recs)
	}
	t.Run("1 MiB every tick never freed", func(t *testing.T) {
		// Leak windows span first event to last: 0 to 64 ticks - 1.
		r := mustAnalyze(t, Options{LeakWindows: 4}, eventtest.LeakWindowsStream().Recs)
		leaks := findings(r, KindLeak)
		require.Len(t, leaks, 1)
		f := leaks[0]
		// The bytes at stake are the growth over the run: 64 leaked
		// allocations of 1 MiB, none live at the start, all at the end.
		assert.Equal(t, 64*MiB, f.Bytes)
		assert.Equal(t, 64*MiB, f.Leak.GrowthBytes)
		// The windows are the evidence: after window 1 (ticks 0..15) 16 MiB
		// were live, 64 MiB at the end.
		assert.Equal(t, 48*MiB, f.Leak.WindowGrowthBytes)
		assert.Equal(t, []uint64{16 * tick, 64*tick - 1}, []uint64{f.Leak.WindowStart, f.Leak.WindowEnd})
		assert.Equal(t, []uint64{16 * MiB, 32 * MiB, 48 * MiB, 64 * MiB}, f.Leak.Live)
		assert.Equal(t, []uint64{16 * tick, 32 * tick, 48 * tick, 64*tick - 1}, f.Leak.WindowEnds)
		secs := float64(48*tick-1) / 1e9
		assert.InDelta(t, float64(48*MiB)/secs, f.Leak.BytesPerSecond, 1e-6)
		assert.Equal(t, event.StackID(1), f.Stacks[0].Stack)
		assert.Equal(t, 64*MiB, f.Stacks[0].Bytes)
		// 64 MiB growth against a 164 MiB peak: >= 10%, high.
		assert.Equal(t, SeverityHigh, f.Severity)
		// The growth over the run: from the process's first traced moment
		// to the end, 64 ticks of 2^30 ns less 1 ns (report words it,
		// TestWordsLeak).
		assert.Equal(t, []uint64{0, 64*tick - 1}, []uint64{f.Leak.From, f.Leak.To})
		assert.Equal(t, uint64(64), f.Stacks[0].Count, "allocations still live at the end")
	})
	tests := []struct {
		name  string
		build func(s *eventtest.Stream)
	}{
		{"steady loop", func(s *eventtest.Stream) {
			for i := range uint64(64) {
				s.Alloc(i*tick+1, 0xa, MiB, 2).Free(i*tick+tick/2, 0xa)
			}
		}},
		{"steady loop stopped mid-iteration", func(s *eventtest.Stream) {
			for i := range uint64(64) {
				s.Alloc(i*tick+1, 0xa, MiB, 2)
				if i < 63 {
					s.Free(i*tick+tick/2, 0xa)
				}
			}
		}},
		{"weights loaded once, live at end", func(s *eventtest.Stream) {
			s.Alloc(1, 0xf000, 100*MiB, 3)
		}},
		{"cache filled once mid-run", func(s *eventtest.Stream) {
			s.Alloc(40*tick, 0xf000, 100*MiB, 3)
		}},
		{"growth then freed before the end", func(s *eventtest.Stream) {
			for i := range uint64(60) {
				s.Alloc(i*tick+1, 0x1000+i, MiB, 1)
			}
			for i := range uint64(60) {
				s.Free(63*tick, 0x1000+i)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := build(tt.build)
			assert.Empty(t, findings(r, KindLeak))
		})
	}
}

func TestLeakDefaultWindows(t *testing.T) {
	// A 60 s run; 1 MiB leaked every second from the first. The bytes at
	// stake are the growth over the run, 60 x 1048576 = 62914560, whatever
	// the windows; the windows' growth is what was allocated after the
	// first window's end.
	s := eventtest.NewStream().Stack(1, "leaky", 10)
	for i := range uint64(60) {
		s.Alloc(i*sec+1, 0x1000+i, MiB, 1)
	}
	s.End(60 * sec)
	r := mustAnalyze(t, Options{}, s.Recs)
	leaks := findings(r, KindLeak)
	require.Len(t, leaks, 1)
	ends := leaks[0].Leak.WindowEnds
	require.Len(t, ends, DefaultLeakWindows)
	var before uint64 // allocations before the first window's end
	for i := range uint64(60) {
		if i*sec+1 < ends[0] {
			before++
		}
	}
	assert.Equal(t, uint64(62914560), leaks[0].Bytes)
	assert.Equal(t, (60-before)*MiB, leaks[0].Leak.WindowGrowthBytes)
	// 60 allocations 1 s apart are a loop of 60 iterations of 1 s: 60 s
	// observed, so the rate is quoted per minute (1 MiB per iteration x
	// 60), never per hour, and without a capacity there is no projection.
	l := leaks[0].Leak
	assert.Equal(t, uint64(60), l.Iterations)
	// From the process's start to the last event (59 s + 1 ns); the rate
	// observed over the 60 iterations of 1 s (report words them,
	// TestWordsLeakDefaultWindows).
	assert.Equal(t, []uint64{0, 59*sec + 1}, []uint64{l.From, l.To})
	assert.Equal(t, sec, l.PeriodNs)
	assert.InDelta(t, float64(MiB), l.BytesPerIteration, 1e-6)
	rate, observed := l.BytesPerSecondObserved()
	assert.Equal(t, 60*sec, observed)
	assert.InDelta(t, float64(MiB), rate, 1e-6)
	b, ok := RateBaseFor(observed)
	assert.True(t, ok)
	assert.Equal(t, "minute", b.Name, "60 s observed: per minute, never per hour")
	assert.Zero(t, l.CapacityBytes, "no projection without a capacity")
	// The first window is about a sixth of the run, to within a grid bucket.
	assert.InDelta(t, float64(10*sec), float64(ends[0]), float64(60*sec/32))
}

func TestBlockLayer(t *testing.T) {
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.Alloc(1, 0xa, 2*MiB, 1)
	s.Ev(event.Event{Time: 2, Addr: 0xa, Size: MiB, Stack: 1, Kind: event.KindAlloc, Layer: event.LayerBlock})
	s.Ev(event.Event{Time: 3, Addr: 0xa, Kind: event.KindFree, Layer: event.LayerBlock})
	r := mustAnalyze(t, Options{}, s.Recs)
	require.NotNil(t, r.Blocks)
	assert.Equal(t, uint64(1), r.Blocks.Allocations)
	assert.Equal(t, MiB, r.Blocks.PeakBytes)
	assert.Equal(t, uint64(0), r.Blocks.LiveBytesAtEnd)
	// The same address in the two layers is two allocations.
	assert.Equal(t, 2*MiB, r.Totals.LiveBytesAtEnd)
	assert.Zero(t, r.Totals.ReplacedAllocations)
}

// monotonic feeds n allocations of 1 KiB at distinct addresses over 1000
// stacks: every event sets a new peak.
func monotonic(tb testing.TB, n int) *Result {
	tb.Helper()
	a := New(Options{})
	for i := range 1000 {
		require.NoError(tb, a.Add(&event.Stack{ID: event.StackID(i + 1), PID: 1,
			Frames: []event.Frame{{Addr: uint64(i), Function: "f"}}}))
	}
	e := &event.Event{PID: 1, Size: KiB, Kind: event.KindAlloc, Layer: event.LayerSegment}
	for i := range n {
		e.Time = uint64(i) * 1000
		e.Addr = uint64(i+1) * 4096
		e.Stack = event.StackID(i%1000 + 1)
		if err := a.Add(e); err != nil { // not require: its Helper call costs more than Add
			tb.Fatal(err)
		}
	}
	return a.Finish()
}

func TestMonotonicGrowthIsLinear(t *testing.T) {
	const n = 1_000_000
	small := time.Now()
	monotonic(t, n/10)
	tSmall := time.Since(small)
	start := time.Now()
	r := monotonic(t, n)
	elapsed := time.Since(start)
	assert.Equal(t, uint64(n)*KiB, r.Totals.PeakBytes)
	p := process(t, r, 1)
	require.Len(t, p.PeakStacks, 1000)
	assert.Equal(t, uint64(n/1000)*KiB, p.PeakStacks[0].Bytes)
	// Every stack grows in every window: 1000 leaking stacks, capped at 10.
	assert.Len(t, findings(r, KindLeak), maxLeakFindings)
	// Copying the live set at each peak is quadratic: ten times the events
	// would take a hundred times as long; linear takes ten times. A ratio
	// measured side by side, not a wall-clock limit, so a loaded machine
	// slows both runs alike; 40 leaves room for noise and still fails a
	// quadratic analysis.
	ratio := float64(elapsed) / float64(max(tSmall, time.Microsecond))
	assert.Less(t, ratio, 40.0, "%d events took %v, %d took %v", n, elapsed, n/10, tSmall)
	t.Logf("%d events in %v, %d in %v (%.1fx)", n, elapsed, n/10, tSmall, ratio)
}

func BenchmarkMonotonic(b *testing.B) {
	for b.Loop() {
		monotonic(b, 100_000)
	}
}

// TestProcessStops: the End record's stop counts land on the process they
// name, by PID and start time; a process it does not list was stopped 0
// times; a trace whose End did not count them (or that has no End) says
// nothing (nil).
func TestProcessStops(t *testing.T) {
	build := func() *eventtest.Stream {
		s := eventtest.NewStream().Stack(1, "f", 10)
		s.Add(&event.Process{PID: 100, Command: []string{"python", "train.py"}, Start: 555})
		s.Add(&event.Process{PID: 200, PPID: 100, Command: []string{"worker"}, Start: 556})
		s.Alloc(1, 0xa, MiB, 1)
		s.Ev(event.Event{Time: 2, PID: 200, Addr: 0xb, Size: MiB, Kind: event.KindAlloc, API: event.APICudaMalloc, Device: 0})
		return s
	}
	s := build()
	s.Add(&event.End{Time: 10, Reason: "exited", StopsCounted: true, Stops: []event.ProcessStops{
		{PID: 100, Start: 555, Count: 3},
		{PID: 100, Start: 1, Count: 9}, // another process on PID 100: not this one
	}})
	r := mustAnalyze(t, Options{}, s.Recs)
	require.NotNil(t, process(t, r, 100).Stops)
	assert.Equal(t, uint64(3), *process(t, r, 100).Stops)
	require.NotNil(t, process(t, r, 200).Stops)
	assert.Equal(t, uint64(0), *process(t, r, 200).Stops, "not listed: never stopped")

	r = mustAnalyze(t, Options{}, build().End(10).Recs)
	assert.Nil(t, process(t, r, 100).Stops, "an End that did not count stops")
	r = mustAnalyze(t, Options{}, build().Recs)
	assert.Nil(t, process(t, r, 100).Stops, "no End: cut short")
}
