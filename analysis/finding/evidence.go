package finding

import "github.com/vramprof/vramprof/probes/event"

// A finding is facts: the figures, stacks and times its rule used, and
// which variant of the advice applies. The analysis writes no sentence and
// formats no number for people; package report words every finding from
// these facts (report.json's summary and remediation, the Markdown, text
// and HTML reports). Each kind carries its own evidence below, next to the
// Finding's common fields; the fields a kind does not use are nil.

// PeakEvidence is what a peak finding rests on.
type PeakEvidence struct {
	// Crossing is the allocation that set the process's peak
	// (Process.PeakEvent).
	Crossing Allocation
	// Largest are the largest stacks at the peak, largest first, until
	// they cover half of it (at most three): the buffers to reduce.
	Largest []StackUsage
	// With a block layer, tensors decide what to reduce: TensorPeakBytes
	// is the most the process's tensors held at once (at TensorPeakTime),
	// and Tensors the largest tensor stacks then, largest first, until
	// they cover half of it (at most three). Empty without a block layer.
	TensorPeakBytes uint64
	TensorPeakTime  uint64
	Tensors         []StackUsage
}

// OOMCalls is what an oom finding without the block layer rests on: the
// process's first allocation that failed for want of memory, and all of
// them counted.
type OOMCalls struct {
	// First is Process.FirstOOM.
	First Failure
	// Count and Bytes sum the out-of-memory failures of both libraries.
	Count, Bytes uint64
}

// FailedCallEvidence is what a failed_call finding rests on.
type FailedCallEvidence struct {
	// Calls is the group of failures with one error.
	Calls FailedCalls
	// Setup says the error means CUDA cannot work in the process at all
	// (IsSetupError): the advice is the setup to fix, not the call.
	Setup bool
}

// PoolEvidence is what an oom finding of the block layer or a
// fragmentation finding rests on, beside Finding.OOM.
type PoolEvidence struct {
	// Device is the pool's device.
	Device int32
	// Worst is the pool's state at its worst moment, for a fragmentation
	// finding without a failed request (Finding.OOM nil); nil otherwise.
	Worst *PoolState
	// IdleLargeBytes sums, at Finding.OOM, the segments without a live
	// block larger than a small-pool segment: what PyTorch's garbage
	// collection could release.
	IdleLargeBytes uint64
	// MaxSharedSegment is, at Finding.OOM, the largest segment holding
	// live blocks smaller than the request; SplitSizeMiB the
	// max_split_size_mb value it supports, 0 when none does (the advice
	// is then not given).
	MaxSharedSegment uint64
	SplitSizeMiB     uint64
	// GC is the evidence for garbage_collection_threshold on a
	// fragmentation finding; nil when none fits.
	GC *GCThreshold
	// Expandable says the pool's allocator maps its segments page by page
	// (expandable_segments:True is already on): no advice proposes it.
	Expandable bool
	// Failures counts, on a fragmentation finding for a final OOM, the
	// pool's final failing requests at which the cache held at least the
	// request free; Finding.OOM is the worst of them (the most cached free
	// bytes).
	Failures int
	// Advice is what an oom finding of the block layer advises first;
	// "" on a fragmentation finding.
	Advice PoolAdvice
}

// PoolAdvice is the first remedy for a failed segment allocation.
type PoolAdvice string

// Pool advice.
const (
	// AdviceExpandable: the cache held more free bytes than the request,
	// in ranges none of which fits it: expandable_segments:True grows
	// segments in place (then max_split_size_mb when SplitSizeMiB is set).
	AdviceExpandable PoolAdvice = "expandable_segments"
	// AdviceLowerPeak: a retried failure while the cache could not have
	// served the request: the device was nearly full; lower the peak
	// before it becomes a final OOM.
	AdviceLowerPeak PoolAdvice = "lower_peak"
	// AdviceReduceBatch: a capacity OOM: tensors need less memory; no
	// allocator setting would avoid it.
	AdviceReduceBatch PoolAdvice = "reduce_batch"
	// AdviceInterleaved: a fragmentation OOM under expandable segments
	// (PoolEvidence.Expandable): the allocator had unmapped every wholly
	// free page before it gave up, and the free bytes that remained lie
	// between live blocks, in pages they share: the live blocks around
	// them must go sooner, or be allocated apart (long-lived first).
	AdviceInterleaved PoolAdvice = "interleaved_lifetimes"
)

// GCThreshold is the evidence that PyTorch's garbage collection would have
// avoided a synchronizing free-all (see doc.go, "Fragmentation"): a failed
// cudaMalloc whose flush-and-retry worked while the cache held more than
// the request.
type GCThreshold struct {
	// OOM is the retried failure (its Live omitted); IdleLargeBytes the
	// whole free large segments at it.
	OOM            OOM
	IdleLargeBytes uint64
	// CapacityBytes is the device's memory (Options.Capacity or NVML)
	// when CapacityKnown; else the least the retry proved available:
	// reserved - released + request.
	CapacityBytes uint64
	CapacityKnown bool
	// Threshold is T in hundredths:
	// floor(100 * (capacity - request) / capacity).
	Threshold uint64
}

// PinnedEvidence is what a pinned_host_growth finding rests on, beside
// Finding.Leak (which sums the growing stacks).
type PinnedEvidence struct {
	// Growing are all the growing stacks, largest growth first: Bytes is
	// a stack's growth over the run, Count its allocations live at the end.
	Growing []StackUsage
	// HostPeakBytes and HostLiveBytesAtEnd are the process's pinned host
	// figures (Process.Host).
	HostPeakBytes, HostLiveBytesAtEnd uint64
	// PinMemoryStack is the first growing stack that runs through
	// PyTorch's pin_memory, PinMemoryFrame that frame rendered; "" when
	// none does (the DataLoader advice is then not given).
	PinMemoryStack event.StackID
	PinMemoryFrame string
}

// SpikeEvidence is what a spike finding rests on; the site's brief
// allocations are Finding.Stacks[0].Count, the spike's height
// Finding.Bytes.
type SpikeEvidence struct {
	// LongestNs is the longest life among the brief allocations.
	LongestNs uint64
	// SetPeak says the process's peak (PeakBytes at PeakTime) fell inside
	// one of them.
	SetPeak   bool
	PeakBytes uint64
	PeakTime  uint64
	// Layer is the spike's: event.LayerBlock for tensors, whose peak
	// (the most the process's tensors held at once) PeakBytes is then;
	// else the segment layer and the process's peak.
	Layer event.Layer
}

// ImbalanceEvidence is what a device_imbalance finding rests on: the
// heaviest and the lightest of the devices in use; the difference is
// Finding.Bytes.
type ImbalanceEvidence struct {
	Heavy, Light DevicePeak
	// Devices counts the devices in use.
	Devices int
	// Stacks are the code paths that hold more on the heavy device, the
	// largest difference first (at most three).
	Stacks []ImbalanceStack
}

// DevicePeak is one device's peak in an imbalance.
type DevicePeak struct {
	Index         int32
	PeakBytes     uint64
	CapacityBytes uint64
	// PIDs are the processes that held memory on it, sorted, once each.
	PIDs []uint32
}

// ImbalanceStack is one code path's bytes at the heavy device's peak and
// the same frames' bytes at the light device's peak.
type ImbalanceStack struct {
	Stack                  event.StackID
	HeavyBytes, LightBytes uint64
}

// CacheEvidence is what a cache_growth finding rests on (see doc.go, "The
// cache"): a process's reserve (its segments, device memory at the segment
// layer) against its tensors (the block layer), at their peaks and at the
// end.
type CacheEvidence struct {
	// ReservedPeakBytes is the process's segment peak (the allocator's
	// segments and any other device memory it got from CUDA) and
	// ReservedPeakTime when it was first reached: the reserve never grew
	// past it after.
	ReservedPeakBytes uint64
	ReservedPeakTime  uint64
	// AllocatedPeakBytes is the most its tensors held at once and
	// AllocatedPeakTime when.
	AllocatedPeakBytes uint64
	AllocatedPeakTime  uint64
	// ReservedAtEnd and AllocatedAtEnd are both at the end.
	ReservedAtEnd  uint64
	AllocatedAtEnd uint64
	// End is the process's last traced moment (the run's end): the
	// reserve was flat from ReservedPeakTime to it at most.
	End uint64
}

// Leak is the evidence behind a leak finding: the stack's live bytes at the
// end of each window (see the leak rule in doc.go).
type Leak struct {
	// GrowthBytes is the growth over the run (the Finding's Bytes): the
	// live bytes at the end minus those at the start of tracing, from From
	// (the process's first traced moment) to To (the end). Tracing knows
	// no stack of memory allocated before it began, so a stack's live
	// bytes at the start are 0 and its growth is what it allocated during
	// the run and still held at the end.
	GrowthBytes uint64
	From, To    uint64
	// WindowEnds are the windows' end times; the last is Run.End.
	WindowEnds []uint64
	// Live is the stack's live bytes at each window end.
	Live []uint64
	// WindowStart and WindowEnd are the end of the first window and the
	// end of the last; WindowGrowthBytes is the growth between them
	// (Live[W-1] - Live[0]): the leak rule's evidence, not the bytes at
	// stake.
	WindowStart, WindowEnd uint64
	WindowGrowthBytes      uint64
	// BytesPerSecond is the window growth divided by the time from the end
	// of the first window to the end of the run.
	BytesPerSecond float64
	// Seconds is that time span in seconds.
	Seconds float64
	// Iterations is the process's iteration count and PeriodNs its
	// period when a loop was detected; 0 otherwise, and then the
	// per-iteration figures are 0 too.
	Iterations uint64
	PeriodNs   uint64
	// BytesPerIteration is the least-squares slope of the stack's live
	// bytes at the iteration boundaries; BytesPerMinute the same over the
	// period.
	BytesPerIteration float64
	BytesPerMinute    float64
	// CapacityBytes is the capacity of Device, where the stack holds the
	// most, when known (0 otherwise); TimeToOOMSeconds is HeadroomBytes /
	// the rate, 0 when nothing is left.
	Device           int32
	CapacityBytes    uint64
	TimeToOOMSeconds float64
	// HeadroomBytes is what Device had left for the growth at the end.
	// With HeadroomNVML it is NVML's free bytes at its latest sample, at
	// or before the root process's exit when it exited (HeadroomTime):
	// every process's memory, CUDA contexts
	// and the driver's reservations are out of it. Otherwise (no NVML
	// sample, or a capacity the user gave) it is the capacity less what
	// the traced processes held on the device at the end, and HeadroomTime
	// is 0.
	HeadroomBytes uint64
	HeadroomTime  uint64
	HeadroomNVML  bool
	// Layer is the stack's layer: event.LayerBlock for tensors (a
	// caching allocator's blocks, which decide when they were traced),
	// else the segment layer.
	Layer event.Layer
	// Since is when the growth began: the start of the first iteration
	// from which the stack's live bytes at the iteration starts never
	// fell; 0 when unknown (no loop, or the stack's change log
	// overflowed).
	Since uint64
}

// Churn is a process's traffic into the segment allocator (cudaMalloc,
// cudaFree and the like, device memory, not nested) and its
// release-and-reallocate cycles (see doc.go, "Churn").
type Churn struct {
	// Allocs and Frees count the calls (failed ones included); AllocNs and
	// FreeNs the time spent inside them.
	Allocs, Frees   uint64
	AllocNs, FreeNs uint64
	// CallsPerSecond is (Allocs + Frees) over the run's duration,
	// ObservedNs; texts quote it per second only from a second observed
	// (see doc.go, "Rates and projections").
	CallsPerSecond float64
	ObservedNs     uint64
	// Cycles counts segments freed and a segment of the same size
	// allocated again on the same device within ChurnWindow; CycleBytes
	// sums their sizes; CycleNs is the time inside those frees and
	// allocations; CycleGapNs sums the time each size stayed released.
	Cycles     uint64
	CycleBytes uint64
	CycleNs    uint64
	CycleGapNs uint64
	// Releases counts the rounds of cycles: a cycle whose segment was
	// freed after the previous cycle's allocation starts one (a cache
	// emptied, then refilled). empty_cache() every step makes one a step.
	Releases uint64
	// Iterations is the process's loop's iteration count (0 when no loop
	// was found): the rounds are weighed against it.
	Iterations uint64
	// CostMsPerSecond is CycleNs in milliseconds per second of run.
	CostMsPerSecond float64
	// FreeStacks and AllocStacks are the cycles' frees and allocations by
	// stack, largest first.
	FreeStacks  []StackUsage
	AllocStacks []StackUsage
	// TensorFrees counts the tensor frees of the block layer (0 when it
	// was not traced); PassedFrees those the allocator passed straight to
	// cudaFree (a free of the same pointer and size, next on the thread).
	TensorFrees, PassedFrees uint64
	// CachingOff: nearly every tensor free was passed to cudaFree (see
	// cachingOffShare): the allocator did not cache, so its cycles are the
	// tensors' own, not a cache released by empty_cache().
	CachingOff bool
}
