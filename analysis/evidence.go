package analysis

import (
	"cmp"

	"github.com/vramprof/vramprof/probes/event"
)

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

// RankFindings orders findings by bytes at stake, then severity, kind and
// process: the order of Result.Findings. Findings that tie are ordered by
// their wording, then their first stack (report sorts them so).
func RankFindings(x, y *Finding) int {
	return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(severityRank(x.Severity), severityRank(y.Severity)),
		cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.PID, y.PID), cmp.Compare(x.ProcessStart, y.ProcessStart))
}

// FirstStack returns a finding's first stack; 0 when it names none.
func FirstStack(f *Finding) event.StackID {
	if len(f.Stacks) == 0 {
		return 0
	}
	return f.Stacks[0].Stack
}
