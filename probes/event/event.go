package event

import (
	"fmt"
	"strings"
)

// Kind says what an Event did to memory.
type Kind uint8

// Kinds of event. The numbering is part of the trace format: append only.
const (
	KindInvalid Kind = iota
	// KindAlloc is a call that asked for memory. Ret says whether it got it;
	// a failed allocation (Ret != 0) is recorded but never live.
	KindAlloc
	// KindFree is a call that released memory at Addr.
	KindFree
	// KindHostAlloc and KindHostFree are pinned host memory
	// (cudaMallocHost, cuMemHostAlloc...): its own space, never device bytes.
	KindHostAlloc
	KindHostFree
	// KindReserve and KindUnreserve are virtual address space
	// (cuMemAddressReserve/Free): reserved, not used.
	KindReserve
	KindUnreserve
	// KindCreate and KindRelease are physical memory (cuMemCreate and
	// cuMemRelease). Addr is the allocation handle, not an address: it is
	// usage whether mapped or not.
	KindCreate
	KindRelease
	// KindMap and KindUnmap back a reserved range with physical memory
	// (cuMemMap/cuMemUnmap): Addr and Size are the range; for a map, Stream
	// carries the allocation handle mapped there.
	KindMap
	KindUnmap
	// KindSetDevice is a thread choosing its current device (cudaSetDevice,
	// cuCtxSetCurrent): Device is the device chosen. The probes send one
	// when the call changed the thread's device or context, or failed; a
	// cuCtxSetCurrent's is taken at its entry (Duration 0, Ret 0).
	KindSetDevice
	// KindOOMReport is a caching allocator's own report of a request it
	// could not serve, made just before it raises out-of-memory (block
	// layer; PyTorch's c10::reportOutOfMemoryToProfiler). It changes no
	// memory. Size is the request; Addr the bytes its blocks held then
	// (allocated) and Stream the bytes it had reserved, as the allocator
	// counts them; Device the allocator's device. Appended to the format:
	// older traces have none.
	KindOOMReport
	// KindScopeBegin and KindScopeEnd bracket a call of a framework
	// allocator function that gives memory back in bulk (block layer;
	// PyTorch's emptyCache, APIC10EmptyCache) on thread TID. They change no
	// memory. A begin is the call's entry and carries its Stack (the
	// function, then its caller outward); an end is one of its return
	// instructions. Addr is rsp at either, which is the same for the begin
	// and the end of one call: it pairs them, and an end whose Addr is
	// above a begin's also ends that one (an exception unwound through
	// it). The segment releases a thread makes inside a scope are the
	// scope caller's doing. Appended to the format: older traces have none.
	KindScopeBegin
	KindScopeEnd
)

var kindNames = [...]string{"invalid", "alloc", "free", "host_alloc", "host_free",
	"reserve", "unreserve", "create", "release", "map", "unmap", "set_device", "oom_report",
	"scope_begin", "scope_end"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Layer is the level of the memory stack an event was seen at (see DESIGN.md,
// "The memory model").
type Layer uint8

// Layers. The numbering is part of the trace format: append only.
const (
	LayerUnknown Layer = iota
	// LayerSegment is memory the process got from the CUDA runtime or driver.
	LayerSegment
	// LayerBlock is a framework allocator's block inside a segment.
	LayerBlock
	// LayerDevice is a device-wide figure (NVML).
	LayerDevice
)

var layerNames = [...]string{"unknown", "segment", "block", "device"}

func (l Layer) String() string {
	if int(l) < len(layerNames) {
		return layerNames[l]
	}
	return fmt.Sprintf("layer(%d)", uint8(l))
}

// API names the traced function that produced an event. The numbering is part
// of the trace format and of the BPF cookie: append only.
type API uint16

// APIs: the CUDA runtime (libcudart) then the driver (libcuda.so.1). The
// _ptsz variants are the per-thread default stream builds of the same call.
const (
	APIUnknown API = iota
	APICudaMalloc
	APICudaFree
	APICudaMallocAsync
	APICudaFreeAsync
	APICudaMallocFromPoolAsync
	APICudaMallocManaged
	APICudaMallocPitch
	APICudaMalloc3D
	APICudaMallocHost
	APICudaHostAlloc
	APICudaFreeHost
	APICudaSetDevice
	APICuMemAlloc
	APICuMemFree
	APICuMemAllocAsync
	APICuMemFreeAsync
	APICuMemAllocFromPoolAsync
	APICuMemAllocManaged
	APICuMemAllocPitch
	APICuMemAllocHost
	APICuMemHostAlloc
	APICuMemFreeHost
	APICuMemAddressReserve
	APICuMemAddressFree
	APICuMemCreate
	APICuMemRelease
	APICuMemMap
	APICuMemUnmap
	APICuCtxSetCurrent
	APICudaMallocAsyncPtsz
	APICudaFreeAsyncPtsz
	APICudaMallocFromPoolAsyncPtsz
	APICuMemAllocAsyncPtsz
	APICuMemFreeAsyncPtsz
	APICuMemAllocFromPoolAsyncPtsz
	// Block layer: a framework allocator's USDT probes.
	APIPyTorchMalloc // pytorch:malloc(ptr, device, size, stream) in libc10_cuda.so
	APIPyTorchFree   // pytorch:free(ptr)
	// Block layer: a function an allocator spec names (probes/allocspec:
	// XLA's BFC allocator, RMM's pools, user specs).
	APISpecAlloc // allocspec:alloc
	APISpecFree  // allocspec:free
	// APIC10ReportOOM is libc10.so's
	// c10::reportOutOfMemoryToProfiler(size, allocated, reserved, device),
	// which PyTorch's CUDA caching allocator calls at every out-of-memory
	// error before raising it (KindOOMReport).
	APIC10ReportOOM
	// APIC10EmptyCache is libc10_cuda.so's
	// c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::emptyCache(),
	// which torch.cuda.empty_cache() calls (through the CUDAAllocator
	// vtable) to give every cached segment back to CUDA (KindScopeBegin,
	// KindScopeEnd).
	APIC10EmptyCache
)

// apiNames are the exported symbol names, as pprof's api label shows them.
var apiNames = [...]string{"unknown", "cudaMalloc", "cudaFree",
	"cudaMallocAsync", "cudaFreeAsync", "cudaMallocFromPoolAsync", "cudaMallocManaged",
	"cudaMallocPitch", "cudaMalloc3D", "cudaMallocHost", "cudaHostAlloc", "cudaFreeHost",
	"cudaSetDevice",
	"cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocAsync", "cuMemFreeAsync", "cuMemAllocFromPoolAsync",
	"cuMemAllocManaged", "cuMemAllocPitch_v2", "cuMemAllocHost_v2", "cuMemHostAlloc", "cuMemFreeHost",
	"cuMemAddressReserve", "cuMemAddressFree", "cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap",
	"cuCtxSetCurrent",
	"cudaMallocAsync_ptsz", "cudaFreeAsync_ptsz", "cudaMallocFromPoolAsync_ptsz",
	"cuMemAllocAsync_ptsz", "cuMemFreeAsync_ptsz", "cuMemAllocFromPoolAsync_ptsz",
	"pytorch:malloc", "pytorch:free", "allocspec:alloc", "allocspec:free",
	"c10::reportOutOfMemoryToProfiler", "c10::cuda::CUDACachingAllocator::emptyCache"}

// Driver reports whether a is a driver API (libcuda) call.
func (a API) Driver() bool {
	return a >= APICuMemAlloc && a <= APICuCtxSetCurrent || a >= APICuMemAllocAsyncPtsz && a <= APICuMemAllocFromPoolAsyncPtsz
}

// Flags qualify an Event.
type Flags uint8

// Flags. The bits are part of the trace format: append only.
const (
	// FlagNested marks a call made inside another traced call on the same
	// thread (cuMemAlloc_v2 inside cudaMalloc): it belongs to its API's book
	// but is not counted again in the totals.
	FlagNested Flags = 1 << 0
	// FlagRestored marks an event replayed from a flight recorder's
	// checkpoint (see Checkpoint): an allocation still live when the
	// segments before were dropped, written again at the start of the next
	// segment so that a reader restores it. It was counted in the
	// checkpoint's window, not again.
	FlagRestored Flags = 1 << 1
)

func (a API) String() string {
	if int(a) < len(apiNames) {
		return apiNames[a]
	}
	return fmt.Sprintf("api(%d)", uint16(a))
}

// DeviceUnknown is the Device of an event whose device has not been seen yet.
// Unknown is not device 0.
const DeviceUnknown int32 = -1

// StackID refers to a Stack record earlier in the same stream. Zero means no
// stack was captured.
type StackID uint32

// Event is one traced call, decoded once. Every source (live probes, trace
// replay, snapshot import) produces this type.
type Event struct {
	// Time is when the call took effect, in ns, CLOCK_MONOTONIC, one clock
	// for all sources: a release (free, host free, unreserve, release,
	// unmap) at its entry, anything else at its return. A stream holds
	// events in that order (traces recorded before it: return order).
	Time     uint64
	Duration uint64 // ns spent inside the call, entry to return; 0 if only the entry was seen
	Addr     uint64 // pointer returned (alloc, Ret == 0) or released (free)
	Size     uint64 // bytes requested (alloc)
	Stream   uint64 // CUDA stream, 0 for the legacy default stream
	PID      uint32 // thread group id
	TID      uint32 // thread id
	Stack    StackID
	Ret      int32 // the call's return code (cudaError_t); 0 is success
	Device   int32 // device index, DeviceUnknown until seen
	Kind     Kind
	Layer    Layer
	API      API
	Flags    Flags
}

// OK reports whether the call succeeded.
func (e *Event) OK() bool { return e.Ret == 0 }

// Frame is one symbolized frame of a stack.
type Frame struct {
	Addr     uint64    // runtime address: the probed function's entry, then return addresses
	Mapping  MappingID // 0 when the address lies in no known mapping
	Function string    // demangled name; empty when unknown
	File     string    // source file from DWARF; empty when unknown
	Line     int64     // source line from DWARF; 0 when unknown
}

// Stack is a call stack, leaf first, interned by ID within one stream.
type Stack struct {
	ID     StackID
	PID    uint32
	Frames []Frame
}

// MappingID refers to a Mapping record earlier in the same stream; 0 is none.
type MappingID uint32

// Mapping is an executable file mapped into a traced process.
type Mapping struct {
	ID      MappingID
	PID     uint32
	Start   uint64 // runtime address of the mapping's first byte
	Limit   uint64 // runtime address one past its last byte
	Offset  uint64 // file offset of Start
	File    string
	BuildID string // hex GNU build ID, empty when the file has none
}

// Process describes a traced process.
type Process struct {
	PID     uint32
	PPID    uint32
	Command []string // argv as read from /proc/PID/cmdline or as launched
	Exe     string
	Time    uint64 // ns, when tracing of it started
	// Cgroup is the process's cgroup path (/proc/PID/cgroup: the v2 line,
	// else the first v1 hierarchy's), read when it was adopted, so that a
	// process gone before anyone looks again is still placed (its
	// container, its pod). Empty when unknown. Appended to the format:
	// older traces read with none.
	Cgroup string
	// Start is the process's start time (/proc/PID/stat field 22, clock
	// ticks since boot), read when it was adopted: with PID, it names one
	// process instance. 0 when unknown (gone already). Appended to the
	// format: older traces read with 0.
	Start uint64
	// FromStart says the process was traced from its first instruction:
	// launched by run, forked by a traced process, or started after an
	// attach --all or serve session began watching. Nothing it did predates
	// the trace. Appended to the format: older traces read with false.
	FromStart bool
}

// Library is a file whose functions were probed.
type Library struct {
	PID     uint32   // a process the library was found in
	Path    string   // path as mapped in that process
	BuildID string   // hex GNU build ID, empty when none
	Symbols []string // functions probed in it
	// Skipped are functions (CUDA API functions, or ones an allocator spec
	// named) that were not probed because their returns cannot all be
	// found, one line each saying why ("ns::Pool::alloc(unsigned long): jumps out
	// of the function at 0x1234: to 0x5678"). Appended to the format:
	// older traces read with none.
	Skipped []string
	// StrippedRuntime: the file holds a CUDA runtime linked in statically
	// with its symbols stripped (a release build, a wheel's extension
	// shrunk with --strip-unneeded, the private runtime inside cuBLAS):
	// its cudaMalloc calls cannot be probed, only the driver's under them.
	// Symbols is then empty. Appended to the format: older traces read
	// with false.
	StrippedRuntime bool
}

// Lost carries the running total of records lost: refused by the full
// ring buffer, returns without their call, or malformed (Causes). The last
// Lost record of a stream is the total.
type Lost struct {
	Time  uint64
	Total uint64
	// Late is the running total of events that reached the recorder too
	// late to be placed in effect order (a release that took longer than
	// the reorder window, see probes/reorder.go): they are in the stream,
	// where they arrived, and may be misordered against other calls on the
	// same address. Appended to the format: older traces read with 0.
	Late uint64
	// Causes splits Total by why the records were lost, as running
	// totals too. Appended to the format: older traces read all zero, and
	// then the causes are not known.
	Causes LostCauses
}

// LostCauses are the reasons records are lost: their sum is Lost.Total.
type LostCauses struct {
	// RingFull counts records the BPF ring buffer refused (it was full:
	// user space read too slowly for the rate of calls).
	RingFull uint64
	// Unpaired counts returns seen without their call's entry: a call in
	// flight at attach, or an in-flight slot evicted.
	Unpaired uint64
	// Malformed counts records user space could not decode: shorter than
	// their kind's size, or of a kind it does not know.
	Malformed uint64
}

// Known reports whether the causes were recorded (a trace from before
// they were has none) and add up to total.
func (c LostCauses) Known(total uint64) bool {
	return total > 0 && c.RingFull+c.Unpaired+c.Malformed == total
}

// End closes a stream that stopped cleanly. A stream without End was cut
// short (a crash, a kill): everything before the cut is still valid.
type End struct {
	Time     uint64
	Reason   string // "exited", "signal", "duration", "target exited", ...
	ExitCode int    // the launched command's exit code in run mode, else 0
	// StopsCounted says Stops was recorded: Stops lists every traced
	// process the loader probe stopped at least once (a stop is seen by
	// the process: probes/preload.go), and a process not listed was
	// never stopped. Appended to the format: older traces read false.
	StopsCounted bool
	Stops        []ProcessStops
}

// ProcessStops is how many times the session stopped one process at a
// library load or exec, for user space to probe what it mapped.
type ProcessStops struct {
	PID   uint32
	Start uint64 // the process's start time, as Process.Start
	Count uint64
}

// Header opens every stream.
type Header struct {
	Version  uint16   // trace format version
	Tool     string   // "vramprof <version>"
	Mode     string   // "run", "attach", "import"
	Command  []string // what was run or attached to
	PID      uint32   // the root target
	Start    uint64   // ns, CLOCK_MONOTONIC, when recording began
	WallTime int64    // Unix ns at Start, for humans only
	Host     string
}

// Identity names a flight recorder's segment (vramprof run --max-trace):
// which recording it belongs to, where it stands in it, and what the
// segment before it ended with, so that a reader can tell a gap, a segment
// of another recording or a repeated one from the segments of one
// recording, and a segment cut short from a whole one. It is written right
// after the Header of a segment and read with it (Reader.Identity): it is
// not a record of the stream, and Next never returns it. Segments written
// before it was added have none.
type Identity struct {
	// Recording is random, the same in every segment of one recording
	// (32 hex digits).
	Recording string
	// Segment numbers the recording's segments from 1.
	Segment uint64
	// PrevFrames and PrevSum are what the segment before this one ended
	// with (Writer.Frames and Writer.Sum after its last record); zero in
	// segment 1.
	PrevFrames uint64
	PrevSum    uint32
}

// DeviceInfo describes one GPU as NVML sees it (the device layer). The NVML
// sampler writes one per device when it starts, before that device's first
// Sample.
type DeviceInfo struct {
	// Index is the NVML device index (PCI bus order), as Sample.Device
	// uses it. CUDA's numbering (Event.Device) can differ: CUDA_DEVICE_ORDER
	// and CUDA_VISIBLE_DEVICES renumber devices; UUID identifies one in both.
	Index      int32
	Name       string // product name, "NVIDIA A100-SXM4-40GB"
	UUID       string // "GPU-..."; stable across reboots, unlike Index
	TotalBytes uint64 // memory capacity
	Time       uint64 // ns, CLOCK_MONOTONIC, when it was read
	// ProcessesNote is empty while NVML lists the device's processes;
	// otherwise the one-line reason it has no per-process figure for it
	// (MIG partitions, vGPU guests), which a report prints verbatim. The
	// sampler writes the DeviceInfo again when it finds that out.
	ProcessesNote string
	// PCIBusID is the device's PCI address ("00000000:3B:00.0"),
	// dcgm-exporter's pci_bus_id label; empty when NVML does not say.
	PCIBusID string
}

// Sample is one device's memory as NVML reported it at Time (the device
// layer, see DESIGN.md "The memory model"). These are the driver's figures,
// not traced calls: the gap between a process's UsedBytes and its traced
// segments is context, library workspaces and memory allocated before
// attach.
type Sample struct {
	Time       uint64 // ns, CLOCK_MONOTONIC
	Device     int32  // NVML device index: see DeviceInfo.Index
	TotalBytes uint64
	// UsedBytes is all processes and the driver. With NVML's v2 memory
	// info (drivers from r510) it excludes memory the driver reserves, so
	// UsedBytes + FreeBytes can be less than TotalBytes.
	UsedBytes uint64
	FreeBytes uint64
	// Processes is per-process use of this device, by PID (as the host
	// sees it), limited to the traced processes when the sampler was asked
	// to. Nil when no process uses the device or NVML cannot list them.
	Processes []ProcessUsage
}

// ProcessUsage is one process's memory on one device, per NVML.
type ProcessUsage struct {
	PID       uint32
	UsedBytes uint64 // 0 when NVML cannot tell (some containers and virtualised GPUs)
}

// NVMLStatus records whether device-layer figures are available. A stream
// recorded with NVML enabled carries one when sampling starts (Available)
// and one whenever that changes; a stream without any NVMLStatus was
// recorded with NVML turned off.
type NVMLStatus struct {
	Time      uint64
	Available bool
	// Reason is empty when Available; otherwise the one-line message a
	// report prints verbatim, "NVML unavailable: nvmlInit: Driver Not Loaded".
	Reason string
}

// Interpreter says what a traced process runs whose frames the stacks
// include (CPython), or why they do not: a stream without one for a process
// has native stacks only because none was found (or --python off).
type Interpreter struct {
	PID     uint32
	Name    string // "CPython"
	Version string // "3.11.2"
	Path    string // the file holding the interpreter's state, as mapped
	// Note is empty when its frames are recorded; otherwise the one-line
	// reason they are not, which a report prints verbatim.
	Note string
}

// TestPhase says which pytest test a process runs from Time on: pytest
// sets the environment variable PYTEST_CURRENT_TEST to "<nodeid>
// (<phase>)" before each phase of a test and removes it after the
// teardown, and the probes see both (libc's setenv and unsetenv). It comes
// in the stream in effect order with the process's events: every event
// after it and before the process's next TestPhase was made while it held.
type TestPhase struct {
	Time     uint64 // ns, the trace clock
	PID, TID uint32
	// NodeID is pytest's node id of the test, "path::[Class::]name[params]";
	// "" once the variable is removed: no test runs.
	NodeID string
	// Phase is "setup", "call" or "teardown"; "" when NodeID is, or when
	// the value did not end in " (phase)" (then NodeID is the whole value).
	Phase string
}

// ParseTestPhase splits PYTEST_CURRENT_TEST's value, "<nodeid> (<phase>)",
// into a TestPhase's NodeID and Phase; "" is no test.
func ParseTestPhase(value string) (nodeID, phase string) {
	if i := strings.LastIndex(value, " ("); i >= 0 && strings.HasSuffix(value, ")") {
		return value[:i], value[i+2 : len(value)-1]
	}
	return value, ""
}

// Record is one element of an event stream: *Header, *Event, *Stack,
// *Mapping, *Process, *Library, *Lost, *End, *DeviceInfo, *Sample,
// *NVMLStatus, *Interpreter or *TestPhase.
type Record interface {
	isRecord()
}

func (*Header) isRecord()     {}
func (*Checkpoint) isRecord() {}
func (*Event) isRecord()      {}
func (*Stack) isRecord()      {}
func (*Mapping) isRecord()    {}
func (*Process) isRecord()    {}
func (*Library) isRecord()    {}
func (*Lost) isRecord()       {}
func (*End) isRecord()        {}

func (*DeviceInfo) isRecord()  {}
func (*Sample) isRecord()      {}
func (*Interpreter) isRecord() {}
func (*NVMLStatus) isRecord()  {}
func (*TestPhase) isRecord()   {}

// Checkpoint opens a flight recorder's segment (vramprof run --max-trace):
// it summarises every event of the segments before it, which may have been
// deleted since. It follows the segment's descriptive records (libraries,
// mappings, stacks, processes, devices, still referenced, and the first
// and latest TestPhase of the pytest test each process runs) and is followed by
// Live events flagged FlagRestored: the allocations still live at the cut,
// in stream order, so that a reader starting at this segment restores them
// exactly. A reader that reads the segment before it too skips both.
type Checkpoint struct {
	// Time is the time of the last event summarised.
	Time uint64
	// Segment numbers the segments of a recording from 1; the first one,
	// which starts the recording, has no checkpoint.
	Segment uint64
	// Events counts the events summarised: every event before this
	// segment, the restored ones included.
	Events uint64
	// FirstTime is the time of the first event summarised.
	FirstTime uint64
	// Live is how many FlagRestored events follow.
	Live uint64
	// Totals are the summarised figures per process and scope, then (PID
	// 0, All) per scope over every process. Allocations and
	// AllocatedBytes leave out the allocations restored.
	Totals []CheckpointTotals
	// Peaks are what was live at the peaks of Totals whose stacks a
	// report shows, by allocation class: each process's in each scope
	// (not per device, not in a book), and each device's over every
	// process. A peak reached after the checkpoint replaces its set.
	// Absent in checkpoints written before it was added.
	Peaks []CheckpointPeak
	// TimelineLevel and Timelines are each process's live bytes over the
	// summarised stretch, per layer, memory (Host) and device, downsampled
	// as the analysis downsamples its timelines: on a grid of
	// TimelineBuckets buckets from Header.Start, 1024<<TimelineLevel ns
	// wide. Absent in checkpoints written before they were added.
	TimelineLevel uint64
	Timelines     []CheckpointTimeline
}

// TimelineBuckets is how many buckets a Checkpoint's timeline grid holds
// at most: half of the analysis's default timeline points (one bucket
// gives a low and a high point).
const TimelineBuckets = 256

// CheckpointTimeline is one process's timeline in a Checkpoint, in one
// layer and memory (device and physical, or Host) on one device.
type CheckpointTimeline struct {
	PID     uint32
	Layer   Layer
	Host    bool
	Device  int32
	Buckets []TimelineBucket
}

// TimelineBucket is one bucket of a CheckpointTimeline, Index buckets from
// the grid's origin: the lowest and the highest live bytes in it, each with
// the time it was first reached.
type TimelineBucket struct {
	Index             uint64
	MinTime, MinBytes uint64
	MaxTime, MaxBytes uint64
}

// CheckpointPeak is the live set at one scope's peak in a Checkpoint. The
// scope is named as its CheckpointTotals entry names it: PID (or All),
// Layer and Host; or, with PerDevice and All, one Device over every
// process. Its PeakBytes and PeakTime are that entry's.
type CheckpointPeak struct {
	PID       uint32
	All       bool
	Layer     Layer
	Host      bool
	PerDevice bool
	Device    int32
	// At is the allocation that reached the peak (a process's scopes
	// only): its Addr, Size, Device, API, Layer and Stack; its Time is the
	// peak's.
	At Event
	// Live is what was live at the peak, one entry per class.
	Live []PeakClass
}

// PeakClass is one allocation class live at a peak: Count allocations of
// Size bytes by process PID, made by the same call (Kind, API) at the same
// Stack on the same Device.
type PeakClass struct {
	PID    uint32
	Stack  StackID
	Device int32
	Kind   Kind
	API    API
	Size   uint64
	Count  uint64
}

// Books of a CheckpointTotals.
const (
	BookNone    uint8 = iota // the scope's totals
	BookRuntime              // libcudart's calls
	BookDriver               // libcuda's calls
)

// CheckpointTotals are one scope's figures in a Checkpoint: the segment
// layer's device or pinned host memory (Host), or the block layer; or,
// with Book set, one API's book (BookRuntime or BookDriver: every call of
// that API, nested or not, physical memory included).
type CheckpointTotals struct {
	PID   uint32
	All   bool
	Layer Layer
	Host  bool
	Book  uint8
	// PerDevice entries hold one device's peak of device memory (in one
	// process, or with All in every one) and nothing else.
	PerDevice      bool
	Device         int32
	Allocations    uint64
	Frees          uint64
	AllocatedBytes uint64
	FreedBytes     uint64
	Failed         uint64
	FailedBytes    uint64
	UnknownFrees   uint64
	FailedFrees    uint64
	// PeakBytes is the most bytes live at once in the summarised stretch,
	// first reached at PeakTime.
	PeakBytes uint64
	PeakTime  uint64
}
