package eventtest

import "github.com/vramprof/vramprof/probes/event"

// VMMBase is where the fake driver puts reservations (cuMemAddressReserve).
const VMMBase = uint64(0x7e00_0000_0000)

// VMMPool drives a caching allocator with expandable segments by hand, on a
// pool stream (thread 1; stack 1 for the driver calls, 2 for the blocks):
// ranges reserved, pages created and mapped one by one, as PyTorch's
// ExpandableSegment does. Each driver call lasts 10 µs.
type VMMPool struct {
	*PoolStream
	handle uint64
	// handles are the mapped pages' handles by address.
	handles map[uint64]uint64
}

// NewVMMPool starts a pool stream for expandable segments.
func NewVMMPool() *VMMPool {
	return &VMMPool{PoolStream: NewPoolStream(), handle: 0xc0de_0000_0000, handles: make(map[uint64]uint64)}
}

// VMM adds one driver call of kind k (ret its return code): addr and size
// are the range (or the handle, for cuMemCreate and cuMemRelease), handle
// the mapped handle (cuMemMap).
func (s *VMMPool) VMM(k event.Kind, api event.API, addr, size, handle uint64, ret int32) {
	s.Ev(event.Event{Time: s.Next(), Duration: 10e3, Addr: addr, Size: size, Stream: handle, Stack: 1, TID: 1, Ret: ret,
		Kind: k, API: api})
}

// Reserve reserves [addr, addr+size).
func (s *VMMPool) Reserve(addr, size uint64) {
	s.VMM(event.KindReserve, event.APICuMemAddressReserve, addr, size, 0, 0)
}

// Grow creates and maps one page of size bytes at addr.
func (s *VMMPool) Grow(addr, size uint64) {
	h := s.Create(size)
	s.Map(addr, size, h)
}

// Map maps handle h at [addr, addr+size).
func (s *VMMPool) Map(addr, size, h uint64) {
	s.VMM(event.KindMap, event.APICuMemMap, addr, size, h, 0)
	s.handles[addr] = h
}

// Shrink unmaps and releases the page at addr.
func (s *VMMPool) Shrink(addr, size uint64) {
	s.VMM(event.KindUnmap, event.APICuMemUnmap, addr, size, 0, 0)
	s.Release(s.handles[addr])
	delete(s.handles, addr)
}

// Create creates a page of size bytes, not mapped yet, and returns its
// handle.
func (s *VMMPool) Create(size uint64) uint64 {
	s.handle++
	s.VMM(event.KindCreate, event.APICuMemCreate, s.handle, size, 0, 0)
	return s.handle
}

// CreateFail adds a cuMemCreate of size bytes that fails for want of
// memory (CUDA_ERROR_OUT_OF_MEMORY).
func (s *VMMPool) CreateFail(size uint64) {
	s.VMM(event.KindCreate, event.APICuMemCreate, 0, size, 0, 2)
}

// Release releases handle h.
func (s *VMMPool) Release(h uint64) {
	s.VMM(event.KindRelease, event.APICuMemRelease, h, 0, 0, 0)
}

// ExpandableOOMPool: one reservation with pages 0..2 mapped (60 MiB), a
// 20 MiB block at 0 and a 15 MiB block at 45 MiB (free 20..45: 25 MiB). A
// request then needs pages: two are created, the third fails (60 MiB
// asked), the two are released; the flush unmaps page 1 (20..40, wholly
// free: 20 MiB); the retry creates two pages again and, when retryWorks,
// a third, maps all three at 60..120 and hands out a 60 MiB block there;
// else its third fails and the two are released.
func ExpandableOOMPool(retryWorks bool) *VMMPool {
	s := NewVMMPool()
	s.Reserve(VMMBase, 200*miB)
	for i := range uint64(3) {
		s.Grow(VMMBase+i*20*miB, 20*miB)
	}
	s.Block(VMMBase, 20*miB)
	s.Block(VMMBase+45*miB, 15*miB)
	a, b := s.Create(20*miB), s.Create(20*miB)
	s.CreateFail(20 * miB)
	s.Release(a)
	s.Release(b)
	s.Shrink(VMMBase+20*miB, 20*miB)
	a, b = s.Create(20*miB), s.Create(20*miB)
	if retryWorks {
		c := s.Create(20 * miB)
		for i, h := range []uint64{a, b, c} {
			s.Map(VMMBase+(3+uint64(i))*20*miB, 20*miB, h)
		}
		s.Block(VMMBase+60*miB, 60*miB)
		return s
	}
	s.CreateFail(20 * miB)
	s.Release(a)
	s.Release(b)
	return s
}
