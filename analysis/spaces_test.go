package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

func cudaMalloc(t, addr, size uint64, ret int32) event.Event {
	return event.Event{Time: t, Addr: addr, Size: size, Ret: ret, Stack: 1, Kind: event.KindAlloc, API: event.APICudaMalloc}
}

func cudaFree(t, addr uint64, ret int32) event.Event {
	return event.Event{Time: t, Addr: addr, Ret: ret, Kind: event.KindFree, API: event.APICudaFree}
}

func TestNestedCallsCountOnceInTotalsAndOnceInEachBook(t *testing.T) {
	// cudaMalloc 1 MiB at 0xa, cudaMalloc 2 MiB at 0xb (3 MiB: the peak),
	// cudaFree 0xa, a 4 GiB cudaMalloc failing with 2, a cudaFree of 0xb
	// failing with 1: each with its cuMemAlloc_v2/cuMemFree_v2 nested.
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.Call(cudaMalloc(10, 0xa, MiB, 0), event.APICuMemAlloc).
		Call(cudaMalloc(20, 0xb, 2*MiB, 0), event.APICuMemAlloc).
		Call(cudaFree(30, 0xa, 0), event.APICuMemFree).
		Call(cudaMalloc(40, 0, 4*GiB, 2), event.APICuMemAlloc).
		Call(cudaFree(50, 0xb, 1), event.APICuMemFree).End(60)
	r := mustAnalyze(t, Options{}, s.Recs)

	want := Totals{Allocations: 2, Frees: 1, FailedAllocations: 1, FailedFrees: 1,
		AllocatedBytes: 3 * MiB, FreedBytes: MiB, FailedBytes: 4 * GiB,
		PeakBytes: 3 * MiB, PeakTime: 20, LiveBytesAtEnd: 2 * MiB, LiveAllocationsAtEnd: 1}
	assert.Equal(t, want, r.Totals, "each runtime call once; the nested ones not again")
	book := Book{Allocations: 2, Frees: 1, FailedAllocations: 1, FailedFrees: 1,
		AllocatedBytes: 3 * MiB, PeakBytes: 3 * MiB, LiveBytesAtEnd: 2 * MiB}
	rt, drv := book, book
	rt.PeakTime, drv.PeakTime = 20, 21 // the nested call returns 1 ns later here
	assert.Equal(t, Books{Runtime: rt, Driver: drv}, r.Books)
	assert.Equal(t, r.Books, process(t, r, 100).Books)
	assert.Equal(t, uint64(5), r.Run.NestedEvents)
	assert.Equal(t, uint64(10), r.Run.Events)
	// The profile's classes hold the counted calls only: no driver class.
	for _, c := range r.Classes {
		assert.Equal(t, event.APICudaMalloc, c.API)
	}
	assert.Len(t, findings(r, KindOOM), 1, "the failed runtime call is one OOM")
}

func TestDriverOnlyCallsAreTheTotals(t *testing.T) {
	// The runtime linked statically with hidden symbols: only driver calls
	// arrive, un-nested. 1 MiB and 2 MiB allocated, the 1 MiB freed; a free
	// returning 1 frees nothing.
	s := eventtest.NewStream().Stack(1, "f", 1)
	drv := func(e event.Event, api event.API) event.Event { e.API = api; return e }
	s.Ev(drv(cudaMalloc(1, 0xa, MiB, 0), event.APICuMemAlloc)).
		Ev(drv(cudaMalloc(2, 0xb, 2*MiB, 0), event.APICuMemAllocPitch)).
		Ev(drv(cudaFree(3, 0xa, 0), event.APICuMemFree)).
		Ev(drv(cudaFree(4, 0xb, 1), event.APICuMemFree)).End(5)
	r := mustAnalyze(t, Options{}, s.Recs)
	assert.Equal(t, Totals{Allocations: 2, Frees: 1, FailedFrees: 1, AllocatedBytes: 3 * MiB, FreedBytes: MiB,
		PeakBytes: 3 * MiB, PeakTime: 2, LiveBytesAtEnd: 2 * MiB, LiveAllocationsAtEnd: 1}, r.Totals)
	assert.Equal(t, Books{Driver: Book{Allocations: 2, Frees: 1, FailedFrees: 1, AllocatedBytes: 3 * MiB,
		PeakBytes: 3 * MiB, PeakTime: 2, LiveBytesAtEnd: 2 * MiB}}, r.Books)
	assert.Zero(t, r.Run.NestedEvents)
}

func TestHostMemoryIsItsOwnSpace(t *testing.T) {
	// cudaMallocHost 4 MiB (its cuMemHostAlloc nested), cudaMalloc 1 MiB,
	// cudaMallocHost 8 MiB (12 MiB host: its peak), cudaFreeHost the 4 MiB,
	// a cudaFreeHost of an unknown pointer. Device figures: 1 MiB only.
	s := eventtest.NewStream().Stack(1, "f", 1)
	host := func(t, addr, size uint64) event.Event {
		return event.Event{Time: t, Addr: addr, Size: size, Stack: 1, Kind: event.KindHostAlloc, API: event.APICudaMallocHost}
	}
	hostFree := func(t, addr uint64) event.Event {
		return event.Event{Time: t, Addr: addr, Kind: event.KindHostFree, API: event.APICudaFreeHost}
	}
	s.Call(host(1, 0x100, 4*MiB), event.APICuMemHostAlloc).
		Call(cudaMalloc(3, 0xa, MiB, 0), event.APICuMemAlloc).
		Call(host(5, 0x200, 8*MiB), event.APICuMemHostAlloc).
		Call(hostFree(7, 0x100), event.APICuMemFreeHost).
		Call(hostFree(9, 0x999), event.APIUnknown).End(10)
	r := mustAnalyze(t, Options{}, s.Recs)

	assert.Equal(t, MiB, r.Totals.AllocatedBytes)
	assert.Equal(t, MiB, r.Totals.PeakBytes)
	assert.Equal(t, uint64(1), r.Totals.Allocations)
	assert.Equal(t, []Device{{Index: 0, PeakBytes: MiB, PeakTime: 3, LiveBytesAtEnd: MiB}}, noPeakStacks(r.Devices))
	wantHost := Totals{Allocations: 2, Frees: 1, UnknownFrees: 1, AllocatedBytes: 12 * MiB, FreedBytes: 4 * MiB,
		PeakBytes: 12 * MiB, PeakTime: 5, LiveBytesAtEnd: 8 * MiB, LiveAllocationsAtEnd: 1}
	assert.Equal(t, wantHost, r.Host)
	p := process(t, r, 100)
	assert.Equal(t, wantHost, p.Host)
	assert.Equal(t, MiB, p.Totals.PeakBytes, "the process's peak is device memory only")
	assert.Equal(t, []StackUsage{{Stack: 1, Usage: Usage{Count: 1, Bytes: MiB}}}, p.PeakStacks)
	// Books are device memory: the host calls are in neither.
	assert.Equal(t, uint64(1), r.Books.Runtime.Allocations)
	assert.Equal(t, uint64(1), r.Books.Driver.Allocations)

	// The classes carry the space; host peak values are at the host peak.
	bySpace := map[MemorySpace]Usage{}
	for _, c := range r.Classes {
		u := bySpace[c.Space]
		u.Count += c.Peak.Count
		u.Bytes += c.Peak.Bytes
		bySpace[c.Space] = u
	}
	assert.Equal(t, map[MemorySpace]Usage{SpaceDevice: {Count: 1, Bytes: MiB}, SpaceHost: {Count: 2, Bytes: 12 * MiB}}, bySpace)
	var spaces []MemorySpace
	for _, tl := range r.Timelines {
		spaces = append(spaces, tl.Space)
	}
	assert.Equal(t, []MemorySpace{SpaceDevice, SpaceHost}, spaces)
	assert.Nil(t, r.VMM, "no VMM call")
}

// vmmSequence is PyTorch's expandable segments in miniature, pid 100, the
// calling thread on device 0, physical memory on device 1:
//
//	t1 reserve 8 MiB at 0x10000000
//	t2 create handle 0x77 (2 MiB), t3 create handle 0x78 (2 MiB)
//	t4 map 0x10000000 <- 0x77, t5 map 0x10200000 <- 0x78 (2 MiB each)
//	t6 release 0x77: still mapped, so still held
//	t7 unmap 0x10000000, 4 MiB: both ranges; 0x77 goes now
//	t8 release 0x78: unmapped, goes now
//	t9 unreserve 0x10000000
func vmmSequence() []event.Event {
	d := func(t uint64, k event.Kind, api event.API, addr, size, handle uint64, dev int32) event.Event {
		return event.Event{Time: t, Kind: k, API: api, Addr: addr, Size: size, Stream: handle, Device: dev, Stack: 1}
	}
	const va = 0x10000000
	return []event.Event{
		d(1, event.KindReserve, event.APICuMemAddressReserve, va, 8*MiB, 0, 0),
		d(2, event.KindCreate, event.APICuMemCreate, 0x77, 2*MiB, 0, 1),
		d(3, event.KindCreate, event.APICuMemCreate, 0x78, 2*MiB, 0, 1),
		d(4, event.KindMap, event.APICuMemMap, va, 2*MiB, 0x77, 0),
		d(5, event.KindMap, event.APICuMemMap, va+2*MiB, 2*MiB, 0x78, 0),
		d(6, event.KindRelease, event.APICuMemRelease, 0x77, 0, 0, 0),
		d(7, event.KindUnmap, event.APICuMemUnmap, va, 4*MiB, 0, 0),
		d(8, event.KindRelease, event.APICuMemRelease, 0x78, 0, 0, 0),
		d(9, event.KindUnreserve, event.APICuMemAddressFree, va, 8*MiB, 0, 0),
	}
}

func TestVMM(t *testing.T) {
	tests := []struct {
		name    string
		n       int // events of vmmSequence fed
		vmm     VMM
		devices []VMMDevice
		totals  Totals
		driver  Book
	}{
		{
			name: "released while mapped: still held",
			n:    6,
			vmm: VMM{Reserves: 1, Creates: 2, Maps: 2, Releases: 1, VMMBytes: VMMBytes{
				ReservedPeakBytes: 8 * MiB, ReservedBytesAtEnd: 8 * MiB,
				PhysicalPeakBytes: 4 * MiB, PhysicalBytesAtEnd: 4 * MiB,
				MappedPeakBytes: 4 * MiB, MappedBytesAtEnd: 4 * MiB}},
			devices: []VMMDevice{
				{Index: 0, VMMBytes: VMMBytes{ReservedPeakBytes: 8 * MiB, ReservedBytesAtEnd: 8 * MiB}},
				{Index: 1, VMMBytes: VMMBytes{PhysicalPeakBytes: 4 * MiB, PhysicalBytesAtEnd: 4 * MiB,
					MappedPeakBytes: 4 * MiB, MappedBytesAtEnd: 4 * MiB}},
			},
			totals: Totals{Allocations: 2, AllocatedBytes: 4 * MiB, PeakBytes: 4 * MiB, PeakTime: 3,
				LiveBytesAtEnd: 4 * MiB, LiveAllocationsAtEnd: 2},
			// The book follows the calls: 0x77 left it at its release.
			driver: Book{Allocations: 2, Frees: 1, AllocatedBytes: 4 * MiB, PeakBytes: 4 * MiB, PeakTime: 3,
				LiveBytesAtEnd: 2 * MiB},
		},
		{
			name: "whole sequence",
			n:    9,
			vmm: VMM{Reserves: 1, Unreserves: 1, Creates: 2, Releases: 2, Maps: 2, Unmaps: 1, VMMBytes: VMMBytes{
				ReservedPeakBytes: 8 * MiB, PhysicalPeakBytes: 4 * MiB, MappedPeakBytes: 4 * MiB}},
			devices: []VMMDevice{
				{Index: 0, VMMBytes: VMMBytes{ReservedPeakBytes: 8 * MiB}},
				{Index: 1, VMMBytes: VMMBytes{PhysicalPeakBytes: 4 * MiB, MappedPeakBytes: 4 * MiB}},
			},
			totals: Totals{Allocations: 2, Frees: 2, AllocatedBytes: 4 * MiB, FreedBytes: 4 * MiB,
				PeakBytes: 4 * MiB, PeakTime: 3},
			driver: Book{Allocations: 2, Frees: 2, AllocatedBytes: 4 * MiB, PeakBytes: 4 * MiB, PeakTime: 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := eventtest.NewStream().Stack(1, "f", 1)
			for _, e := range vmmSequence()[:tt.n] {
				s.Ev(e)
			}
			s.End(10)
			r := mustAnalyze(t, Options{}, s.Recs)
			require.NotNil(t, r.VMM)
			want := tt.vmm
			want.Devices = tt.devices
			assert.Equal(t, &want, r.VMM)
			assert.Equal(t, &want, process(t, r, 100).VMM)
			tt.totals.LostEvents = 0
			assert.Equal(t, tt.totals, r.Totals, "physical memory is device usage; reserved and mapped are not")
			assert.Equal(t, Books{Driver: tt.driver}, r.Books)
			// Physical memory is on device 1 (its properties), not the
			// caller's device 0.
			var dev1 Device
			for _, d := range r.Devices {
				if d.Index == 1 {
					dev1 = d
				}
			}
			assert.Equal(t, 4*MiB, dev1.PeakBytes)
			assert.Equal(t, tt.totals.LiveBytesAtEnd, dev1.LiveBytesAtEnd)
			for _, c := range r.Classes {
				assert.Equal(t, SpacePhysical, c.Space)
			}
		})
	}
	t.Run("deferred release frees at the unmap", func(t *testing.T) {
		s := eventtest.NewStream().Stack(1, "f", 1)
		for _, e := range vmmSequence()[:7] {
			s.Ev(e)
		}
		r := mustAnalyze(t, Options{}, s.Recs)
		// After t6 both handles were live (the table above); the unmap at
		// t7 freed 0x77, released at t6, and left 0x78, never released.
		assert.Equal(t, uint64(1), r.Totals.Frees)
		assert.Equal(t, 2*MiB, r.Totals.LiveBytesAtEnd)
		assert.Equal(t, 2*MiB, r.VMM.PhysicalBytesAtEnd)
		assert.Zero(t, r.VMM.MappedBytesAtEnd)
	})
	t.Run("a handle never collides with an address", func(t *testing.T) {
		s := eventtest.NewStream().Stack(1, "f", 1)
		s.Ev(cudaMalloc(1, 0x77, MiB, 0)).Ev(vmmSequence()[1]).Ev(cudaFree(3, 0x77, 0))
		r := mustAnalyze(t, Options{}, s.Recs)
		assert.Zero(t, r.Totals.ReplacedAllocations)
		assert.Equal(t, 3*MiB, r.Totals.PeakBytes)
		assert.Equal(t, 2*MiB, r.Totals.LiveBytesAtEnd, "cudaFree(0x77) freed the pointer, not the handle")
	})
	t.Run("unknown handles and failed calls", func(t *testing.T) {
		s := eventtest.NewStream()
		s.Ev(event.Event{Time: 1, Kind: event.KindRelease, API: event.APICuMemRelease, Addr: 0x5})
		s.Ev(event.Event{Time: 2, Kind: event.KindUnmap, API: event.APICuMemUnmap, Addr: 0x1000, Size: MiB})
		s.Ev(event.Event{Time: 3, Kind: event.KindReserve, API: event.APICuMemAddressReserve, Size: MiB, Ret: 2})
		s.Ev(event.Event{Time: 4, Kind: event.KindCreate, API: event.APICuMemCreate, Size: MiB, Ret: 2})
		r := mustAnalyze(t, Options{}, s.Recs)
		require.NotNil(t, r.VMM)
		assert.Equal(t, uint64(2), r.VMM.UnknownCalls)
		assert.Equal(t, uint64(2), r.VMM.FailedCalls)
		assert.Equal(t, uint64(1), r.Totals.UnknownFrees)
		assert.Equal(t, uint64(1), r.Totals.FailedAllocations, "a failed cuMemCreate is a failed allocation")
	})
}

func TestFreeUsesTheAllocationsDevice(t *testing.T) {
	// Thread 5 sets device 1, allocates 1 MiB, sets device 0, frees it; a
	// thread whose device is not known yet frees an unknown pointer.
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.Ev(event.Event{Time: 1, TID: 5, Device: 1, Kind: event.KindSetDevice, API: event.APICudaSetDevice})
	a := cudaMalloc(2, 0xa, MiB, 0)
	a.TID, a.Device = 5, 1
	s.Ev(a)
	s.Ev(event.Event{Time: 3, TID: 5, Device: 0, Kind: event.KindSetDevice, API: event.APICudaSetDevice})
	f := cudaFree(4, 0xa, 0)
	f.TID, f.Device = 5, 0
	s.Ev(f)
	u := cudaFree(5, 0xdead, 0)
	u.TID, u.Device = 6, event.DeviceUnknown
	s.Ev(u)
	r := mustAnalyze(t, Options{}, s.Recs)
	assert.Equal(t, []Device{
		{Index: event.DeviceUnknown},
		{Index: 0},
		{Index: 1, PeakBytes: MiB, PeakTime: 2},
	}, noPeakStacks(r.Devices))
	assert.Equal(t, uint64(1), r.Totals.Frees)
	assert.Equal(t, uint64(1), r.Totals.UnknownFrees)
	assert.Equal(t, uint64(2), r.Run.DeviceSwitches)
	assert.Equal(t, []ProcessDevice{{Index: 1, PeakBytes: MiB, PeakTime: 2}}, process(t, r, 100).Devices)
}

func TestFailedSetDeviceNamesNoDevice(t *testing.T) {
	// Thread 5 sets device 1 and allocates 1 MiB there; its
	// cudaSetDevice(7) fails (cudaErrorInvalidDevice, 101: there is no
	// device 7); its cuCtxSetCurrent of a context the probes cannot place
	// (a destroyed one: the call fails, its result unseen) names no device,
	// and the 2 MiB allocated after it, device unknown, lie in device 1's
	// range (it freed 4 MiB at 0xb). Device 1 alone is listed, with both;
	// the three choices count as switches.
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.Ev(event.Event{Time: 1, TID: 5, Device: 1, Kind: event.KindSetDevice, API: event.APICudaSetDevice})
	a := cudaMalloc(2, 0xa, MiB, 0)
	a.TID, a.Device = 5, 1
	s.Ev(a)
	s.Ev(event.Event{Time: 3, TID: 5, Device: 7, Ret: 101, Kind: event.KindSetDevice, API: event.APICudaSetDevice})
	b := cudaMalloc(4, 0xa+MiB, 4*MiB, 0)
	b.TID, b.Device = 5, 1
	s.Ev(b)
	f := cudaFree(5, 0xa+MiB, 0)
	f.TID, f.Device = 5, 1
	s.Ev(f)
	s.Ev(event.Event{Time: 6, TID: 5, Device: event.DeviceUnknown, Kind: event.KindSetDevice, API: event.APICuCtxSetCurrent})
	c := cudaMalloc(7, 0xa+MiB, 2*MiB, 0)
	c.TID, c.Device = 5, event.DeviceUnknown
	s.Ev(c)
	r := mustAnalyze(t, Options{}, s.Recs)
	assert.Equal(t, []Device{{Index: 1, PeakBytes: 5 * MiB, PeakTime: 4, LiveBytesAtEnd: 3 * MiB}}, noPeakStacks(r.Devices))
	assert.Equal(t, uint64(3), r.Run.DeviceSwitches)
	assert.Equal(t, uint64(1), r.Run.DevicesInferred)
}

func TestTwoProcesses(t *testing.T) {
	// pid 100 forks 101. Both allocate at the same address 0xa: separate
	// address spaces. pid 100: 1 MiB device, 2 MiB host. pid 101: 4 MiB
	// device (nested driver call), freed; then 1 MiB live at the end.
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.Recs = append(s.Recs, &event.Process{PID: 101, PPID: 100, Command: []string{"python", "worker"}})
	in := func(e event.Event, pid uint32) event.Event { e.PID = pid; return e }
	s.Call(in(cudaMalloc(1, 0xa, MiB, 0), 100), event.APIUnknown).
		Ev(event.Event{Time: 2, Addr: 0x100, Size: 2 * MiB, Kind: event.KindHostAlloc, API: event.APICudaMallocHost}).
		Call(in(cudaMalloc(3, 0xa, 4*MiB, 0), 101), event.APICuMemAlloc).
		Call(in(cudaFree(5, 0xa, 0), 101), event.APICuMemFree).
		Call(in(cudaMalloc(7, 0xb, MiB, 0), 101), event.APICuMemAlloc).End(10)
	r := mustAnalyze(t, Options{}, s.Recs)

	p, q := process(t, r, 100), process(t, r, 101)
	assert.Equal(t, uint32(100), q.PPID)
	assert.Equal(t, Totals{Allocations: 1, AllocatedBytes: MiB, PeakBytes: MiB, PeakTime: 1,
		LiveBytesAtEnd: MiB, LiveAllocationsAtEnd: 1}, p.Totals)
	assert.Equal(t, Totals{Allocations: 2, Frees: 1, AllocatedBytes: 5 * MiB, FreedBytes: 4 * MiB,
		PeakBytes: 4 * MiB, PeakTime: 3, LiveBytesAtEnd: MiB, LiveAllocationsAtEnd: 1}, q.Totals)
	assert.Equal(t, 2*MiB, p.Host.LiveBytesAtEnd)
	assert.Zero(t, q.Host.Allocations)
	assert.Equal(t, Books{Runtime: Book{Allocations: 1, AllocatedBytes: MiB, PeakBytes: MiB, PeakTime: 1,
		LiveBytesAtEnd: MiB}}, p.Books)
	qb := Book{Allocations: 2, Frees: 1, AllocatedBytes: 5 * MiB, PeakBytes: 4 * MiB, LiveBytesAtEnd: MiB}
	qrt, qdrv := qb, qb
	qrt.PeakTime, qdrv.PeakTime = 3, 4
	assert.Equal(t, Books{Runtime: qrt, Driver: qdrv}, q.Books)
	// Overall: 1 + 4 MiB at t3; the runtime book likewise, the driver book
	// saw pid 101 only.
	assert.Equal(t, 5*MiB, r.Totals.PeakBytes)
	assert.Equal(t, 2*MiB, r.Totals.LiveBytesAtEnd)
	assert.Equal(t, uint64(3), r.Totals.Allocations)
	assert.Equal(t, 5*MiB, r.Books.Runtime.PeakBytes)
	assert.Equal(t, uint64(3), r.Books.Runtime.Allocations)
	assert.Equal(t, qdrv, r.Books.Driver)
	assert.Equal(t, 2*MiB, r.Host.PeakBytes)
}

func TestHostAndReservedMemoryListNoDevice(t *testing.T) {
	// The probes mark pinned host memory and reserved address space
	// DeviceUnknown: they are on no device, so "unknown" is not listed.
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.Ev(event.Event{Time: 1, Addr: 0x100, Size: MiB, Device: event.DeviceUnknown, Kind: event.KindHostAlloc, API: event.APICudaMallocHost}).
		Ev(event.Event{Time: 2, Addr: 0x7000, Size: GiB, Device: event.DeviceUnknown, Kind: event.KindReserve, API: event.APICuMemAddressReserve}).
		Alloc(3, 0xa, MiB, 1).End(4)
	r := mustAnalyze(t, Options{}, s.Recs)
	assert.Equal(t, []Device{{Index: 0, PeakBytes: MiB, PeakTime: 3, LiveBytesAtEnd: MiB}}, noPeakStacks(r.Devices))
	assert.Equal(t, MiB, r.Host.LiveBytesAtEnd)
}

// TestHandleCallsListNoDevice: a map, an unmap and a release carry the
// calling thread's device (event.DeviceHandle), not the memory's, which
// the cuMemCreate named: only the create's device is listed.
func TestHandleCallsListNoDevice(t *testing.T) {
	const handle, addr, caller = 0xc0de, 0x7e00_0000_0000, 3
	s := eventtest.NewStream().Stack(1, "f", 1)
	s.Ev(event.Event{Time: 1, Addr: addr, Size: 8 * MiB, Stack: 1, Device: event.DeviceUnknown, Kind: event.KindReserve, API: event.APICuMemAddressReserve}).
		Ev(event.Event{Time: 2, Addr: handle, Size: 2 * MiB, Stack: 1, Device: 1, Kind: event.KindCreate, API: event.APICuMemCreate}).
		Ev(event.Event{Time: 3, Addr: addr, Size: 2 * MiB, Stream: handle, Stack: 1, Device: caller, Kind: event.KindMap, API: event.APICuMemMap}).
		Ev(event.Event{Time: 4, Addr: addr, Size: 2 * MiB, Stack: 1, Device: caller, Kind: event.KindUnmap, API: event.APICuMemUnmap}).
		Ev(event.Event{Time: 5, Addr: handle, Stack: 1, Device: caller, Kind: event.KindRelease, API: event.APICuMemRelease}).
		End(6)
	r := mustAnalyze(t, Options{}, s.Recs)
	var listed []int32
	for _, d := range r.Devices {
		listed = append(listed, d.Index)
	}
	assert.Equal(t, []int32{1}, listed)
	assert.Equal(t, 2*MiB, r.VMM.PhysicalPeakBytes, "the page was counted")
}

// TestDeviceInferredFromAddressRange: an allocation whose device was not
// seen (the thread chose it before an attach) takes the device whose
// address range holds it; between two devices' ranges it stays unknown.
func TestDeviceInferredFromAddressRange(t *testing.T) {
	s := eventtest.NewStream().Stack(1, "f", 1)
	const MiB = 1 << 20
	s.AllocOn(1, 0x10_0000_0000, MiB, 1, 100, 0) // device 0: [0x10_0000_0000, +3 MiB)
	s.AllocOn(2, 0x10_0020_0000, MiB, 1, 100, 0)
	s.AllocOn(3, 0x20_0000_0000, MiB, 1, 100, 1) // device 1: [0x20_0000_0000, +1 MiB)
	s.AllocOn(4, 0x10_0010_0000, 2*MiB, 1, 100, event.DeviceUnknown)
	s.AllocOn(5, 0x18_0000_0000, 4*MiB, 1, 100, event.DeviceUnknown)
	r := mustAnalyze(t, Options{}, s.End(10).Recs)

	assert.Equal(t, uint64(1), r.Run.DevicesInferred)
	live := map[int32]uint64{}
	for _, d := range r.Devices {
		live[d.Index] = d.LiveBytesAtEnd
	}
	// Device 0: its two allocations and the inferred one.
	assert.Equal(t, map[int32]uint64{-1: 4 * MiB, 0: 4 * MiB, 1: MiB}, live)
}
