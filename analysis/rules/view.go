package rules

import (
	"github.com/vramprof/vramprof/analysis/finding"
	"github.com/vramprof/vramprof/probes/event"
)

// View is everything a rule reads: the finished model of one analysis,
// narrowed to the figures the rules use. The Analyzer builds it once at
// Finish (analysis/view.go), after every figure of the Result is final,
// and every rule of All reads the same View; no rule changes it.
//
// Units and layers, everywhere below: times are absolute nanoseconds on
// the stream's clock (CLOCK_MONOTONIC), bytes are bytes. "Device memory"
// is the segment layer's (what the process got from CUDA: allocations and
// physical memory, never pinned host memory); "tensors" are the block
// layer's (a caching allocator's blocks inside its segments), present only
// when the block layer was traced. A process is a process instance (a PID
// reused by a new process is another instance, told apart by Start).
type View struct {
	// Start is the run's first traced moment (Result.Run.Start).
	Start uint64
	// LastEvent is the latest event time: the leak windows end there.
	LastEvent uint64
	// RootPID is the run's own process (run mode) or the attached one;
	// RootEnded says its exit was recorded, at RootEnd. A process that ran
	// to the end of the run had memory until then, whatever its last
	// allocation.
	RootPID   uint32
	RootEnded bool
	RootEnd   uint64

	// TopStacks is how many stacks a finding names (Options.TopStacks).
	TopStacks int
	// LeakWindows is how many windows the leak rule cuts the run into
	// (Options.LeakWindows); SpikeWindow how briefly, in ns, an
	// allocation must live to be a spike candidate (Options.SpikeWindow).
	LeakWindows int
	SpikeWindow uint64
	// CapacityOption is each device's memory size as the user gave it
	// (Options.Capacity, 0 when not given); Capacities the sizes the
	// recording's DeviceInfo records (NVML) gave, by device index. Read
	// them through Capacity.
	CapacityOption uint64
	Capacities     map[int32]uint64

	// Processes are the processes Result.Processes lists, in its order
	// (by PID, then Start).
	Processes []*Process
	// Devices are Result.Devices: each device's memory, all processes
	// together, by index.
	Devices []Device
	// Pools are Result.Pools: the caching allocators whose blocks were
	// traced, one per process and device, with their failed segment
	// allocations (Pool.OOMs). OOMGeometry adds, by OOM.Index, what the
	// OOM forensics read of the segments at each failure.
	Pools       []finding.Pool
	OOMGeometry map[int]OOMGeometry
	// Series are the model's stacks: one per process, scope and stack, in
	// the order the model made them. Their processes need not be listed in
	// Processes (a process known from its block layer alone).
	Series []*Series
	// Grid is the leak grid the series' histories are kept on; nil when the
	// stream had no event.
	Grid Grid
	// Stacks are the stack records by ID (Result.Stacks): Lines and Site
	// read them.
	Stacks map[event.StackID]*Stack
	// NVMLFree returns NVML's free bytes on device at its latest sample at
	// or before t, and that sample's time; ok is false when there is none.
	// Nil when the recording has no NVML sample.
	NVMLFree func(device int32, t uint64) (free, at uint64, ok bool)
}

// Process is one process instance as the rules read it.
type Process struct {
	PID uint32
	// Start is the instance's start (Result's Process.Start): with PID,
	// what a finding names.
	Start uint64
	PPID  uint32
	// Listed says Result.Processes lists the instance (View.Processes).
	Listed bool
	// SupersededAt is when a later instance took the PID; 0 while current.
	SupersededAt uint64
	// PeakBytes is the process's device memory peak across its devices,
	// first reached at PeakTime (Process.Totals.PeakBytes, PeakTime).
	PeakBytes uint64
	PeakTime  uint64
	// Devices are the process's device memory peaks, by device index.
	Devices []ProcessDevice
	// HostPeakBytes and HostLiveBytesAtEnd are its pinned host memory
	// (Process.Host).
	HostPeakBytes, HostLiveBytesAtEnd uint64
	// FirstOOM is the first allocation that failed for want of memory (nil
	// when none did); FailedCalls every failure grouped by error.
	FirstOOM    *finding.Failure
	FailedCalls []finding.FailedCalls
	// Churn is the process's segment allocator traffic (Process.Churn);
	// nil when it made no device allocation or free call.
	Churn *finding.Churn
	// Pooled says a pool of View.Pools is the process's: its caching
	// allocator's blocks were traced.
	Pooled bool
	// Segments is the process's device memory, Tensors its tensors (nil
	// when no block was traced), Host its pinned host memory; nil when it
	// had none in that scope.
	Segments, Tensors, Host *Space
	// CacheStacks are, when the process's tensors were traced (a tensor
	// was allocated), the stacks of the segments its caching allocator
	// placed blocks in: the cache, never a leak. Nil without tensors;
	// empty when no block was seen inside a traced segment.
	CacheStacks map[event.StackID]bool
	// Loop is the process's training loop (see the analysis doc,
	// "Iterations"); nil when none was found.
	Loop *Loop
}

// ProcessDevice is one process's peak on one device.
type ProcessDevice struct {
	Index     int32
	PeakBytes uint64
}

// Space is one process's memory in one scope (device memory, tensors or
// pinned host memory).
type Space struct {
	// PeakBytes is the most it held at once, first at PeakTime.
	PeakBytes, PeakTime uint64
	// LastChange is the latest time memory became live or went in the
	// scope: the end of the process's activity there.
	LastChange uint64
	// LiveBytesAtEnd is what it held at the end.
	LiveBytesAtEnd uint64
}

// Loop is a process's training loop: its iterations' first allocations.
type Loop struct {
	// Seq, Starts and Index are per iteration the event sequence number
	// of its first allocation, its time and the iteration's number (0 for
	// the first; a compacted log may skip one).
	Seq, Starts, Index []uint64
	// PeriodNs is the loop's period; Count its iterations.
	PeriodNs, Count uint64
}

// Device is one device's memory, all processes together (Result.Devices).
type Device struct {
	// Index is the device's; event.DeviceUnknown for memory on no known
	// device.
	Index int32
	// PeakBytes is the device memory peak, first at PeakTime;
	// LiveBytesAtEnd what was live at the end; CapacityBytes the device's
	// size when known (else 0).
	PeakBytes, PeakTime, LiveBytesAtEnd, CapacityBytes uint64
	// PeakStacks is what was live at the device's peak by stack, largest
	// first.
	PeakStacks []finding.StackUsage
}

// OOMGeometry is the segments at a failed segment allocation, beside the
// OOM's PoolState.
type OOMGeometry struct {
	// MaxSharedSegment is the largest segment holding live blocks smaller
	// than the request.
	MaxSharedSegment uint64
	// IdleLargeBytes sums the segments with no live block larger than a
	// small-pool segment (2 MiB): what PyTorch's garbage collection could
	// release.
	IdleLargeBytes uint64
}

// Scope is what a series counts.
type Scope uint8

// Scopes.
const (
	// ScopeSegments is device memory at the segment layer.
	ScopeSegments Scope = iota
	// ScopeHost is pinned host memory (segment layer).
	ScopeHost
	// ScopeTensors is the block layer: a caching allocator's blocks.
	ScopeTensors
	// ScopeOther is any other (no rule reads it).
	ScopeOther
)

// Series is one stack of one process in one scope: its allocations, what
// it held at the end, its history and its brief allocations.
type Series struct {
	Process *Process
	Scope   Scope
	// Layer is the scope's layer (event.LayerBlock for tensors).
	Layer event.Layer
	Stack event.StackID
	// Alloc counts every successful allocation; Live what was live at the
	// end.
	Alloc, Live finding.Usage
	// LiveByDevice is Live.Bytes by device index, with every device the
	// series allocated on (0 where nothing of it is live at the end).
	LiveByDevice map[int32]uint64
	// Brief are the allocations freed within View.SpikeWindow (device
	// memory and tensors only); nil when none was.
	Brief *Brief
	// History is the series' live bytes over time.
	History History
}

// Brief is a series' short-lived allocations.
type Brief struct {
	// Count counts them all; Lives are the largest (at most 16).
	Count uint64
	Lives []Life
}

// Life is one allocation's life: allocated at From, freed at To, Size
// bytes.
type Life struct {
	From, To, Size uint64
}

// History is a series' live bytes over time as the model kept them.
type History interface {
	// Buckets returns the live bytes at the end of each of the first n
	// buckets of View.Grid, the last one the latest value. It may be
	// called once per series and rule.
	Buckets(n int) []uint64
	// Log returns the live bytes event by event; nil when the model did
	// not keep them all (the log overflowed, or was never kept).
	Log() LiveLog
}

// LiveLog is a series' live bytes event by event.
type LiveLog interface {
	// Before returns the live bytes just before event seq.
	Before(seq uint64) uint64
	// At returns the live bytes at time t.
	At(t uint64) uint64
}

// Grid is the leak grid: the run's time from Origin in buckets of equal
// width (the width doubles as the run grows).
type Grid interface {
	// Origin is the grid's first moment, the first event's time.
	Origin() uint64
	// Index returns the bucket of time t (0 before Origin). t must not lie
	// past View.LastEvent.
	Index(t uint64) int
	// BucketEnd returns the end time of bucket i.
	BucketEnd(i int) uint64
}

// Stack is a stack record as the rules read it.
type Stack struct {
	// Frames are the raw frames, leaf first.
	Frames []event.Frame
	// Lines are the frames rendered ("function (file:line)", ...).
	Lines []string
	// Site names where the user's code asked for memory.
	Site string
}

// Capacity returns device's memory size: CapacityOption when given, else
// the recording's; 0 when unknown.
func (v *View) Capacity(device int32) uint64 {
	if v.CapacityOption != 0 {
		return v.CapacityOption
	}
	return v.Capacities[device]
}

// nvmlFree is NVMLFree, false when it is nil.
func (v *View) nvmlFree(device int32, t uint64) (free, at uint64, ok bool) {
	if v.NVMLFree == nil {
		return 0, 0, false
	}
	return v.NVMLFree(device, t)
}

// Lines returns the rendered frames of stack id, leaf first;
// [finding.NoStack] when the stack is unknown or empty.
func (v *View) Lines(id event.StackID) []string {
	if s := v.Stacks[id]; s != nil && len(s.Lines) > 0 {
		return s.Lines
	}
	return []string{finding.NoStack}
}

// Site returns the site of stack id; finding.NoStack when unknown.
func (v *View) Site(id event.StackID) string {
	if s := v.Stacks[id]; s != nil {
		return s.Site
	}
	return finding.NoStack
}

// FindingStacks returns the first n of us as a finding's stacks, with
// their rendered frames and sites.
func (v *View) FindingStacks(us []finding.StackUsage, n int) []finding.FindingStack {
	out := make([]finding.FindingStack, 0, min(len(us), n))
	for _, u := range us {
		if len(out) == n {
			break
		}
		out = append(out, finding.FindingStack{Stack: u.Stack, Frames: v.Lines(u.Stack), Site: v.Site(u.Stack),
			Count: u.Count, Bytes: u.Bytes})
	}
	return out
}
