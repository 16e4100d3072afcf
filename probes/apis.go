//go:build linux

package probes

import "github.com/vramprof/vramprof/probes/event"

// shape says how the BPF programs read a function's arguments and result;
// the values are bpf/vramprof.bpf.c's enum shape, generated into
// bpf_x86_bpfel.go as bpfShape.
type shape = uint8

// progKind says which BPF programs serve a probed function.
type progKind uint8

const (
	// progCall: call_enter at the entry, with the cookie naming API, kind
	// and shape, and call_return at each return instruction (returns.go).
	// Never a uretprobe.
	progCall progKind = iota + 1
	// progLoader: the dynamic loader's debugger rendezvous, entry only.
	progLoader
	// progUSDT: a framework allocator's USDT probe (block layer), entry
	// only, attached with its semaphore's reference counter.
	progUSDT
	// progSpec: a function an allocator spec names (block layer):
	// spec_enter at its entry and, when its pointer is its result,
	// spec_return at each of its return instructions. Never a uretprobe.
	progSpec
)

// probeSpec names one function to probe and how.
type probeSpec struct {
	Symbol string
	API    event.API
	Kind   event.Kind
	Shape  shape
	Prog   progKind
	// AtEntry, for progCall: call_enter only, no call_return at the
	// function's return instructions (CALL_F_AT_ENTRY): its work is done
	// at its entry, and its result is not waited for.
	AtEntry bool
}

// cookie is the attach cookie call_enter reads (see the BPF contract
// header): API in bits 0-15, kind in 16-23, shape in 24-31, CALL_F_* from
// bit 32 (CALL_F_AT_ENTRY here; CALL_F_TAILS is the attacher's).
func (p probeSpec) cookie() uint64 {
	c := uint64(p.API) | uint64(p.Kind)<<16 | uint64(p.Shape)<<24
	if p.AtEntry {
		c |= uint64(bpfCallFlagsCALL_F_AT_ENTRY) << 32
	}
	return c
}

func call(sym string, api event.API, kind event.Kind, sh bpfShape) probeSpec {
	return probeSpec{Symbol: sym, API: api, Kind: kind, Shape: shape(sh), Prog: progCall}
}

// atEntry is p probed at its entry only (probeSpec.AtEntry).
func atEntry(p probeSpec) probeSpec {
	p.AtEntry = true
	return p
}

// cudaProbes are the CUDA runtime (libcudart) and driver (libcuda) functions
// traced, in every file that defines them. Only the 64-bit _v2 driver names:
// the unsuffixed legacy ones take 32-bit sizes. The CUDA headers'
// signatures are in the BPF contract's enum shape.
var cudaProbes = []probeSpec{
	// Runtime.
	call("cudaMalloc", event.APICudaMalloc, event.KindAlloc, bpfShapeSHAPE_OUT),
	call("cudaFree", event.APICudaFree, event.KindFree, bpfShapeSHAPE_PTR),
	call("cudaMallocAsync", event.APICudaMallocAsync, event.KindAlloc, bpfShapeSHAPE_OUT_STREAM3),
	call("cudaMallocAsync_ptsz", event.APICudaMallocAsyncPtsz, event.KindAlloc, bpfShapeSHAPE_OUT_STREAM3),
	call("cudaFreeAsync", event.APICudaFreeAsync, event.KindFree, bpfShapeSHAPE_PTR_STREAM),
	call("cudaFreeAsync_ptsz", event.APICudaFreeAsyncPtsz, event.KindFree, bpfShapeSHAPE_PTR_STREAM),
	call("cudaMallocFromPoolAsync", event.APICudaMallocFromPoolAsync, event.KindAlloc, bpfShapeSHAPE_OUT_STREAM4),
	call("cudaMallocFromPoolAsync_ptsz", event.APICudaMallocFromPoolAsyncPtsz, event.KindAlloc, bpfShapeSHAPE_OUT_STREAM4),
	call("cudaMallocManaged", event.APICudaMallocManaged, event.KindAlloc, bpfShapeSHAPE_OUT),
	call("cudaMallocPitch", event.APICudaMallocPitch, event.KindAlloc, bpfShapeSHAPE_PITCH),
	call("cudaMalloc3D", event.APICudaMalloc3D, event.KindAlloc, bpfShapeSHAPE_3D),
	call("cudaMallocHost", event.APICudaMallocHost, event.KindHostAlloc, bpfShapeSHAPE_OUT),
	call("cudaHostAlloc", event.APICudaHostAlloc, event.KindHostAlloc, bpfShapeSHAPE_OUT),
	call("cudaFreeHost", event.APICudaFreeHost, event.KindHostFree, bpfShapeSHAPE_PTR),
	call("cudaSetDevice", event.APICudaSetDevice, event.KindSetDevice, bpfShapeSHAPE_SET_DEVICE),

	// Driver.
	call("cuMemAlloc_v2", event.APICuMemAlloc, event.KindAlloc, bpfShapeSHAPE_OUT),
	call("cuMemFree_v2", event.APICuMemFree, event.KindFree, bpfShapeSHAPE_PTR),
	call("cuMemAllocAsync", event.APICuMemAllocAsync, event.KindAlloc, bpfShapeSHAPE_OUT_STREAM3),
	call("cuMemAllocAsync_ptsz", event.APICuMemAllocAsyncPtsz, event.KindAlloc, bpfShapeSHAPE_OUT_STREAM3),
	call("cuMemFreeAsync", event.APICuMemFreeAsync, event.KindFree, bpfShapeSHAPE_PTR_STREAM),
	call("cuMemFreeAsync_ptsz", event.APICuMemFreeAsyncPtsz, event.KindFree, bpfShapeSHAPE_PTR_STREAM),
	call("cuMemAllocFromPoolAsync", event.APICuMemAllocFromPoolAsync, event.KindAlloc, bpfShapeSHAPE_OUT_STREAM4),
	call("cuMemAllocFromPoolAsync_ptsz", event.APICuMemAllocFromPoolAsyncPtsz, event.KindAlloc, bpfShapeSHAPE_OUT_STREAM4),
	call("cuMemAllocManaged", event.APICuMemAllocManaged, event.KindAlloc, bpfShapeSHAPE_OUT),
	call("cuMemAllocPitch_v2", event.APICuMemAllocPitch, event.KindAlloc, bpfShapeSHAPE_PITCH),
	call("cuMemAllocHost_v2", event.APICuMemAllocHost, event.KindHostAlloc, bpfShapeSHAPE_OUT),
	call("cuMemHostAlloc", event.APICuMemHostAlloc, event.KindHostAlloc, bpfShapeSHAPE_OUT),
	call("cuMemFreeHost", event.APICuMemFreeHost, event.KindHostFree, bpfShapeSHAPE_PTR),
	call("cuMemAddressReserve", event.APICuMemAddressReserve, event.KindReserve, bpfShapeSHAPE_OUT),
	call("cuMemAddressFree", event.APICuMemAddressFree, event.KindUnreserve, bpfShapeSHAPE_PTR_SIZE),
	call("cuMemCreate", event.APICuMemCreate, event.KindCreate, bpfShapeSHAPE_CREATE),
	call("cuMemRelease", event.APICuMemRelease, event.KindRelease, bpfShapeSHAPE_PTR),
	call("cuMemMap", event.APICuMemMap, event.KindMap, bpfShapeSHAPE_MAP),
	call("cuMemUnmap", event.APICuMemUnmap, event.KindUnmap, bpfShapeSHAPE_PTR_SIZE),
	// At its entry only: a runtime may make its context current around
	// every call, and a return probe would double what that costs (see
	// ctx_set in bpf/vramprof/calls.h for what a failure does).
	atEntry(call("cuCtxSetCurrent", event.APICuCtxSetCurrent, event.KindSetDevice, bpfShapeSHAPE_CTX_SET)),
	// Contexts to devices, for cuCtxSetCurrent: learned, never sent (a
	// context cuCtxCreate_v2 makes is its thread's current one from its
	// return). The kind only has to differ from idle.
	call("cuDevicePrimaryCtxRetain", event.APIUnknown, event.KindSetDevice, bpfShapeSHAPE_CTX_RETAIN),
	call("cuCtxCreate_v2", event.APIUnknown, event.KindSetDevice, bpfShapeSHAPE_CTX_CREATE),
	// At its entry only: the context is forgotten, so that a (failing)
	// cuCtxSetCurrent of it names no device (ctx_drop in
	// bpf/vramprof/calls.h). Never sent.
	atEntry(call("cuCtxDestroy_v2", event.APIUnknown, event.KindSetDevice, bpfShapeSHAPE_CTX_DESTROY)),
}

// usdtProbes are the block-layer probes: PyTorch's caching allocator
// (libc10_cuda.so, PyTorch 2.1+) announces every block it hands out and
// takes back. Arguments by position: malloc(ptr, device, size, stream),
// free(ptr).
var usdtProbes = []struct {
	Provider, Name string
	API            event.API
	Kind           event.Kind
}{
	{"pytorch", "malloc", event.APIPyTorchMalloc, event.KindAlloc},
	{"pytorch", "free", event.APIPyTorchFree, event.KindFree},
}

// oomReportProbes are functions a framework's caching allocator calls
// when it gives up on a request, just before it raises out-of-memory (block
// layer): the request the segment layer cannot see, since the note that
// announces a block (pytorch:malloc) fires on success only. They are
// probed at their entry by usdt_block, as a USDT site without a semaphore
// whose arguments are the function's registers (System V x86-64); the
// cookie says alloc so that it reads all four, and decodeRecord makes the
// record an event.KindOOMReport by its API. Positions as usdt_block reads
// them: 0 the event's Addr, 1 its Device, 2 its Size, 3 its Stream.
var oomReportProbes = []struct {
	Symbol string // mangled, as the file's dynamic symbol table has it
	API    event.API
	Args   string // USDT argument specs, by position
}{
	// c10/core/Allocator.cpp (libc10.so), PyTorch 2.0+:
	//   void reportOutOfMemoryToProfiler(int64_t alloc_size,
	//       size_t total_allocated, size_t total_reserved, Device device);
	// called by CUDACachingAllocator's malloc with the rounded request and
	// its allocated_bytes and reserved_bytes (aggregate, current). Device
	// is two bytes in one register: the type in cl, the index in ch.
	{"_ZN3c1027reportOutOfMemoryToProfilerElmmNS_6DeviceE", event.APIC10ReportOOM,
		"8@%rsi -1@%ch -8@%rdi 8@%rdx"},
}

// loaderProbe is the rendezvous function glibc's ld.so calls around every
// change to the link map (r_debug protocol). A debugger sets its breakpoint
// there; so do we, to catch a dlopen of the CUDA runtime before its first
// call.
var loaderProbe = probeSpec{Symbol: "_dl_debug_state", Prog: progLoader}
