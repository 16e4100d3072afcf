package report

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/vramprof/vramprof/analysis"
)

// Schema names the report.json format. Fields are only ever added to it.
const Schema = "vramprof/report/v1"

// JSON is report.json, field for field. The first six fields are the schema
// DESIGN.md promises; the rest are additions. Times named *_ns are
// nanoseconds since the run's start (never absolute clock values, which mean
// nothing outside the traced machine).
type JSON struct {
	Schema string      `json:"schema"`
	Totals JSONTotals  `json:"totals"`
	Blocks *JSONBlocks `json:"blocks,omitempty"` // absent when no block layer was traced
	// Fragmentation has one entry per process and device whose caching
	// allocator was traced (block layer); absent otherwise.
	Fragmentation []JSONPool `json:"fragmentation,omitempty"`
	// Books are the runtime's and the driver's ledgers side by side: never
	// summed (a cudaMalloc and its nested cuMemAlloc_v2 are one allocation
	// in each, one in totals).
	Books JSONBooks `json:"books"`
	// Host is pinned host memory: always present, zeros when none; never
	// part of totals or devices.
	Host JSONHost `json:"host"`
	// VMM is the virtual memory API's figures; absent when no VMM call was
	// traced.
	VMM *JSONVMM `json:"vmm,omitempty"`
	// NVML is the device layer's status; absent when the trace has no NVML
	// record (recorded with NVML off).
	NVML      *JSONNVML     `json:"nvml,omitempty"`
	Devices   []JSONDevice  `json:"devices"`
	Processes []JSONProcess `json:"processes"`
	Findings  []JSONFinding `json:"findings"`

	// Iterations has one entry per process whose training loop was
	// detected from its allocations (analysis doc, "Iterations"); empty
	// when none was.
	Iterations []JSONIterations `json:"iterations"`

	// Tests are the pytest tests' own figures (package pytests), one per
	// test an allocation was made in, in the order they began; absent when
	// the recording shows no pytest test, empty when pytest ran tests and
	// none allocated.
	Tests []JSONTest `json:"tests,omitzero"`

	Run       JSONRun       `json:"run"`
	Libraries []JSONLibrary `json:"libraries"`
	// Interpreters are the CPythons whose frames the stacks hold, or the
	// notes saying why they do not; absent when none was found.
	Interpreters []JSONInterpreter `json:"interpreters,omitempty"`
	Timelines    []JSONTimeline    `json:"timelines"`
}

// JSONInterpreter is one entry of report.json's "interpreters".
type JSONInterpreter struct {
	PID     uint32 `json:"pid"`
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Path    string `json:"path,omitempty"`
	// Note is the reason the frames are missing; absent when they are there.
	Note string `json:"note,omitempty"`
}

// JSONTotals is report.json's "totals": the segment layer, all processes.
type JSONTotals struct {
	Allocations       uint64 `json:"allocations"`
	Frees             uint64 `json:"frees"`
	FailedAllocations uint64 `json:"failed_allocations"`
	UnknownFrees      uint64 `json:"unknown_frees"`
	LostEvents        uint64 `json:"lost_events"`
	AllocatedBytes    uint64 `json:"allocated_bytes"`
	PeakBytes         uint64 `json:"peak_bytes"`
	LiveBytesAtEnd    uint64 `json:"live_bytes_at_end"`

	// LateEvents counts events that reached the recorder too late to be
	// placed in the order they took effect (a free that took longer than
	// the reorder window): counted where they arrived, they may be
	// misordered against other calls on the same address.
	LateEvents uint64 `json:"late_events"`
	// LostCauses splits LostEvents by cause; absent when none were lost
	// or the trace did not record why (older traces).
	LostCauses *JSONLostCauses `json:"lost_causes,omitempty"`
	// PeakTimeNs is when PeakBytes was first reached.
	PeakTimeNs uint64 `json:"peak_time_ns"`
	// LiveAllocationsAtEnd counts the allocations behind LiveBytesAtEnd.
	LiveAllocationsAtEnd uint64 `json:"live_allocations_at_end"`
	// FreedBytes sums the sizes that frees released.
	FreedBytes uint64 `json:"freed_bytes"`
	// FailedBytes sums the sizes that failed allocations asked for.
	FailedBytes uint64 `json:"failed_bytes"`
	// NullFrees counts cudaFree(NULL) calls, which free nothing.
	NullFrees uint64 `json:"null_frees"`
	// ZeroSizeAllocations counts successful size-0 calls: not allocations.
	ZeroSizeAllocations uint64 `json:"zero_size_allocations"`
	// ReplacedAllocations counts allocations at an address already live: a
	// free was missed (lost events, an untraced API). Non-zero is an anomaly.
	ReplacedAllocations uint64 `json:"replaced_allocations"`
	// FailedFrees counts frees that returned an error and freed nothing.
	FailedFrees uint64 `json:"failed_frees"`
	// IgnoredEvents counts events the model does not account yet.
	IgnoredEvents uint64 `json:"ignored_events"`
}

// JSONBooks is the two per-API ledgers of device memory.
type JSONBooks struct {
	Runtime JSONBook `json:"runtime"`
	Driver  JSONBook `json:"driver"`
}

// JSONBook is one API family's ledger: every call of its APIs, nested or
// not (see analysis.Book).
type JSONBook struct {
	Allocations       uint64 `json:"allocations"`
	Frees             uint64 `json:"frees"`
	FailedAllocations uint64 `json:"failed_allocations"`
	AllocatedBytes    uint64 `json:"allocated_bytes"`
	LiveBytesAtEnd    uint64 `json:"live_bytes_at_end"`
	PeakBytes         uint64 `json:"peak_bytes"`
	FailedFrees       uint64 `json:"failed_frees"`
	UnknownFrees      uint64 `json:"unknown_frees"`
	PeakTimeNs        uint64 `json:"peak_time_ns"`
}

// JSONHost is pinned host memory, counted once (nested calls left out).
type JSONHost struct {
	Allocations          uint64 `json:"allocations"`
	Frees                uint64 `json:"frees"`
	FailedAllocations    uint64 `json:"failed_allocations"`
	AllocatedBytes       uint64 `json:"allocated_bytes"`
	PeakBytes            uint64 `json:"peak_bytes"`
	LiveBytesAtEnd       uint64 `json:"live_bytes_at_end"`
	UnknownFrees         uint64 `json:"unknown_frees"`
	PeakTimeNs           uint64 `json:"peak_time_ns"`
	LiveAllocationsAtEnd uint64 `json:"live_allocations_at_end"`
}

// JSONVMM is the virtual memory API's figures: reserved address space (not
// usage), physical memory (usage, also in totals) and mapped ranges.
type JSONVMM struct {
	Reserves     uint64 `json:"reserves"`
	Unreserves   uint64 `json:"unreserves"`
	Creates      uint64 `json:"creates"`
	Releases     uint64 `json:"releases"`
	Maps         uint64 `json:"maps"`
	Unmaps       uint64 `json:"unmaps"`
	FailedCalls  uint64 `json:"failed_calls"`
	UnknownCalls uint64 `json:"unknown_calls"`
	JSONVMMBytes
	Devices []JSONVMMDevice `json:"devices"`
}

// JSONVMMBytes are the VMM byte figures of one scope.
type JSONVMMBytes struct {
	ReservedPeakBytes  uint64 `json:"reserved_peak_bytes"`
	ReservedBytesAtEnd uint64 `json:"reserved_bytes_at_end"`
	PhysicalPeakBytes  uint64 `json:"physical_peak_bytes"`
	PhysicalBytesAtEnd uint64 `json:"physical_bytes_at_end"`
	MappedPeakBytes    uint64 `json:"mapped_peak_bytes"`
	MappedBytesAtEnd   uint64 `json:"mapped_bytes_at_end"`
}

// JSONVMMDevice is the VMM byte figures on one device.
type JSONVMMDevice struct {
	Index int32  `json:"index"`
	Name  string `json:"name"`
	JSONVMMBytes
}

// JSONBlocks is report.json's "blocks": the framework allocator's layer.
type JSONBlocks struct {
	Allocations        uint64 `json:"allocations"`
	Frees              uint64 `json:"frees"`
	PeakAllocatedBytes uint64 `json:"peak_allocated_bytes"`
	LiveBytesAtEnd     uint64 `json:"live_bytes_at_end"`

	// The block layer's other counts, as in JSONTotals.
	FailedAllocations uint64 `json:"failed_allocations"`
	UnknownFrees      uint64 `json:"unknown_frees"`
	AllocatedBytes    uint64 `json:"allocated_bytes"`
	PeakTimeNs        uint64 `json:"peak_time_ns"`
}

// JSONNVML is report.json's "nvml". Unavailable, it is exactly
// {"available": false, "reason": "..."}, the reason without the "NVML
// unavailable: " that text renderings put before it.
type JSONNVML struct {
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	// Samples counts the samples (one per device per tick).
	Samples uint64 `json:"samples,omitempty"`
	// Interruptions counts the times sampling failed after it started;
	// LastError is the last reason.
	Interruptions uint64 `json:"interruptions,omitempty"`
	LastError     string `json:"last_error,omitempty"`
	// Notes are one line each about figures NVML could not give while it
	// sampled: "NVML device 0: per-process figures not available: ..."
	// when a device lists no processes (MIG partitions, vGPU guests).
	Notes []string `json:"notes,omitempty"`
}

// JSONDevice is one device. Index is the device index and stays an integer:
// -1 is the "unknown" device (allocations made before the device was seen),
// which Name spells out. CapacityBytes is null while unknown (no NVML sample).
type JSONDevice struct {
	Index          int32   `json:"index"`
	PeakBytes      uint64  `json:"peak_bytes"`
	LiveBytesAtEnd uint64  `json:"live_bytes_at_end"`
	CapacityBytes  *uint64 `json:"capacity_bytes"`

	// Name is the index as a string, "unknown" for -1, as pprof's device
	// label spells it.
	Name string `json:"name"`
	// PeakTimeNs is when the device's PeakBytes was first reached.
	PeakTimeNs uint64 `json:"peak_time_ns"`
	// ProductName and UUID are NVML's; empty when unknown. NVML's device
	// of the same index is taken for CUDA's (the trace knows no CUDA
	// UUID): where CUDA_VISIBLE_DEVICES renumbers, the nvml_* figures are
	// another GPU's.
	ProductName string `json:"product_name"`
	UUID        string `json:"uuid"`
	// PCIBusID is NVML's PCI address of the device ("00000000:3B:00.0",
	// dcgm-exporter's pci_bus_id); empty when unknown.
	PCIBusID string `json:"pci_bus_id"`
	// NVMLSamples counts the device's NVML samples; the nvml_* fields
	// below are null without one.
	NVMLSamples uint64 `json:"nvml_samples"`
	// NVMLUsedAtPeakBytes is NVML's used bytes (every process and the
	// driver) in the latest sample at or before the traced peak; null when
	// none came before it.
	NVMLUsedAtPeakBytes  *uint64 `json:"nvml_used_at_peak_bytes"`
	NVMLUsedAtPeakTimeNs *uint64 `json:"nvml_used_at_peak_time_ns"`
	// NVMLMaxUsedBytes is the most used bytes any sample saw, first at
	// NVMLMaxUsedTimeNs.
	NVMLMaxUsedBytes  *uint64 `json:"nvml_max_used_bytes"`
	NVMLMaxUsedTimeNs *uint64 `json:"nvml_max_used_time_ns"`
	// NVMLLastUsedBytes and NVMLLastFreeBytes are NVML's latest sample,
	// at NVMLLastTimeNs: in a moment report, the device as NVML last saw
	// it at or before the moment (an oom moment's free memory).
	NVMLLastUsedBytes *uint64 `json:"nvml_last_used_bytes"`
	NVMLLastFreeBytes *uint64 `json:"nvml_last_free_bytes"`
	NVMLLastTimeNs    *uint64 `json:"nvml_last_time_ns"`
}

// JSONProcess is one traced process at the segment layer. Command is the
// argv joined by spaces; Argv keeps it exact.
type JSONProcess struct {
	PID            uint32 `json:"pid"`
	Command        string `json:"command"`
	PeakBytes      uint64 `json:"peak_bytes"`
	LiveBytesAtEnd uint64 `json:"live_bytes_at_end"`

	// Argv is the command line as recorded; Exe the executable's path.
	Argv []string `json:"argv"`
	Exe  string   `json:"exe,omitempty"`
	// PPID is the parent's pid (a forked worker's parent); 0 when unknown.
	PPID uint32 `json:"ppid"`
	// Unknown names this process's fields that are placeholders ("pid",
	// "ppid" of an imported snapshot; "peak_time_ns" when times are an
	// order only); absent when everything is known.
	Unknown           []string `json:"unknown,omitempty"`
	PeakTimeNs        uint64   `json:"peak_time_ns"`
	Allocations       uint64   `json:"allocations"`
	Frees             uint64   `json:"frees"`
	FailedAllocations uint64   `json:"failed_allocations"`
	UnknownFrees      uint64   `json:"unknown_frees"`
	AllocatedBytes    uint64   `json:"allocated_bytes"`
	// PeakEvent is the allocation that set the peak; absent when nothing
	// was ever live.
	PeakEvent *JSONAllocation `json:"peak_event,omitempty"`
	// PeakStacks is the live set at the peak by stack, largest first.
	PeakStacks []JSONStack `json:"peak_stacks"`
	// LiveAtEndStacks is the live set at the end by stack, largest first.
	LiveAtEndStacks []JSONStack `json:"live_at_end_stacks"`
	// FailedStacks is the failed allocations by stack (bytes requested).
	FailedStacks []JSONStack `json:"failed_stacks"`
	// FirstFailure is the first failed allocation; absent when none failed.
	FirstFailure *JSONFailure `json:"first_failure,omitempty"`
	// Devices is the process's use of each device, by index.
	Devices []JSONProcDevices `json:"devices"`
	// Books, Host and VMM are the process's, as the top-level ones.
	Books JSONBooks `json:"books"`
	Host  JSONHost  `json:"host"`
	VMM   *JSONVMM  `json:"vmm,omitempty"`
	// StartNs is when tracing of this process began. A PID reused during
	// the run has one entry per process, with different starts.
	StartNs uint64 `json:"start_ns"`
	// SupersededNs is when a later process took this one's PID (an exec
	// of a new image after it used CUDA, or the PID reused after it
	// exited): live_bytes_at_end is then what it held when it ended, and is
	// not in totals or devices. Null when that did not happen.
	SupersededNs *uint64 `json:"superseded_ns"`
	// NVML reconciles NVML's figure for the process with the traced one;
	// null when no NVML sample sized the process.
	NVML *JSONProcNVML `json:"nvml"`
	// NVMLAbsent says in one line why nvml is null while NVML sampled
	// (listed without a size, no sample while traced, no process lists,
	// never listed); absent otherwise.
	NVMLAbsent string `json:"nvml_absent,omitempty"`
	// PreexistingBytesEstimate is the memory the process held before
	// tracing began: 0 when traced from its start (preexisting_basis
	// "traced_from_start"), NVML's figure minus the traced one at the first
	// sample, clamped at 0 and including the CUDA context
	// ("nvml_estimate"), null when attached without an NVML figure
	// ("unknown"). Frees of it are unknown_frees, sizes unknown.
	PreexistingBytesEstimate *uint64 `json:"preexisting_bytes_estimate"`
	PreexistingBasis         string  `json:"preexisting_basis"`
	// Churn is the process's cudaMalloc/cudaFree traffic and its
	// release-and-reallocate cycles; absent without such calls.
	Churn *JSONChurn `json:"churn,omitempty"`
	// Stops is how many times vramprof stopped the process at a library
	// load or exec to probe what it mapped (each is seen by the process:
	// a thread's interrupted wait returns EINTR); null when the recording
	// does not say (cut short, or older).
	Stops *uint64 `json:"stops"`
}

// JSONProcNVML is one process's NVML figures next to the traced ones.
type JSONProcNVML struct {
	// Samples counts the ticks that sized the process.
	Samples uint64 `json:"samples"`
	// Latest is at the last tick; AtPeak at the latest tick at or before
	// the traced peak, null when none came before it.
	Latest JSONReconciliation  `json:"latest"`
	AtPeak *JSONReconciliation `json:"at_peak"`
}

// JSONReconciliation is NVML's used bytes for a process next to its traced
// live device bytes at one tick. GapBytes, NVML - traced, is the context,
// library workspaces and memory from before attach; negative when NVML
// lags the trace.
type JSONReconciliation struct {
	TimeNs          uint64 `json:"time_ns"`
	NVMLUsedBytes   uint64 `json:"nvml_used_bytes"`
	TracedLiveBytes uint64 `json:"traced_live_bytes"`
	GapBytes        int64  `json:"gap_bytes"`
}

// JSONProcDevices is one process's use of one device.
type JSONProcDevices struct {
	Index          int32  `json:"index"`
	Name           string `json:"name"`
	PeakBytes      uint64 `json:"peak_bytes"`
	PeakTimeNs     uint64 `json:"peak_time_ns"`
	LiveBytesAtEnd uint64 `json:"live_bytes_at_end"`
}

// jsonFailure is a failed allocation as report.json writes it.
func jsonFailure(res *analysis.Result, f *analysis.Failure) JSONFailure {
	return JSONFailure{JSONAllocation: jsonAllocation(res, &f.Allocation),
		Error: analysis.ErrorName(f.API, f.Ret), LiveBytes: f.LiveBytes, DeviceLiveBytes: f.DeviceLiveBytes,
		PeakBytes: f.PeakBytes, LiveStacks: jsonStacks(res, f.LiveStacks)}
}

// JSONAllocation is one allocation call. The address is left out: it means
// nothing after the run.
type JSONAllocation struct {
	TimeNs uint64   `json:"time_ns"`
	Size   uint64   `json:"size"`
	Device string   `json:"device"`
	API    string   `json:"api"`
	Site   string   `json:"site"`
	Frames []string `json:"frames"`
}

// JSONFailure is the first failed allocation of a process.
type JSONFailure struct {
	JSONAllocation
	// Error is the return code with its name: "2 (cudaErrorMemoryAllocation)".
	Error string `json:"error"`
	// LiveBytes is what the process had live at the failure, all devices;
	// DeviceLiveBytes on the failing device; PeakBytes its peak so far.
	LiveBytes       uint64 `json:"live_bytes"`
	DeviceLiveBytes uint64 `json:"device_live_bytes"`
	PeakBytes       uint64 `json:"peak_bytes"`
	// LiveStacks is the live set at the failure by stack, largest first.
	LiveStacks []JSONStack `json:"live_stacks"`
}

// JSONOOMCalls is the segment layer's evidence of an oom finding: First
// is the process's first allocation that failed for want of memory; Count
// and Bytes sum every such failure (both libraries).
type JSONOOMCalls struct {
	First JSONFailure `json:"first"`
	Count uint64      `json:"count"`
	Bytes uint64      `json:"bytes"`
}

// JSONStack is a stack with what it holds. Frames and Bytes are the schema's;
// Count and Site are additions.
type JSONStack struct {
	Frames []string `json:"frames"`
	Bytes  uint64   `json:"bytes"`
	Count  uint64   `json:"count"`
	Site   string   `json:"site"`
}

// JSONFinding is one finding.
type JSONFinding struct {
	Kind        string      `json:"kind"`
	Severity    string      `json:"severity"`
	Summary     string      `json:"summary"`
	Bytes       uint64      `json:"bytes"`
	Stacks      []JSONStack `json:"stacks"`
	Remediation []string    `json:"remediation"`

	// PID is the process the finding is about; ProcessStartNs its start
	// (see JSONProcess.StartNs).
	PID            uint32 `json:"pid"`
	ProcessStartNs uint64 `json:"process_start_ns"`
	// TimeNs is when: the peak, the first failure, the end of a leak's
	// first window.
	TimeNs uint64 `json:"time_ns"`
	// Leak is a leak finding's evidence, or a pinned_host_growth
	// finding's (its growing stacks summed); absent for other kinds.
	Leak *JSONLeak `json:"leak,omitempty"`
	// OOM is the failure an oom or fragmentation finding is about, when the
	// block layer was traced; absent otherwise.
	OOM *JSONOOM `json:"oom,omitempty"`
	// OOMCalls is an oom finding's evidence at the segment layer (no
	// caching allocator explained the failure): the first allocation that
	// failed for want of memory, with what was live then, and how many
	// failed so in all; absent for other findings.
	OOMCalls *JSONOOMCalls `json:"oom_calls,omitempty"`
	// Churn is a churn finding's evidence.
	Churn *JSONChurn `json:"churn,omitempty"`
	// Cache is a cache_growth finding's evidence.
	Cache *JSONCache `json:"cache,omitempty"`
}

// JSONLeak is a leak finding's evidence: the growth over the run (the
// finding's bytes), the detection windows and live bytes at each window's
// end, and the rates with the span they were observed over.
type JSONLeak struct {
	// GrowthBytes is the growth over the run, as the finding's bytes: live
	// bytes at the end minus at the start of tracing, from FromNs (the
	// process's first traced moment) to ToNs.
	GrowthBytes uint64 `json:"growth_bytes"`
	FromNs      uint64 `json:"from_ns"`
	ToNs        uint64 `json:"to_ns"`
	// WindowStartNs (the end of the first window) and WindowEndNs (the
	// end) bound WindowGrowthBytes, the growth the leak rule saw.
	WindowStartNs     uint64 `json:"window_start_ns"`
	WindowEndNs       uint64 `json:"window_end_ns"`
	WindowGrowthBytes uint64 `json:"window_growth_bytes"`
	// ObservedNs is the span the rates were measured over: the iterations
	// (iterations x period) with a loop, else the windows. RateBase is the
	// time base the texts quote a rate in, the longest of "second",
	// "minute", "hour" not longer than ObservedNs; absent under a second.
	// ProjectionHorizonS is as far as a projection may reach:
	// analysis.ProjectionFactor x ObservedNs, in seconds.
	ObservedNs         uint64  `json:"observed_ns"`
	RateBase           string  `json:"rate_base,omitempty"`
	ProjectionHorizonS float64 `json:"projection_horizon_s"`
	// WindowEndsNs are the windows' ends; the last is the end of the run.
	WindowEndsNs []uint64 `json:"window_ends_ns"`
	// LiveBytes is the stack's live bytes at each window end.
	LiveBytes []uint64 `json:"live_bytes"`
	// BytesPerSecond is the growth over Seconds, the time from the end of
	// the first window to the end of the run.
	BytesPerSecond float64 `json:"bytes_per_second"`
	Seconds        float64 `json:"seconds"`
	// Iterations, BytesPerIteration and BytesPerMinute are set when the
	// process's loop was detected (analysis doc, "Iterations"): its
	// iteration count, the stack's growth per iteration and per minute.
	Iterations        uint64  `json:"iterations,omitempty"`
	BytesPerIteration float64 `json:"bytes_per_iteration,omitempty"`
	BytesPerMinute    float64 `json:"bytes_per_minute,omitempty"`
	// CapacityBytes and TimeToOOMSeconds are set when the capacity of the
	// device the stack grows on is known: the projected time until the
	// device is full at this rate.
	CapacityBytes    uint64   `json:"capacity_bytes,omitempty"`
	TimeToOOMSeconds *float64 `json:"time_to_oom_s,omitempty"`
	// HeadroomBytes, set with TimeToOOMSeconds, is what it counts down:
	// with HeadroomBasis "nvml_free", NVML's free bytes on the device at
	// its last sample, at or before the root process's exit when it
	// exited (HeadroomTimeNs), every
	// process's memory and the driver's counted; with "capacity", the
	// capacity less the traced memory on the device at the end.
	HeadroomBytes  *uint64 `json:"headroom_bytes,omitempty"`
	HeadroomBasis  string  `json:"headroom_basis,omitempty"`
	HeadroomTimeNs *uint64 `json:"headroom_time_ns,omitempty"`
	// TimeToOOMProjected, set with TimeToOOMSeconds, says whether it is
	// within ProjectionHorizonS: the texts quote it only then, and say the
	// run was too short to project otherwise.
	TimeToOOMProjected *bool `json:"time_to_oom_projected,omitempty"`
	// Layer is what grew: "block" for tensors (a caching allocator's
	// blocks, which decide when traced), "segment" for device memory
	// from CUDA. SinceNs is when the growth began (the start of the first
	// iteration from which it never fell back), absent when unknown.
	Layer   string  `json:"layer,omitempty"`
	SinceNs *uint64 `json:"since_ns,omitempty"`
}

// JSONCache is a cache_growth finding's evidence: the caching
// allocator's reserve (segments) against its tensors (blocks), at their
// peaks and at the end.
type JSONCache struct {
	ReservedPeakBytes   uint64 `json:"reserved_peak_bytes"`
	ReservedPeakNs      uint64 `json:"reserved_peak_ns"`
	AllocatedPeakBytes  uint64 `json:"allocated_peak_bytes"`
	AllocatedPeakNs     uint64 `json:"allocated_peak_ns"`
	ReservedBytesAtEnd  uint64 `json:"reserved_bytes_at_end"`
	AllocatedBytesAtEnd uint64 `json:"allocated_bytes_at_end"`
}

// JSONIterations is one process's loop. Count iterations, PeriodNs the
// median time between their starts; FirstStartNs and LastStartNs the first
// and the last start; Site (Frames) the allocation site that paces it.
// AllocatedBytesPerIteration is what a complete iteration allocated on
// average (device memory, first start to last start), null when the
// process's change log overflowed; LiveGrowthBytesPerIteration the
// least-squares slope of its live device bytes just before each start
// (about 0 for a steady loop).
type JSONIterations struct {
	PID                         uint32   `json:"pid"`
	ProcessStartNs              uint64   `json:"process_start_ns"`
	Command                     string   `json:"command"`
	Count                       uint64   `json:"count"`
	PeriodNs                    uint64   `json:"period_ns"`
	FirstStartNs                uint64   `json:"first_start_ns"`
	LastStartNs                 uint64   `json:"last_start_ns"`
	Site                        string   `json:"site"`
	Frames                      []string `json:"frames"`
	AllocatedBytesPerIteration  *float64 `json:"allocated_bytes_per_iteration"`
	LiveGrowthBytesPerIteration *float64 `json:"live_growth_bytes_per_iteration"`
}

// JSONRun is the recording's facts.
type JSONRun struct {
	Tool       string   `json:"tool"`
	Mode       string   `json:"mode"`
	Command    []string `json:"command"`
	PID        uint32   `json:"pid"`
	Host       string   `json:"host"`
	StartTime  string   `json:"start_time,omitempty"` // RFC 3339, UTC
	DurationNs uint64   `json:"duration_ns"`
	// EndedCleanly is false when the stream was cut short (crash, kill): the
	// figures then cover what was recorded before the cut.
	EndedCleanly bool   `json:"ended_cleanly"`
	EndReason    string `json:"end_reason"`
	ExitCode     int    `json:"exit_code"`
	// Events counts the traced calls in the stream.
	Events uint64 `json:"events"`
	// NestedEvents counts the calls made inside another traced call: in
	// the books only.
	NestedEvents uint64 `json:"nested_events"`
	// DeviceSwitches counts cudaSetDevice/cuCtxSetCurrent calls that
	// changed their thread's device or context, or failed.
	DeviceSwitches uint64 `json:"device_switches"`
	// DevicesInferred counts allocations whose unknown device was inferred
	// from the address ranges of the process's known devices.
	DevicesInferred uint64 `json:"devices_inferred"`
	// NoCallsSeen: CUDA was probed in a target but no traced call was seen;
	// Note then says so, with the likely causes.
	NoCallsSeen bool   `json:"no_calls_seen"`
	Note        string `json:"note,omitempty"`
	// StrippedRuntimes says, one line per file, where a CUDA runtime is
	// linked in statically and stripped: its calls cannot be probed
	// (libraries[].stripped_runtime marks the files).
	StrippedRuntimes []string `json:"stripped_runtimes,omitempty"`
	// Unknown names the fields above whose values are placeholders, not
	// facts: an imported snapshot knows no "pid", "exit_code", "host" or
	// "start_time" (they read 0 or empty), and when its times are an order
	// only, no "duration_ns" and no "times" (every *_ns field of the
	// report). Absent when everything is known.
	Unknown []string `json:"unknown,omitempty"`
	// Moment is present in a moment report (DIR/moments/*/report.json):
	// the figures are those of the trace up to that moment, while the
	// recording went on; end_reason is then "oom moment" or "SIGUSR1
	// moment", duration_ns runs to the moment, and exit_code means
	// nothing (the target was still running).
	Moment *JSONMoment `json:"moment,omitempty"`
	// Flight is set when the trace was kept by a flight recorder (run or
	// attach --max-trace): the events before the window were summarised.
	Flight *JSONFlight `json:"flight,omitempty"`
	// Complete is false when the figures do not cover the whole recording
	// (IncompleteReasons, one line each, say why): a trace cut short, or
	// a moment report. `vramprof check` gives no verdict on such figures.
	Complete          bool     `json:"complete"`
	IncompleteReasons []string `json:"incomplete_reasons,omitempty"`
}

// JSONMoment says which moment a moment report is for.
type JSONMoment struct {
	// Kind is "oom" (an allocation failed with out-of-memory) or "usr1"
	// (vramprof received SIGUSR1).
	Kind string `json:"kind"`
	// Index numbers the moments of this kind in the recording, from 1.
	Index int `json:"index"`
	// TimeNs is the moment, relative to the start like every *_ns field.
	TimeNs uint64 `json:"time_ns"`
	// Request is the allocation that failed (kind "oom").
	Request *JSONMomentRequest `json:"request,omitempty"`
	// SkippedOOMs counts the out-of-memory failures since the previous
	// oom moment that the rate limit gave no report of their own.
	SkippedOOMs uint64 `json:"skipped_ooms"`
	// TraceBytes is the length of trace.vpt at the moment: these figures
	// are those of its first trace_bytes bytes (a record boundary), up to
	// time_ns.
	TraceBytes uint64 `json:"trace_bytes"`
}

// JSONMomentRequest is the failed allocation of an oom moment.
type JSONMomentRequest struct {
	API    string `json:"api"`
	Bytes  uint64 `json:"bytes"`
	PID    uint32 `json:"pid"`
	Device string `json:"device"`
	Error  string `json:"error"`
	TimeNs uint64 `json:"time_ns"`
}

// jsonMoment renders a moment report's Moment; nil when res is not one.
func jsonMoment(res *analysis.Result) *JSONMoment {
	m := res.Run.Moment
	if m == nil {
		return nil
	}
	jm := &JSONMoment{Kind: m.Kind, Index: m.Index, TimeNs: res.Rel(m.Time), SkippedOOMs: m.SkippedOOMs, TraceBytes: m.TraceBytes}
	if e := m.Request; e != nil {
		jm.Request = &JSONMomentRequest{API: e.API.String(), Bytes: e.Size, PID: e.PID, Device: analysis.DeviceName(e.Device),
			Error: analysis.ErrorName(e.API, e.Ret), TimeNs: res.Rel(e.Time)}
	}
	return jm
}

// JSONLibrary is a probed library.
type JSONLibrary struct {
	PID     uint32   `json:"pid"`
	Path    string   `json:"path"`
	BuildID string   `json:"build_id"`
	Symbols []string `json:"symbols"`
	// Skipped are functions an allocator spec named but vramprof did not
	// probe, each with the reason (omitted when none).
	Skipped []string `json:"skipped,omitempty"`
	// StrippedRuntime: the file holds a CUDA runtime linked in statically
	// with its symbols stripped; Symbols is empty (omitted when false).
	StrippedRuntime bool `json:"stripped_runtime,omitempty"`
}

// JSONTimeline is live bytes over time; each point is [time_ns, bytes].
// Space is "device" (device and physical memory) or "host" (pinned host
// memory).
type JSONTimeline struct {
	PID uint32 `json:"pid"`
	// ProcessStartNs tells apart the processes of a reused PID.
	ProcessStartNs uint64      `json:"process_start_ns"`
	Device         string      `json:"device"`
	Layer          string      `json:"layer"`
	Space          string      `json:"space"`
	Points         [][2]uint64 `json:"points"`
}

// JSONLostCauses is report.json's "lost_causes" (event.LostCauses).
type JSONLostCauses struct {
	// RingFull counts records the BPF ring buffer refused (read too slowly).
	RingFull uint64 `json:"ring_full"`
	// Unpaired counts returns without their call's entry (a call in
	// flight at attach, or an in-flight slot evicted).
	Unpaired uint64 `json:"unpaired"`
	// Malformed counts records too short for their kind or of an unknown
	// kind.
	Malformed uint64 `json:"malformed"`
}

// NewJSON builds report.json's content from res.
func NewJSON(res *analysis.Result) *JSON {
	t := res.Totals
	j := &JSON{
		Schema: Schema,
		Totals: JSONTotals{
			Allocations: t.Allocations, Frees: t.Frees, FailedAllocations: t.FailedAllocations,
			UnknownFrees: t.UnknownFrees, LostEvents: res.LostEvents, LateEvents: res.LateEvents, AllocatedBytes: t.AllocatedBytes,
			PeakBytes: t.PeakBytes, LiveBytesAtEnd: t.LiveBytesAtEnd,
			PeakTimeNs: res.Rel(t.PeakTime), LiveAllocationsAtEnd: t.LiveAllocationsAtEnd,
			FreedBytes: t.FreedBytes, FailedBytes: t.FailedBytes, NullFrees: t.NullFrees,
			ZeroSizeAllocations: t.ZeroSizeAllocations, ReplacedAllocations: t.ReplacedAllocations,
			FailedFrees: t.FailedFrees, IgnoredEvents: t.IgnoredEvents,
		},
		Books:      jsonBooks(res, res.Books),
		Host:       jsonHost(res, res.Host),
		VMM:        jsonVMM(res.VMM),
		NVML:       jsonNVML(res.NVML),
		Devices:    []JSONDevice{},
		Processes:  []JSONProcess{},
		Findings:   []JSONFinding{},
		Libraries:  []JSONLibrary{},
		Timelines:  []JSONTimeline{},
		Iterations: []JSONIterations{},
	}
	if c := res.LostCauses; c.Known(res.LostEvents) {
		j.Totals.LostCauses = &JSONLostCauses{RingFull: c.RingFull, Unpaired: c.Unpaired, Malformed: c.Malformed}
	}
	if b := res.Blocks; b != nil {
		j.Blocks = &JSONBlocks{Allocations: b.Allocations, Frees: b.Frees, PeakAllocatedBytes: b.PeakBytes,
			LiveBytesAtEnd: b.LiveBytesAtEnd, FailedAllocations: b.FailedAllocations,
			UnknownFrees: b.UnknownFrees, AllocatedBytes: b.AllocatedBytes, PeakTimeNs: res.Rel(b.PeakTime)}
	}
	for _, d := range res.Devices {
		jd := JSONDevice{Index: d.Index, Name: analysis.DeviceName(d.Index), PeakBytes: d.PeakBytes,
			PeakTimeNs: res.Rel(d.PeakTime), LiveBytesAtEnd: d.LiveBytesAtEnd}
		if d.CapacityBytes > 0 {
			c := d.CapacityBytes
			jd.CapacityBytes = &c
		}
		jd.ProductName, jd.UUID, jd.PCIBusID = d.Name, d.UUID, d.PCIBusID
		if n := d.NVML; n != nil {
			jd.NVMLSamples = n.Samples
			if at := n.AtPeak; at != nil {
				jd.NVMLUsedAtPeakBytes, jd.NVMLUsedAtPeakTimeNs = ptr(at.UsedBytes), ptr(res.Rel(at.Time))
			}
			jd.NVMLMaxUsedBytes, jd.NVMLMaxUsedTimeNs = ptr(n.Max.UsedBytes), ptr(res.Rel(n.Max.Time))
			jd.NVMLLastUsedBytes, jd.NVMLLastFreeBytes = ptr(n.Last.UsedBytes), ptr(n.Last.FreeBytes)
			jd.NVMLLastTimeNs = ptr(res.Rel(n.Last.Time))
		}
		j.Devices = append(j.Devices, jd)
	}
	for i := range res.Processes {
		p := &res.Processes[i]
		j.Processes = append(j.Processes, jsonProcess(res, p))
		if it := p.Iterations; it != nil {
			ji := JSONIterations{PID: p.PID, ProcessStartNs: res.Rel(p.Start), Command: strings.Join(p.Command, " "),
				Count: it.Count, PeriodNs: it.PeriodNs, Site: it.Site, Frames: nonNil(res.Lines(it.Stack))}
			if len(it.Starts) > 0 {
				ji.FirstStartNs = res.Rel(it.Starts[0])
			}
			ji.LastStartNs = res.Rel(it.LastStart)
			if it.AllocatedBytesPerIteration > 0 {
				ji.AllocatedBytesPerIteration = ptr(it.AllocatedBytesPerIteration)
				ji.LiveGrowthBytesPerIteration = ptr(it.LiveGrowthPerIteration)
			}
			j.Iterations = append(j.Iterations, ji)
		}
	}
	j.Fragmentation = jsonPools(res)
	for _, f := range wordFindings(res) {
		jf := JSONFinding{Kind: f.Kind, Severity: string(f.Severity), Summary: f.Summary, Bytes: f.Bytes,
			Stacks: []JSONStack{}, Remediation: nonNil(f.Remediation), PID: f.PID,
			ProcessStartNs: res.Rel(f.ProcessStart), TimeNs: res.Rel(f.Time)}
		for _, s := range f.Stacks {
			jf.Stacks = append(jf.Stacks, JSONStack{Frames: s.Frames, Bytes: s.Bytes, Count: s.Count, Site: s.Site})
		}
		if l := f.Leak; l != nil {
			_, observed := l.BytesPerSecondObserved()
			jl := &JSONLeak{GrowthBytes: l.GrowthBytes, FromNs: res.Rel(l.From), ToNs: res.Rel(l.To),
				WindowStartNs: res.Rel(l.WindowStart), WindowEndNs: res.Rel(l.WindowEnd), WindowGrowthBytes: l.WindowGrowthBytes,
				ObservedNs: observed, ProjectionHorizonS: analysis.ProjectionFactor * float64(observed) / 1e9,
				LiveBytes: l.Live, BytesPerSecond: l.BytesPerSecond, Seconds: l.Seconds,
				Iterations: l.Iterations, BytesPerIteration: l.BytesPerIteration, BytesPerMinute: l.BytesPerMinute}
			if b, ok := analysis.RateBaseFor(observed); ok {
				jl.RateBase = b.Name
			}
			if l.Iterations > 0 && l.CapacityBytes > 0 {
				jl.CapacityBytes = l.CapacityBytes
				jl.TimeToOOMSeconds = ptr(l.TimeToOOMSeconds)
				jl.TimeToOOMProjected = ptr(l.TimeToOOMProjectable())
				jl.HeadroomBytes, jl.HeadroomBasis = ptr(l.HeadroomBytes), "capacity"
				if l.HeadroomNVML {
					jl.HeadroomBasis, jl.HeadroomTimeNs = "nvml_free", ptr(res.Rel(l.HeadroomTime))
				}
			}
			for _, e := range l.WindowEnds {
				jl.WindowEndsNs = append(jl.WindowEndsNs, res.Rel(e))
			}
			if f.Kind == analysis.KindLeak {
				jl.Layer = leakLayer(l)
				if l.Since != 0 {
					jl.SinceNs = ptr(res.Rel(l.Since))
				}
			}
			jf.Leak = jl
		}
		if c := f.Cache; c != nil {
			jf.Cache = &JSONCache{ReservedPeakBytes: c.ReservedPeakBytes, ReservedPeakNs: res.Rel(c.ReservedPeakTime),
				AllocatedPeakBytes: c.AllocatedPeakBytes, AllocatedPeakNs: res.Rel(c.AllocatedPeakTime),
				ReservedBytesAtEnd: c.ReservedAtEnd, AllocatedBytesAtEnd: c.AllocatedAtEnd}
		}
		if f.OOM != nil {
			o := jsonOOM(res, f.OOM)
			jf.OOM = &o
		}
		if c := f.OOMCalls; c != nil {
			jf.OOMCalls = &JSONOOMCalls{First: jsonFailure(res, &c.First), Count: c.Count, Bytes: c.Bytes}
		}
		jf.Churn = jsonChurn(res, f.Churn)
		j.Findings = append(j.Findings, jf)
	}
	run := res.Run
	j.Run = JSONRun{Tool: run.Tool, Mode: run.Mode, Command: nonNil(run.Command), PID: run.PID, Host: run.Host,
		DurationNs: run.Duration, EndedCleanly: run.Ended, EndReason: run.EndReason, ExitCode: run.ExitCode,
		Events: run.Events, NestedEvents: run.NestedEvents, DeviceSwitches: run.DeviceSwitches,
		DevicesInferred: run.DevicesInferred, NoCallsSeen: run.NoCallsSeen(), Note: noCallsLine(&run),
		StrippedRuntimes: strippedRuntimeLines(&run),
		Unknown:          runUnknown(&run), Moment: jsonMoment(res), Flight: jsonFlight(res),
		IncompleteReasons: IncompleteReasons(res)}
	j.Run.Complete = len(j.Run.IncompleteReasons) == 0
	if run.WallTime != 0 {
		j.Run.StartTime = time.Unix(0, run.WallTime).UTC().Format(time.RFC3339Nano)
	}
	for _, l := range run.Libraries {
		j.Libraries = append(j.Libraries, JSONLibrary{PID: l.PID, Path: l.Path, BuildID: l.BuildID, Symbols: nonNil(l.Symbols), Skipped: l.Skipped,
			StrippedRuntime: l.StrippedRuntime})
	}
	for _, in := range run.Interpreters {
		j.Interpreters = append(j.Interpreters, JSONInterpreter{PID: in.PID, Name: in.Name, Version: in.Version, Path: in.Path, Note: in.Note})
	}
	for _, tl := range res.Timelines {
		jt := JSONTimeline{PID: tl.PID, ProcessStartNs: res.Rel(tl.ProcessStart), Device: analysis.DeviceName(tl.Device), Layer: tl.Layer.String(),
			Space: tl.Space.String(), Points: make([][2]uint64, 0, len(tl.Points))}
		for _, p := range tl.Points {
			jt.Points = append(jt.Points, [2]uint64{res.Rel(p.Time), p.Bytes})
		}
		j.Timelines = append(j.Timelines, jt)
	}
	return j
}

func jsonProcess(res *analysis.Result, p *analysis.Process) JSONProcess {
	jp := JSONProcess{
		PID: p.PID, Command: strings.Join(p.Command, " "), PeakBytes: p.Totals.PeakBytes,
		LiveBytesAtEnd: p.Totals.LiveBytesAtEnd, Argv: nonNil(p.Command), Exe: p.Exe, PPID: p.PPID,
		Unknown:    processUnknown(res),
		PeakTimeNs: res.Rel(p.PeakTime), Allocations: p.Totals.Allocations, Frees: p.Totals.Frees,
		FailedAllocations: p.Totals.FailedAllocations, UnknownFrees: p.Totals.UnknownFrees,
		AllocatedBytes:   p.Totals.AllocatedBytes,
		PeakStacks:       jsonStacks(res, p.PeakStacks),
		LiveAtEndStacks:  jsonStacks(res, p.LiveAtEnd),
		FailedStacks:     jsonStacks(res, p.Failed),
		Devices:          []JSONProcDevices{},
		Books:            jsonBooks(res, p.Books),
		Host:             jsonHost(res, p.Host),
		VMM:              jsonVMM(p.VMM),
		StartNs:          res.Rel(p.Start),
		PreexistingBasis: string(p.Preexisting.Basis),
		Churn:            jsonChurn(res, p.Churn),
		Stops:            p.Stops,
		NVMLAbsent:       p.NVMLAbsent,
	}
	if p.SupersededAt != 0 {
		jp.SupersededNs = ptr(res.Rel(p.SupersededAt))
	}
	if n := p.NVML; n != nil {
		jp.NVML = &JSONProcNVML{Samples: n.Samples, Latest: jsonReconciliation(res, n.Latest)}
		if at := n.AtPeak; at != nil {
			r := jsonReconciliation(res, *at)
			jp.NVML.AtPeak = &r
		}
	}
	if p.Preexisting.Basis != analysis.PreexistingUnknown {
		jp.PreexistingBytesEstimate = ptr(p.Preexisting.Bytes)
	}
	if e := p.PeakEvent; e != nil {
		a := jsonAllocation(res, e)
		jp.PeakEvent = &a
	}
	if f := p.FirstFailure; f != nil {
		ff := jsonFailure(res, f)
		jp.FirstFailure = &ff
	}
	for _, d := range p.Devices {
		jp.Devices = append(jp.Devices, JSONProcDevices{Index: d.Index, Name: analysis.DeviceName(d.Index),
			PeakBytes: d.PeakBytes, PeakTimeNs: res.Rel(d.PeakTime), LiveBytesAtEnd: d.LiveBytesAtEnd})
	}
	return jp
}

func jsonReconciliation(res *analysis.Result, r analysis.Reconciliation) JSONReconciliation {
	return JSONReconciliation{TimeNs: res.Rel(r.Time), NVMLUsedBytes: r.NVMLBytes, TracedLiveBytes: r.TracedBytes,
		GapBytes: r.GapBytes}
}

func jsonNVML(n *analysis.NVML) *JSONNVML {
	if n == nil {
		return nil
	}
	if !n.Available {
		return &JSONNVML{Reason: n.Reason}
	}
	return &JSONNVML{Available: true, Samples: n.Samples, Interruptions: n.Interruptions, LastError: n.LastError,
		Notes: n.Notes}
}

func ptr[T any](v T) *T { return &v }

func jsonBooks(res *analysis.Result, b analysis.Books) JSONBooks {
	one := func(b analysis.Book) JSONBook {
		return JSONBook{Allocations: b.Allocations, Frees: b.Frees, FailedAllocations: b.FailedAllocations,
			AllocatedBytes: b.AllocatedBytes, LiveBytesAtEnd: b.LiveBytesAtEnd, PeakBytes: b.PeakBytes,
			FailedFrees: b.FailedFrees, UnknownFrees: b.UnknownFrees, PeakTimeNs: res.Rel(b.PeakTime)}
	}
	return JSONBooks{Runtime: one(b.Runtime), Driver: one(b.Driver)}
}

func jsonHost(res *analysis.Result, t analysis.Totals) JSONHost {
	return JSONHost{Allocations: t.Allocations, Frees: t.Frees, FailedAllocations: t.FailedAllocations,
		AllocatedBytes: t.AllocatedBytes, PeakBytes: t.PeakBytes, LiveBytesAtEnd: t.LiveBytesAtEnd,
		UnknownFrees: t.UnknownFrees, PeakTimeNs: res.Rel(t.PeakTime), LiveAllocationsAtEnd: t.LiveAllocationsAtEnd}
}

func jsonVMM(v *analysis.VMM) *JSONVMM {
	if v == nil {
		return nil
	}
	bytes := func(b analysis.VMMBytes) JSONVMMBytes {
		return JSONVMMBytes{ReservedPeakBytes: b.ReservedPeakBytes, ReservedBytesAtEnd: b.ReservedBytesAtEnd,
			PhysicalPeakBytes: b.PhysicalPeakBytes, PhysicalBytesAtEnd: b.PhysicalBytesAtEnd,
			MappedPeakBytes: b.MappedPeakBytes, MappedBytesAtEnd: b.MappedBytesAtEnd}
	}
	j := &JSONVMM{Reserves: v.Reserves, Unreserves: v.Unreserves, Creates: v.Creates, Releases: v.Releases,
		Maps: v.Maps, Unmaps: v.Unmaps, FailedCalls: v.FailedCalls, UnknownCalls: v.UnknownCalls,
		JSONVMMBytes: bytes(v.VMMBytes), Devices: []JSONVMMDevice{}}
	for _, d := range v.Devices {
		j.Devices = append(j.Devices, JSONVMMDevice{Index: d.Index, Name: analysis.DeviceName(d.Index),
			JSONVMMBytes: bytes(d.VMMBytes)})
	}
	return j
}

func jsonAllocation(res *analysis.Result, a *analysis.Allocation) JSONAllocation {
	return JSONAllocation{TimeNs: res.Rel(a.Time), Size: a.Size, Device: analysis.DeviceName(a.Device),
		API: a.API.String(), Site: res.Site(a.Stack), Frames: res.Lines(a.Stack)}
}

func jsonStacks(res *analysis.Result, us []analysis.StackUsage) []JSONStack {
	out := make([]JSONStack, 0, len(us))
	for _, u := range us {
		out = append(out, JSONStack{Frames: res.Lines(u.Stack), Bytes: u.Bytes, Count: u.Count, Site: res.Site(u.Stack)})
	}
	return out
}

// nonNil makes an absent list render as [] rather than null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// WriteJSON writes report.json for res: schema vramprof/report/v1, indented,
// in a fixed order so that a replay gives a byte-identical file.
func WriteJSON(w io.Writer, res *analysis.Result) error {
	if res == nil {
		return ErrNilResult
	}
	return encodeJSON(w, NewJSON(res))
}

// encodeJSON writes j as report.json: indented, in the fields' order.
func encodeJSON(w io.Writer, j *JSON) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(j); err != nil {
		return fmt.Errorf("write report.json: %w", err)
	}
	return nil
}

// JSONFlight describes a flight recorder's window (analysis.Flight).
type JSONFlight struct {
	// KeptEvents are the events in the window (run.events);
	// SummarisedEvents the ones before it, in the checkpoint.
	KeptEvents       uint64 `json:"kept_events"`
	SummarisedEvents uint64 `json:"summarised_events"`
	// RestoredAllocations were live at the cut and restored exactly.
	RestoredAllocations uint64 `json:"restored_allocations"`
	// WindowStartNs is when the window begins, since the start.
	WindowStartNs uint64 `json:"window_start_ns"`
	Note          string `json:"note"`
}

func jsonFlight(res *analysis.Result) *JSONFlight {
	f := res.Run.Flight
	if f == nil {
		return nil
	}
	return &JSONFlight{KeptEvents: res.Run.Events, SummarisedEvents: f.SummarisedEvents, RestoredAllocations: f.Restored,
		WindowStartNs: res.Rel(f.CutTime), Note: flightLine(res, afterStart)}
}
