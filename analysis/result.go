package analysis

import "github.com/vramprof/vramprof/probes/event"

// Result is everything the analysis learnt from one event stream. It is plain
// data: profile/ and report/ read it and never change it. Times are absolute
// nanoseconds on the stream's clock (CLOCK_MONOTONIC); Run.Start is the zero
// that renderers subtract (see Result.Rel). Every slice is sorted in a fixed
// order so that a replay of the same stream gives identical renderings.
type Result struct {
	// Run holds the facts about the recording itself.
	Run Run
	// Totals counts device memory at the segment layer (the CUDA API), all
	// processes and devices together. This is report.json's "totals".
	Totals Totals
	// Blocks counts the block layer (a framework's caching allocator). It is
	// nil when no block-layer event was seen, and then report.json has no
	// "blocks".
	Blocks *Totals
	// Books are the per-API ledgers of device memory (allocations and
	// physical memory), all processes: every call of the runtime's and of
	// the driver's APIs, nested or not. They are shown side by side and
	// never summed: a cudaMalloc and the cuMemAlloc_v2 inside it are one
	// allocation in each book and one in Totals.
	Books Books
	// Host counts pinned host memory (cudaMallocHost, cuMemHostAlloc...),
	// all processes: its own space, never part of Totals or Devices. Zero
	// when none was traced.
	Host Totals
	// VMM is the virtual memory API's figures (cuMemAddressReserve,
	// cuMemCreate, cuMemMap...), all processes; nil when no such call was
	// traced.
	VMM *VMM
	// LostEvents is the last running total of records the kernel could not
	// deliver. Every output carries it.
	LostEvents uint64
	// LostCauses splits LostEvents by cause (all zero when the trace did
	// not record them: see event.LostCauses.Known).
	LostCauses event.LostCauses
	// LateEvents is the last running total of events that reached the
	// recorder too late to be placed in effect order (event.Lost.Late):
	// they are counted, where they arrived, and may be misordered against
	// other calls on the same address. Every output carries it.
	LateEvents uint64
	// NVML is the device layer's status (see doc.go, "The device layer");
	// nil when the stream has no NVML record (recorded with NVML off).
	NVML *NVML
	// Devices has one entry per device seen at the segment layer or in an
	// NVML record, sorted by index (DeviceUnknown, -1, first).
	Devices []Device
	// Processes has one entry per traced process instance, sorted by PID
	// then Start: a reused PID has one entry per instance.
	Processes []Process
	// Classes are the allocation classes: one per (pid, stack, device, API,
	// layer, size), the unit of a pprof sample. Sorted by that key.
	Classes []Class
	// Stacks holds every stack record of the stream, rendered, by ID. Stack 0
	// ("no stack captured") is always present.
	Stacks map[event.StackID]*Stack
	// Mappings are the stream's executable mappings, sorted by ID.
	Mappings []event.Mapping
	// Timelines has live bytes over time per process, layer and device,
	// downsampled; sorted by (pid, layer, device).
	Timelines []Timeline
	// Pools are the caching allocators seen through their block layer,
	// one per process and device, sorted by (pid, start, device); empty
	// when no block layer was traced.
	Pools []Pool
	// Findings are ranked by bytes at stake, largest first.
	Findings []Finding
}

// Run is what the stream's Header, Process, Library and End records said
// about the recording.
type Run struct {
	Tool     string   // "vramprof <version>" from the Header
	Version  uint16   // trace format version
	Mode     string   // "run", "attach", "import"
	Command  []string // what was run or attached to
	PID      uint32   // the root target
	Host     string   // host name, for humans
	WallTime int64    // Unix ns at Start, for humans only
	// Start is the time origin: the Header's Start, or the first event's time
	// when the stream has no Header.
	Start uint64
	// End is the End record's time, or the latest time seen when the stream
	// was cut short.
	End uint64
	// Duration is End - Start.
	Duration uint64
	// Ended reports whether the stream closed with an End record. False means
	// it was cut short (crash, kill) and the results cover what came before.
	Ended     bool
	EndReason string // End.Reason; empty when not Ended
	// Moment is set on a moment report: the analysis of a recording's
	// trace up to a moment (an out-of-memory failure, a SIGUSR1) while the
	// recording went on. Its End is then the moment, not the end of the
	// run. The analyzer never sets it: the recorder does, on the result.
	Moment   *Moment
	ExitCode int // End.ExitCode; the launched command's exit code in run mode
	// Libraries are the files whose functions were probed, in stream order
	// with duplicates (same PID and path) dropped.
	Libraries []event.Library
	// Interpreters are the language runtimes whose frames the stacks
	// include, or the notes saying why not (event.Interpreter), in stream
	// order.
	Interpreters []event.Interpreter
	// Events counts the *Event records seen.
	Events uint64
	// NestedEvents counts the events made inside another traced call
	// (event.FlagNested): they are in the Books only.
	NestedEvents uint64
	// DeviceSwitches counts the set-device events (cudaSetDevice,
	// cuCtxSetCurrent): informational. The probes send one only for a
	// call that changed its thread's device or context, or failed.
	DeviceSwitches uint64
	// DevicesInferred counts allocations whose device was unknown (the
	// thread chose it before tracing began) and was inferred from the
	// address ranges the process's known devices handed out.
	DevicesInferred uint64
	// Flight is set when the stream began at a flight recorder's
	// checkpoint (vramprof run --max-trace): the events before it were
	// dropped and are summarised.
	Flight *Flight
}

// Flight describes a stream kept by a flight recorder: the last stretch
// of the events, after a checkpoint that summarises the ones before it.
// Live allocations, the totals' counts and bytes (per process and
// overall), the API books, and peak bytes and time (per process, per
// device, overall) are exact over the whole run, and so are the stacks
// live at each peak and the timelines when the checkpoint carries them
// (PeakStacks, Timelines); what the summarised stretch did beyond them
// (spikes, churn, fragmentation, iterations, the VMM's call counts and
// peaks) is not in the results.
type Flight struct {
	// Segment is the checkpoint's segment: the first kept.
	Segment uint64
	// PeakStacks tells that the checkpoint carried what was live at its
	// peaks (event.Checkpoint.Peaks): the stacks at a peak before the
	// window are exact. Checkpoints written before they were added do not.
	PeakStacks bool
	// Timelines tells that the checkpoint carried the timelines of the
	// stretch it summarised (event.Checkpoint.Timelines): the timelines
	// cover the whole run, at the resolution of the default
	// TimelinePoints or coarser.
	Timelines bool
	// SummarisedEvents counts the events before the window, summarised in
	// the checkpoint; Restored the live allocations among them, replayed
	// from it.
	SummarisedEvents uint64
	Restored         uint64
	// FirstTime and CutTime are the times of the first and the last event
	// summarised.
	FirstTime, CutTime uint64
}

// Rel converts an absolute stream time into nanoseconds since Run.Start. A
// time before Start gives 0.
func (r *Result) Rel(t uint64) uint64 {
	if t < r.Run.Start {
		return 0
	}
	return t - r.Run.Start
}

// Totals counts one layer of memory. The first eight fields are report.json's
// "totals"; the others explain them.
type Totals struct {
	// Allocations counts successful allocations (Ret 0, Size > 0, Addr != 0).
	Allocations uint64
	// Frees counts frees that released a live allocation.
	Frees uint64
	// FailedAllocations counts allocation calls that returned an error; they
	// are never live.
	FailedAllocations uint64
	// UnknownFrees counts frees of an address not live in the model, usually
	// memory allocated before attach. Not an error then; in a process traced
	// from its start nothing predates tracing, and it is an anomaly (a
	// missed or misordered event).
	UnknownFrees uint64
	// LostEvents is the stream's lost-record total (the same for every layer).
	LostEvents uint64
	// AllocatedBytes sums the sizes of successful allocations.
	AllocatedBytes uint64
	// PeakBytes is the most bytes live at once, all processes and devices
	// together; PeakTime is when it was first reached.
	PeakBytes uint64
	PeakTime  uint64
	// LiveBytesAtEnd is what was still live when the stream ended.
	LiveBytesAtEnd uint64

	// LiveAllocationsAtEnd counts the allocations still live at the end.
	LiveAllocationsAtEnd uint64
	// FreedBytes sums the sizes released by Frees.
	FreedBytes uint64
	// FailedBytes sums the sizes that failed allocations asked for.
	FailedBytes uint64
	// NullFrees counts frees of address 0 (cudaFree(NULL)): ignored.
	NullFrees uint64
	// ZeroSizeAllocations counts successful calls with Size 0: not allocations.
	ZeroSizeAllocations uint64
	// ReplacedAllocations counts allocations returned at an address that was
	// already live: a free was missed (lost events, an untraced API). The old
	// allocation is dropped, the new one replaces it. An anomaly.
	ReplacedAllocations uint64
	// FailedFrees counts frees that returned an error; they free nothing.
	FailedFrees uint64
	// IgnoredEvents counts events the model does not account: an unknown
	// kind, the device layer (NVML samples), an alloc with Ret 0 but Addr 0.
	IgnoredEvents uint64
}

// Device is one GPU's device memory at the segment layer (allocations and
// physical memory, never pinned host memory), all processes together. Every
// device index any segment-layer event carried is listed, with zeros when
// nothing was allocated on it.
type Device struct {
	// Index is the device index; DeviceUnknown (-1) gathers allocations made
	// before the device was known, and is listed whenever an event carried
	// it.
	Index          int32
	PeakBytes      uint64
	PeakTime       uint64
	LiveBytesAtEnd uint64
	// PeakStacks is the live set at the device's peak (all processes) by
	// stack, largest first; stack IDs are the stream's, unique across
	// processes.
	PeakStacks []StackUsage
	// CapacityBytes is the device's memory size; 0 when unknown (NVML not
	// sampled).
	CapacityBytes uint64
	// Name and UUID are NVML's ("NVIDIA A100-SXM4-40GB", "GPU-..."); empty
	// when unknown.
	Name string
	UUID string
	// PCIBusID is NVML's PCI address of the device ("00000000:3B:00.0");
	// empty when unknown.
	PCIBusID string
	// NVML is what NVML's samples of the device said; nil when none came.
	//
	// NVML numbers devices in PCI bus order, CUDA (Index, from the traced
	// calls) as CUDA_DEVICE_ORDER and CUDA_VISIBLE_DEVICES say. The trace
	// knows no CUDA UUID, so the NVML device of the same index is taken:
	// when the two orders differ, these figures are another GPU's.
	NVML *DeviceNVML
}

// DeviceNVML is one device's NVML figures, next to the traced ones.
type DeviceNVML struct {
	// Samples counts the device's NVML samples.
	Samples uint64
	// AtPeak is the latest sample at or before the device's traced peak
	// (Device.PeakTime); nil when nothing was traced on the device or no
	// sample came before its peak.
	AtPeak *DeviceSample
	// Max is the sample with the most used bytes (the first, on a tie).
	Max DeviceSample
	// Last is the latest sample.
	Last DeviceSample
}

// DeviceSample is one NVML sample of a device: every process's memory and
// the driver's, not only the traced ones.
type DeviceSample struct {
	Time       uint64
	UsedBytes  uint64
	FreeBytes  uint64
	TotalBytes uint64
}

// NVML says whether device-layer figures exist and how sampling went.
type NVML struct {
	// Available is true when sampling started (some NVMLStatus said so).
	// When false, Reason says why, without the "NVML unavailable: " that
	// every rendering puts before it, and no figure comes from NVML.
	Available bool
	Reason    string
	// Samples counts the Sample records (one per device per tick).
	Samples uint64
	// Interruptions counts the times sampling failed after it started
	// (a status turning unavailable); LastError is the last such reason.
	Interruptions uint64
	LastError     string
	// Notes are one line each about figures NVML could not give while it
	// sampled, by device: "NVML device 0: per-process figures not
	// available: ..." (its process list not supported). Empty when not
	// Available.
	Notes []string
}

// NVMLUnavailablePrefix starts every rendering of NVML.Reason.
const NVMLUnavailablePrefix = "NVML unavailable: "

// Process is one traced process instance at the segment layer. A PID
// reused during the run (the first process exited, another got its PID)
// gives two Processes with the same PID and different Starts.
type Process struct {
	PID     uint32
	PPID    uint32
	Command []string
	Exe     string
	// Start is when tracing of this instance began: its Process record's
	// time, or its first event's when no record described it.
	Start uint64
	// SupersededAt is when a later Process record for the PID started
	// another instance: this one exec'd a new image, or exited and its PID
	// was reused (see doc.go). 0 when that did not happen. Its
	// LiveBytesAtEnd is then what it held when it ended, and is not in
	// Result.Totals or Devices at the end: its memory died with it.
	SupersededAt uint64

	// Totals counts this process alone; Totals.PeakBytes is the process's
	// peak across its devices.
	Totals Totals
	// PeakTime is when PeakBytes was first reached.
	PeakTime uint64
	// PeakEvent is the allocation that set the peak; nil when nothing was
	// ever live.
	PeakEvent *Allocation
	// PeakStacks is the set live at the peak grouped by stack, largest first.
	PeakStacks []StackUsage
	// LiveAtEnd is the set live at the end grouped by stack, largest first.
	LiveAtEnd []StackUsage
	// Allocated is every successful allocation grouped by stack, largest
	// first.
	Allocated []StackUsage
	// Failed is every failed allocation grouped by stack (bytes requested),
	// largest first.
	Failed []StackUsage
	// FirstFailure is the first failed allocation; nil when none failed.
	FirstFailure *Failure
	// FirstOOM is the first allocation that failed for want of memory
	// (IsOutOfMemory); nil when none did. Other failures (no device, no
	// driver, a bad argument) are in FailedCalls, never an OOM.
	FirstOOM *Failure
	// FailedCalls groups the failed allocations by error (library and
	// code), first failure first.
	FailedCalls []FailedCalls
	// Devices has the process's figures per device, sorted by index.
	Devices []ProcessDevice
	// Books are the process's per-API ledgers (see Result.Books).
	Books Books
	// Host counts the process's pinned host memory.
	Host Totals
	// VMM is the process's virtual memory API figures; nil when it made no
	// such call.
	VMM *VMM
	// NVML sets NVML's per-process figures beside the traced ones; nil when
	// no NVML sample listed the process with a size.
	NVML *ProcessNVML
	// NVMLAbsent says in one line why NVML is nil while NVML sampled:
	// listed without a size, no sample while it was traced, no process
	// lists on the devices sampled, or never listed; empty otherwise.
	NVMLAbsent string
	// Preexisting is the memory the process held before tracing began.
	Preexisting Preexisting
	// Churn is the process's segment allocator traffic; nil when it made
	// no device allocation or free call.
	Churn *Churn
	// Stops is how many times the recorder stopped the process at a
	// library load or exec (a stop is seen by the process: a thread's
	// interrupted wait returns EINTR); nil when the trace does not say
	// (cut short, or recorded before stops were counted).
	Stops *uint64
	// Iterations is the process's training loop, detected from its
	// allocations (see doc.go, "Iterations"); nil when no regular loop.
	Iterations *Iterations
}

// ProcessNVML reconciles NVML's figure for one process with the traced
// one. NVML's figure is summed over the devices of one sampling tick; the
// traced one is the process's live device memory (all devices, "unknown"
// included) at the point the tick's records reached the analysis.
type ProcessNVML struct {
	// Samples counts the ticks that listed the process.
	Samples uint64
	// Latest is at the last tick that listed the process.
	Latest Reconciliation
	// AtPeak is at the latest tick at or before the process's traced peak;
	// nil when it never had memory live or no tick came before its peak.
	AtPeak *Reconciliation
}

// Reconciliation is NVML's used bytes for a process next to its traced live
// device bytes at the same moment. The gap is context, library workspaces
// and memory allocated before attach: shown, never hidden. It can be
// negative: NVML's figure lags the driver, and allocations traced just
// before a tick may not be in it yet.
type Reconciliation struct {
	Time        uint64
	NVMLBytes   uint64
	TracedBytes uint64
	// GapBytes is NVMLBytes - TracedBytes.
	GapBytes int64
}

// PreexistingBasis says where a Preexisting figure comes from.
type PreexistingBasis string

// Bases of a Preexisting figure.
const (
	// PreexistingNone: traced from its first instruction (run mode: the
	// launched command, or a child a traced process forked), so nothing
	// predates the trace. Bytes is 0, exactly.
	PreexistingNone PreexistingBasis = "traced_from_start"
	// PreexistingEstimate: attached mid-run; Bytes is NVML's figure minus
	// the traced live bytes at the first tick after tracing began,
	// clamped at 0. It includes the CUDA context and library workspaces,
	// so it is an upper bound on the allocations made before attach.
	PreexistingEstimate PreexistingBasis = "nvml_estimate"
	// PreexistingUnknown: attached mid-run with no NVML figure for the
	// process. Bytes is 0 and means nothing.
	PreexistingUnknown PreexistingBasis = "unknown"
)

// Preexisting is memory a process held before tracing began. Frees of it
// are counted in Totals.UnknownFrees, their sizes unknown.
type Preexisting struct {
	Basis PreexistingBasis
	Bytes uint64
	// At is the reconciliation the estimate came from; set for
	// PreexistingEstimate only.
	At *Reconciliation
}

// Books holds the two per-API ledgers of device memory. Nested calls are
// counted in their own book, so the books overlap and are never summed.
type Books struct {
	// Runtime counts the CUDA runtime's calls (libcudart: cudaMalloc...).
	Runtime Book
	// Driver counts the driver's calls (libcuda: cuMemAlloc_v2, cuMemCreate...).
	Driver Book
}

// Book is a ledger of one API family's device-memory calls: allocations
// (cudaMalloc*, cuMemAlloc*, cuMemCreate) and frees (cudaFree*, cuMemFree*,
// cuMemRelease), keyed by the address (or handle) the book itself saw
// returned. A book follows calls, not memory: physical memory released
// while still mapped leaves the book at cuMemRelease but stays in Totals
// until unmapped.
type Book struct {
	// Allocations counts successful allocation calls (Ret 0, Size > 0,
	// Addr != 0).
	Allocations uint64
	// Frees counts frees of an address the book had live.
	Frees uint64
	// FailedAllocations counts allocation calls that returned an error.
	FailedAllocations uint64
	// FailedFrees counts frees that returned an error.
	FailedFrees uint64
	// UnknownFrees counts frees of an address not live in this book
	// (allocated before attach, or through the other API).
	UnknownFrees uint64
	// AllocatedBytes sums the sizes of successful allocations.
	AllocatedBytes uint64
	// PeakBytes is the most the book had live at once; PeakTime when first.
	PeakBytes uint64
	PeakTime  uint64
	// LiveBytesAtEnd is what the book had live at the end.
	LiveBytesAtEnd uint64
}

// Calls reports whether the book saw any call.
func (b *Book) Calls() uint64 {
	return b.Allocations + b.Frees + b.FailedAllocations + b.FailedFrees + b.UnknownFrees
}

// VMM is the virtual memory API's figures for one process or all of them:
// reserved address space (not usage), physical memory (usage: it is in
// Totals too) and the ranges mapped to it. Counts are successful calls.
type VMM struct {
	// Reserves and Unreserves count cuMemAddressReserve and
	// cuMemAddressFree.
	Reserves, Unreserves uint64
	// Creates and Releases count cuMemCreate and cuMemRelease.
	Creates, Releases uint64
	// Maps and Unmaps count cuMemMap and cuMemUnmap.
	Maps, Unmaps uint64
	// FailedCalls counts VMM calls that returned an error.
	FailedCalls uint64
	// UnknownCalls counts releases, unmaps and unreserves of a handle or
	// range not seen created, mapped or reserved (before attach).
	UnknownCalls uint64
	VMMBytes
	// Devices has the figures per device, sorted by index.
	Devices []VMMDevice
}

// VMMBytes are the VMM's byte figures for one scope. Physical memory stays
// live until it is both released and unmapped, as the driver frees it.
type VMMBytes struct {
	ReservedPeakBytes  uint64
	ReservedBytesAtEnd uint64
	PhysicalPeakBytes  uint64
	PhysicalBytesAtEnd uint64
	MappedPeakBytes    uint64
	MappedBytesAtEnd   uint64
}

// VMMDevice is the VMM's byte figures on one device. A reservation's device
// is its caller's current device; physical memory's is the one cuMemCreate
// named; a mapping's is that of the physical memory mapped.
type VMMDevice struct {
	Index int32
	VMMBytes
}

// ProcessDevice is one process's use of one device.
type ProcessDevice struct {
	Index          int32
	PeakBytes      uint64
	PeakTime       uint64
	LiveBytesAtEnd uint64
}

// Stack is a stack record, copied, with its frames rendered for humans.
type Stack struct {
	ID  event.StackID
	PID uint32
	// Frames are the raw frames, leaf first.
	Frames []event.Frame
	// Lines are the frames rendered: "function (file:line)", "function" when
	// the file is unknown, "0x<addr> (<mapping basename>)" when the function
	// is unknown.
	Lines []string
	// Runtime marks the frames inside the CUDA runtime or driver: mapping
	// file libcudart* or libcuda.so*, or, wherever they live (a runtime
	// linked in statically), functions named as the runtime's
	// (IsRuntimeFunction).
	Runtime []bool
	// Site names where the user's code asked for memory, as every output
	// shows it (see "Sites" in doc.go): the rendered leaf-most named frame
	// outside the CUDA runtime, caching allocators and FFI or interpreter
	// glue; or, when that frame is a helper the process's other allocation
	// stacks share, "caller -> helper" with the caller that tells this
	// stack apart. Findings point there.
	Site string
	// SiteFrame is the index in Frames of the frame Site names first (the
	// caller when there is a helper); -1 without frames.
	SiteFrame int
	// Helper is the index in Frames of the shared helper Site names after
	// the caller; -1 when Site names one frame.
	Helper int
	// candidates are the indexes of the frames that may make a site, leaf
	// first.
	candidates []int
}

// Timeline is live bytes over time of one process on one device and layer,
// downsampled to at most Options.TimelinePoints points. Each time bucket
// keeps its minimum and its maximum, so the peak is never lost.
type Timeline struct {
	PID uint32
	// ProcessStart is the Start of the process instance (see Process).
	ProcessStart uint64
	Layer        event.Layer
	// Space is SpaceDevice (device and physical memory together) or
	// SpaceHost (pinned host memory, by the caller's current device).
	Space  MemorySpace
	Device int32
	Points []Point
}

// Point is the live bytes right after the event at Time.
type Point struct {
	Time  uint64
	Bytes uint64
}

// NoCallsSeen reports whether a CUDA runtime or driver was probed in a
// target (a Library record naming probed functions) yet no traced call was
// seen: an empty recording that should not pass for a quiet one.
func (r *Run) NoCallsSeen() bool {
	if r.Events > 0 {
		return false
	}
	for _, l := range r.Libraries {
		if len(l.Symbols) > 0 {
			return true
		}
	}
	return false
}

// Moment describes a moment report (Run.Moment): which moment of a
// recording still running its figures are for.
type Moment struct {
	// Kind is MomentOOM or MomentSignal.
	Kind string
	// Index numbers the moments of its Kind in the recording, from 1.
	Index int
	// Time is the moment, on the trace's clock: the trace read covers
	// every record written before it.
	Time uint64
	// Request is the allocation that failed with out-of-memory (MomentOOM).
	Request *event.Event
	// SkippedOOMs counts the out-of-memory failures since the previous
	// out-of-memory moment that the rate limit gave no moment of their own.
	SkippedOOMs uint64
	// TraceBytes is the length of the trace at the moment: the report is
	// that of the trace file's first TraceBytes bytes (closed at Time).
	TraceBytes uint64
}

// Kinds of Moment, and the End reasons of their reports.
const (
	MomentOOM          = "oom"
	MomentSignal       = "usr1"
	MomentOOMReason    = "oom moment"
	MomentSignalReason = "SIGUSR1 moment"
)
