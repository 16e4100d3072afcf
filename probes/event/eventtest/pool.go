package eventtest

import "github.com/vramprof/vramprof/probes/event"

// SegBase is the address of the first segment the pool scenarios map.
const SegBase = uint64(0x7f20_0000_0000)

// PoolStream drives a caching allocator by hand: segments through
// cudaMalloc/cudaFree (thread 1, stack 1 alloc_block), blocks through
// pytorch:malloc/free (stack 2 train). The clock advances 1 ms per event;
// each CUDA call lasts 10 µs.
type PoolStream struct {
	*Stream
	t uint64
}

// NewPoolStream starts a pool stream at time 0 with stacks 1 and 2.
func NewPoolStream() *PoolStream {
	return &PoolStream{Stream: NewStream().Stack(1, "alloc_block", 1).Stack(2, "train", 2)}
}

// Next advances the clock by 1 ms and returns it.
func (s *PoolStream) Next() uint64 { s.t += 1e6; return s.t }

// Pause advances the clock by ns without an event (the rest of a step).
func (s *PoolStream) Pause(ns uint64) { s.t += ns }

// Seg maps a segment of size bytes at addr.
func (s *PoolStream) Seg(addr, size uint64) {
	s.Ev(event.Event{Time: s.Next(), Duration: 10e3, Addr: addr, Size: size, Stack: 1, TID: 1, Kind: event.KindAlloc, API: event.APICudaMalloc})
}

// SegFail adds a segment allocation of size bytes that failed
// (cudaErrorMemoryAllocation).
func (s *PoolStream) SegFail(size uint64) {
	s.Ev(event.Event{Time: s.Next(), Duration: 10e3, Size: size, Stack: 1, TID: 1, Ret: 2, Kind: event.KindAlloc, API: event.APICudaMalloc})
}

// SegFree releases the segment at addr.
func (s *PoolStream) SegFree(addr uint64) {
	s.Ev(event.Event{Time: s.Next(), Duration: 10e3, Addr: addr, TID: 1, Kind: event.KindFree, API: event.APICudaFree})
}

// Block hands out a block of size bytes at addr.
func (s *PoolStream) Block(addr, size uint64) {
	s.Ev(event.Event{Time: s.Next(), Addr: addr, Size: size, Stack: 2, TID: 1, Layer: event.LayerBlock, Kind: event.KindAlloc, API: event.APIPyTorchMalloc})
}

// BlockFree returns the block at addr to the cache.
func (s *PoolStream) BlockFree(addr uint64) {
	s.Ev(event.Event{Time: s.Next(), Addr: addr, TID: 1, Layer: event.LayerBlock, Kind: event.KindFree, API: event.APIPyTorchFree})
}

// OOMReport adds the allocator's report, on thread tid, of a request of
// request bytes it gave up on, with its allocated and reserved bytes
// (PyTorch's c10::reportOutOfMemoryToProfiler).
func (s *PoolStream) OOMReport(tid uint32, request, allocated, reserved uint64) {
	s.Ev(event.Event{Time: s.Next(), Addr: allocated, Size: request, Stream: reserved, Stack: 2, TID: tid,
		Layer: event.LayerBlock, Kind: event.KindOOMReport, API: event.APIC10ReportOOM})
}

// EmptyCache brackets the segment frees of addrs on thread 1 with an
// emptyCache scope (PyTorch's NativeCachingAllocator::emptyCache) whose
// entry stack is stack, as the probes record it: a begin and an end at the
// same rsp, the frees in between without a stack of their own (the walk
// lost it in the allocator).
func (s *PoolStream) EmptyCache(stack event.StackID, addrs ...uint64) {
	const sp = 0x7ffd_0000_1000
	s.Ev(event.Event{Time: s.Next(), Addr: sp, Stack: stack, TID: 1, Device: event.DeviceUnknown,
		Layer: event.LayerBlock, Kind: event.KindScopeBegin, API: event.APIC10EmptyCache})
	for _, a := range addrs {
		s.SegFree(a)
	}
	s.Ev(event.Event{Time: s.Next(), Addr: sp, TID: 1, Device: event.DeviceUnknown,
		Layer: event.LayerBlock, Kind: event.KindScopeEnd, API: event.APIC10EmptyCache})
}

// Finish ends the stream on the next tick and returns its records.
func (s *PoolStream) Finish() []event.Record {
	s.End(s.Next())
	return s.Recs
}

// ScatteredPool: 4 segments of 20 MiB, each with five 4 MiB blocks, the
// second and fourth freed: 83886080 reserved, 50331648 allocated, 33554432
// cached free in 8 ranges of 4194304, no failure.
func ScatteredPool() *PoolStream {
	s := NewPoolStream()
	var freed []uint64
	for k := range uint64(4) {
		seg := SegBase + k*20*miB
		s.Seg(seg, 20*miB)
		for i := range uint64(5) {
			s.Block(seg+i*4*miB, 4*miB)
		}
		freed = append(freed, seg+4*miB, seg+12*miB)
	}
	for _, b := range freed {
		s.BlockFree(b)
	}
	return s
}

// FragmentationOOMPool replays pool_frag_oom's allocator (testdata
// README): a free 2 MiB small segment, 4 x 20 MiB segments of 5 x 4 MiB
// blocks with every other block freed, then a 24 MiB segment that fails,
// the free-all releasing the 2 MiB segment, the retry failing, and the
// remaining blocks freed. The truth's fragmentation record: reserved
// 85983232, allocated 41943040, cached free 44040192, largest free range
// 4194304, oom_kind fragmentation.
func FragmentationOOMPool() *PoolStream {
	s := NewPoolStream()
	s.Seg(SegBase, 2*miB)
	for i := range uint64(3) {
		s.Block(SegBase+i*256*kiB, 256*kiB)
	}
	for i := range uint64(3) {
		s.BlockFree(SegBase + i*256*kiB)
	}
	var blocks []uint64
	for k := range uint64(4) {
		seg := SegBase + 2*miB + k*20*miB
		s.Seg(seg, 20*miB)
		for i := range uint64(5) {
			s.Block(seg+i*4*miB, 4*miB)
			blocks = append(blocks, seg+i*4*miB)
		}
	}
	for i := 1; i < len(blocks); i += 2 {
		s.BlockFree(blocks[i])
	}
	s.SegFail(24 * miB)
	s.SegFree(SegBase)
	s.SegFail(24 * miB)
	for i := 0; i < len(blocks); i += 2 {
		s.BlockFree(blocks[i])
	}
	return s
}

// CapacityOOMPool replays pool_capacity_oom: 3 x 12 MiB segments (one
// block each) and a 20 MiB segment with two 4 MiB blocks, the second
// freed; a 32 MiB segment fails twice (nothing to release). Truth:
// reserved 58720256, allocated 41943040, cached free 16777216, largest
// free range 16777216, oom_kind capacity.
func CapacityOOMPool() *PoolStream {
	s := NewPoolStream()
	for i := range uint64(3) {
		s.Seg(SegBase+i*12*miB, 12*miB)
		s.Block(SegBase+i*12*miB, 12*miB)
	}
	act := SegBase + 36*miB
	s.Seg(act, 20*miB)
	s.Block(act, 4*miB)
	s.Block(act+4*miB, 4*miB)
	s.BlockFree(act + 4*miB)
	s.SegFail(32 * miB)
	s.SegFail(32 * miB)
	return s
}

// RetryPool replays pool_retry: the 28 MiB segment fails, the allocator
// frees the 12 and 14 MiB segments (27262976 bytes) and the retry
// succeeds. State before the free-all (truth's retries[]): reserved
// 48234496, allocated 8388608, cached free 39845888, largest 14680064.
func RetryPool() *PoolStream {
	s := NewPoolStream()
	s.Seg(SegBase, 20*miB)
	s.Block(SegBase, 8*miB)
	s.Block(SegBase+8*miB, 8*miB)
	s.Seg(SegBase+20*miB, 12*miB)
	s.Block(SegBase+20*miB, 12*miB)
	s.Seg(SegBase+32*miB, 14*miB)
	s.Block(SegBase+32*miB, 14*miB)
	s.BlockFree(SegBase + 20*miB)
	s.BlockFree(SegBase + 32*miB)
	s.BlockFree(SegBase + 8*miB)
	s.SegFail(28 * miB)
	s.SegFree(SegBase + 20*miB)
	s.SegFree(SegBase + 32*miB)
	s.Seg(SegBase+20*miB, 28*miB)
	s.Block(SegBase+20*miB, 28*miB)
	s.BlockFree(SegBase + 20*miB)
	return s
}

// EmptyCachePool replays pool_empty_cache: a 40 MiB weight, then 20 steps
// that each get a 20 MiB, a 2 MiB and a 12 MiB segment and release them
// with empty_cache, then teardown. 61 cudaMalloc and 61 cudaFree; steps
// 2..20 take back what the step before released: 19 x 3 = 57 cycles,
// 19 x 34 MiB = 677380096 bytes.
func EmptyCachePool() *PoolStream {
	s := NewPoolStream()
	w := SegBase
	s.Seg(w, 40*miB)
	s.Block(w, 40*miB)
	sizes := []uint64{20 * miB, 2 * miB, 12 * miB}
	for range 20 {
		addr := SegBase + 40*miB
		var segs []uint64
		for _, sz := range sizes {
			s.Seg(addr, sz)
			s.Block(addr, sz/2)
			s.BlockFree(addr)
			segs = append(segs, addr)
			addr += sz
		}
		for _, a := range segs {
			s.SegFree(a)
		}
	}
	s.BlockFree(w)
	s.SegFree(w)
	return s
}

// ReleaseCyclePool maps a 20 MiB segment, hands out and returns a 1 MiB
// block, and releases the segment, 5 times over: 4 release-and-take-back
// cycles. With freeStacks, each release carries stack 3 (release_cache,
// train.py:3), as an imported snapshot's segment_free does; the live
// probes record none at a free.
func ReleaseCyclePool(freeStacks bool) *PoolStream {
	s := NewPoolStream()
	s.Stack(3, "release_cache", 3)
	for range 5 {
		s.Seg(SegBase, 20*miB)
		s.Block(SegBase, miB)
		s.BlockFree(SegBase)
		s.SegFree(SegBase)
		if freeStacks {
			s.Recs[len(s.Recs)-1].(*event.Event).Stack = 3
		}
	}
	return s
}
