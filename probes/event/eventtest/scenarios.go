package eventtest

import "github.com/vramprof/vramprof/probes/event"

// PinnedStream is a loop of 40 iterations, 10 ms apart: forward allocates
// and frees device memory (the loop's pace), stage_batch pins 2 MiB + 4096
// bytes each iteration and never frees them, copy_staging pins and frees 1
// MiB (steady), and setup pinned 8 MiB once before the loop.
func PinnedStream() *Stream {
	const perIter = 2*miB + 4096
	s := NewStream().Stack(1, "forward", 10).Stack(2, "stage_batch", 20).Stack(3, "copy_staging", 30).
		Stack(4, "setup", 40)
	s.HostAlloc(1e6, 0x5000_0000, 8*miB, 4)
	for i := range uint64(40) {
		t := 10e6 + i*10e6 + (i*7919)%200_000
		s.Alloc(t, 0x7f00_0000_0000, 64*miB, 1)
		s.HostAlloc(t+10_000, 0x6000_0000+i<<24, perIter, 2)
		s.HostAlloc(t+20_000, 0x5100_0000, miB, 3)
		s.HostFree(t+30_000, 0x5100_0000)
		s.Free(t+40_000, 0x7f00_0000_0000)
	}
	return s.End(420e6)
}

// LeakStream mirrors testdata/scenarios/leak.c over trainer.c: load_model's
// four weights, then 100 iterations of forward (4 allocations from one
// call site), cache_activations(i) keeping 1 MiB + i*4096 bytes, backward (4
// allocations), optimizer_step (8 frees), then teardown. Each step is a
// few µs apart with some jitter, an iteration about 10 ms. withCapacity
// adds device 0's DeviceInfo: 40 GiB.
func LeakStream(withCapacity bool) *Stream {
	return leakStream(withCapacity, func(uint64) uint64 { return 0 })
}

// StalledLeakStream is LeakStream (without DeviceInfo) run by a process
// that a loaded machine descheduled twice in the loop: for 1.5 s before
// iteration 38 and for 2 s before iteration 71 (the leak scenario under a
// load average of 15 paused 8 and 10 ms in a loop of 14 ms). Each
// iteration still does the same work in the same ~10 ms: the 100 iterations
// and what they allocate are LeakStream's, only later.
func StalledLeakStream() *Stream {
	return leakStream(false, func(i uint64) uint64 {
		switch {
		case i >= 71:
			return 3500e6
		case i >= 38:
			return 1500e6
		}
		return 0
	})
}

// leakStream is LeakStream with iteration i (and what follows it) delayed
// by stall(i) ns.
func leakStream(withCapacity bool, stall func(i uint64) uint64) *Stream {
	s := NewStream().Stack(1, "load_model", 10).Stack(2, "forward", 20).Stack(3, "cache_activations", 30).
		Stack(4, "backward", 40)
	if withCapacity {
		s.Recs = append(s.Recs, &event.DeviceInfo{Index: 0, Name: "GPU", TotalBytes: 40 * giB})
	}
	weights := []uint64{256 * miB, 128 * miB, 64 * miB, 1000000}
	acts := []uint64{8 * miB, 4 * miB, 2*miB + 12345, 1 * miB}
	grads := []uint64{16 * miB, 8 * miB, 3000000, 777}
	t := uint64(1e6)
	for k, w := range weights {
		s.Alloc(t, 0x10000000+uint64(k)<<32, w, 1)
		t += 50_000
	}
	for i := uint64(0); i < 100; i++ {
		t = 10e6 + i*10e6 + (i*7919)%300_000 + stall(i) // jitter within 3% of the period
		for k, a := range acts {
			s.Alloc(t, 0x20000000+uint64(k)<<32, a, 2)
			t += 20_000
		}
		s.Alloc(t, 0x90000000000+i<<24, miB+i*4096, 3)
		t += 20_000
		for k, g := range grads {
			s.Alloc(t, 0x30000000+uint64(k)<<32, g, 4)
			t += 20_000
		}
		for k := range acts {
			s.Free(t, 0x20000000+uint64(k)<<32)
			s.Free(t+1, 0x30000000+uint64(k)<<32)
			t += 10_000
		}
	}
	t += 1e6
	for k := range weights {
		s.Free(t, 0x10000000+uint64(k)<<32)
		t += 10_000
	}
	return s.End(t + 1e6)
}

// RankStacks adds, for a rank process, the stacks of params, optimizer
// state and a checkpoint gather (IDs base, base+1, base+2): the same
// frames in every rank, one stack ID per process.
func (s *Stream) RankStacks(pid uint32, base event.StackID) *Stream {
	for i, fn := range []string{"load_params", "init_optimizer", "gather_checkpoint"} {
		s.Recs = append(s.Recs, &event.Stack{ID: base + event.StackID(i), PID: pid, Frames: []event.Frame{
			{Addr: 0x7f0100, Mapping: 2, Function: "cudaMalloc"},
			{Addr: 0x1000 + uint64(i)*0x10, Mapping: 1, Function: fn, File: "rank.py", Line: int64(10 * (i + 1))},
		}})
	}
	return s
}

// RanksStream: a launcher (pid 100) and two ranks (101 on device 0, 102 on
// device 1) with 256 MiB of params and 512 MiB of optimizer state each;
// rank 0 also gathers gather bytes (none if 0) and frees them.
func RanksStream(gather uint64) *Stream {
	s := NewStream()
	for r, pid := range []uint32{101, 102} {
		s.Recs = append(s.Recs, &event.Process{PID: pid, PPID: 100, Command: []string{"rank"}, Time: 1})
		s.RankStacks(pid, event.StackID(10*(r+1)))
	}
	for r, pid := range []uint32{101, 102} {
		base := event.StackID(10 * (r + 1))
		dev := int32(r)
		t := uint64(r+1) * 1e6
		s.AllocOn(t, 0x7f20_0000_0000-uint64(r)<<38, 256*miB, base, pid, dev)
		s.AllocOn(t+1000, 0x7f21_0000_0000-uint64(r)<<38, 512*miB, base+1, pid, dev)
	}
	if gather > 0 {
		s.AllocOn(5e6, 0x7f22_0000_0000, gather, 12, 101, 0)
		s.FreeOn(6e6, 0x7f22_0000_0000, 101)
	}
	return s.End(10e6)
}

// SpikeStream: 100 steps 1 ms apart, each allocating 10 MiB of activations
// (forward, stack 2) freed 0.5 ms later, over 100 MiB of weights
// (load_weights, stack 1) never freed; during step 50's activations
// save_checkpoint (stack 3) allocates 80 MiB and frees it 10 µs later.
// The peak, 190 MiB, is inside that spike; 110 MiB without it.
func SpikeStream() *Stream {
	const ms = uint64(1_000_000)
	s := NewStream().Stack(1, "load_weights", 10).Stack(2, "forward", 20).Stack(3, "save_checkpoint", 30)
	s.Alloc(0, 0xf000_0000, 100*miB, 1) // weights, never freed
	for i := range uint64(100) {
		s.Alloc(i*ms+1, 0x1000, 10*miB, 2) // activations: 0.5 ms each step
		if i == 50 {
			// A checkpoint copy during step 50's activations, freed 10 us later.
			s.Alloc(50*ms+100_000, 0xa000_0000, 80*miB, 3).Free(50*ms+110_000, 0xa000_0000)
		}
		s.Free(i*ms+500_000, 0x1000)
	}
	return s.End(100 * ms)
}

// PinMemoryStream pins 64 buffers of 1 MiB, one per 1<<30 ns (a leak-grid
// bucket of a 64-bucket run), from stack 7 whose caller is DataLoader's
// pin_memory (torch/utils/data/_utils/pin_memory.py:58), and frees none;
// the run ends at 65 x 1<<30 ns. No device allocation, so no loop.
func PinMemoryStream() *Stream {
	const tick = uint64(1) << 30
	s := NewStream()
	s.Recs = append(s.Recs, &event.Stack{ID: 7, PID: 100, Frames: []event.Frame{
		{Addr: 0x7f0100, Mapping: 2, Function: "cudaHostAlloc"},
		{Addr: 0x1100, Mapping: 1, Function: "pin_memory", File: "torch/utils/data/_utils/pin_memory.py", Line: 58},
	}})
	for i := range uint64(64) {
		s.HostAlloc((i+1)*tick, 0x6000_0000+i<<24, miB, 7)
	}
	return s.End(65 * tick)
}

// LeakWindowsStream runs 64 ticks of 1<<30 ns, less 1 ns: weights (stack
// 3) load 100 MiB once at 0; each tick leaky (stack 1) allocates 1 MiB
// never freed and steady (stack 2) allocates 1 MiB and frees it, once more
// just before the end. With LeakWindows 4 the windows end at ticks 16, 32,
// 48 and the end.
func LeakWindowsStream() *Stream {
	const tick = uint64(1) << 30
	s := NewStream().Stack(1, "leaky", 10).Stack(2, "steady", 20).Stack(3, "weights", 30)
	s.Alloc(0, 0xf000, 100*miB, 3) // loaded once: flat
	for i := range uint64(64) {
		s.Alloc(i*tick+1, 0x1000+i, miB, 1) // leaks
		s.Alloc(i*tick+2, 0xa, miB, 2)      // steady: freed each tick
		s.Free(i*tick+3, 0xa)
	}
	s.Alloc(64*tick-2, 0xb, miB, 2).Free(64*tick-1, 0xb)
	return s.End(64*tick - 1)
}
