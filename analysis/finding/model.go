package finding

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/vramprof/vramprof/probes/event"
)

// Usage is a number of allocations and the bytes they hold.
type Usage struct {
	Count uint64
	Bytes uint64
}

// Add counts one allocation of size bytes.
func (u *Usage) Add(size uint64) {
	u.Count++
	u.Bytes += size
}

// Sub takes back one allocation of size bytes.
func (u *Usage) Sub(size uint64) {
	u.Count--
	u.Bytes -= size
}

// StackUsage is an aggregate of allocations made at one stack.
type StackUsage struct {
	Stack event.StackID
	Usage
}

// Allocation is one allocation call, copied out of its event.
type Allocation struct {
	Time   uint64
	Addr   uint64
	Size   uint64
	Device int32
	API    event.API
	Layer  event.Layer
	Stack  event.StackID
}

// Failure is a failed allocation and what was live when it failed.
type Failure struct {
	Allocation
	// Ret is the call's error code (cudaError_t).
	Ret int32
	// LiveBytes is what the process had live (all devices) at the failure;
	// DeviceLiveBytes what it had on the failing device.
	LiveBytes       uint64
	DeviceLiveBytes uint64
	// PeakBytes is the process's peak up to the failure.
	PeakBytes uint64
	// LiveStacks is the process's live set at the failure by stack, largest
	// first (at most Options.TopStacks entries).
	LiveStacks []StackUsage
}

// FailedCalls are a process's failed allocation calls with one error (one
// return code of one library), at the segment layer.
type FailedCalls struct {
	// Error is the code with its name (ErrorName).
	Error string
	Ret   int32
	// Driver: the codes are CUresult (the driver's); else cudaError_t.
	Driver bool
	// Count and Bytes are the calls and the bytes they asked for.
	Count, Bytes uint64
	// First is the first such call.
	First Allocation
	// Stacks are the calls by stack, largest request first.
	Stacks []StackUsage
}

// Class is an allocation class: allocations of one size made at one stack on
// one device through one API in one process and layer. It is what one pprof
// sample holds, as Go heap profiles have it (the size is a label).
type Class struct {
	PID uint32
	// ProcessStart is the Start of the process instance (see Process).
	ProcessStart uint64
	Stack        event.StackID
	Device       int32
	API          event.API
	Layer        event.Layer
	// Space is device, physical or host memory. Host classes' Peak is at
	// the process's host peak, not its device peak.
	Space MemorySpace
	Size  uint64
	// Alloc counts every successful allocation of the class.
	Alloc Usage
	// Live is what was live at the end.
	Live Usage
	// Peak is what was live at the process's peak (for its layer, and for
	// host memory its host peak).
	Peak Usage
}

// MemorySpace says what kind of memory an allocation class holds: pprof's
// "space" label.
type MemorySpace uint8

// Memory spaces. Device and physical memory together are the device usage;
// host memory is never added to them.
const (
	// SpaceDevice is device memory from an allocation call (cudaMalloc,
	// cuMemAlloc_v2...), keyed by address.
	SpaceDevice MemorySpace = iota
	// SpacePhysical is physical device memory from cuMemCreate, keyed by
	// its handle in a space of its own, so a handle never collides with
	// an address.
	SpacePhysical
	// SpaceHost is pinned host memory (cudaMallocHost, cuMemHostAlloc...).
	SpaceHost
)

var spaceNames = [...]string{"device", "physical", "host"}

func (m MemorySpace) String() string {
	if int(m) < len(spaceNames) {
		return spaceNames[m]
	}
	return fmt.Sprintf("space(%d)", uint8(m))
}

// Pool is one process's caching allocator on one device, seen through the
// geometry of its blocks inside its segments (see doc.go,
// "Fragmentation"). Listed only when block-layer events came for it.
type Pool struct {
	PID uint32
	// ProcessStart is the Start of the process instance (see Process).
	ProcessStart uint64
	Device       int32
	// Worst is the state at the most cached free bytes (reserved but not
	// allocated) while blocks were allocated; nil when no block was ever
	// allocated inside a traced segment.
	Worst *PoolState
	// AtEnd is the state at the end of the stream.
	AtEnd PoolState
	// OOMs are the failed segment allocations (cudaMalloc returning an
	// error) made while the block layer was traced, in order.
	OOMs []OOM
	// Expandable says the allocator mapped its segments page by page
	// (cuMemMap: PyTorch's expandable_segments:True); its segments are
	// then the runs of mapped pages inside each reserved range.
	Expandable bool
}

// PoolState is a caching allocator's geometry at one moment.
type PoolState struct {
	Time uint64
	// ReservedBytes sums the live segments; AllocatedBytes the live blocks
	// inside them (requested sizes); CachedFreeBytes is the difference:
	// memory the allocator holds and no tensor uses.
	ReservedBytes   uint64
	AllocatedBytes  uint64
	CachedFreeBytes uint64
	// LargestFreeRange is the largest contiguous free range inside one
	// segment: the largest request the cache could serve without a new
	// segment. FreeRanges counts the free ranges (holes between live blocks
	// and at the ends of segments).
	LargestFreeRange uint64
	FreeRanges       int
	// Segments counts the live segments.
	Segments int
	// PinnedSegments counts the segments held by one live block smaller
	// than a quarter of the segment: empty_cache cannot release them. Not
	// mapped ranges (expandable segments): empty_cache unmaps the free
	// pages around a block.
	// PinnedBytes is the free part of those segments.
	PinnedSegments int
	PinnedBytes    uint64
	// UnplacedBytes are live blocks in no traced segment: a segment from
	// before attach, or one whose record was lost. In neither reserved
	// nor allocated.
	UnplacedBytes uint64
}

// OOMReport is a caching allocator's own figures for a request it gave up
// on, as it reported them before raising out-of-memory (PyTorch's
// c10::reportOutOfMemoryToProfiler, event.KindOOMReport): the request
// (rounded as the allocator rounds it), and the bytes its blocks held and
// it had reserved, by its own statistics (allocated_bytes and
// reserved_bytes, current).
type OOMReport struct {
	Time           uint64
	RequestBytes   uint64
	AllocatedBytes uint64
	ReservedBytes  uint64
}

// OOMKind tells a fragmentation OOM from a capacity OOM.
type OOMKind string

// OOM kinds.
const (
	// OOMFragmentation: the cache held at least the request in free bytes,
	// in ranges none of which fits it. Defragmenting (expandable segments)
	// would have served it.
	OOMFragmentation OOMKind = "fragmentation"
	// OOMCapacity: the cache held less than the request even if all its
	// free bytes were one range.
	OOMCapacity OOMKind = "capacity"
)

// OOMOutcome says how a failed segment allocation ended.
type OOMOutcome string

// OOM outcomes.
const (
	// OOMPending is internal: a retry may still follow.
	OOMPending OOMOutcome = "pending"
	// OOMRetried: the allocator freed cached segments and a retry of the
	// same size on the same thread succeeded. The run went on; the cache
	// was flushed.
	OOMRetried OOMOutcome = "retry_succeeded"
	// OOMFinal: the retry failed too, or none came before the next block
	// event or the end: the framework raised out-of-memory.
	OOMFinal OOMOutcome = "final"
)

// OOM is one failed segment allocation while the block layer was traced,
// with the allocator's geometry at that moment (before it freed its cache).
type OOM struct {
	// Index numbers the OOMs of the run from 1, across pools: the CLI's
	// oom-<Index>.pb.gz.
	Index  int
	Time   uint64
	Device int32
	TID    uint32
	Stack  event.StackID
	// API is the failing call's, which names Ret (ErrorName).
	API event.API
	Ret int32
	// RequestBytes is the failing cudaMalloc's size: the segment the
	// allocator asked for, at least the tensor's request (which the block
	// layer does not report for a failed request). Under expandable
	// segments (Expandable), the request the allocator reported
	// (Reported), or without a report the failing cuMemCreate's size plus
	// the physical memory the thread created for the same request since
	// its last mapping: the pages it asked the driver for.
	RequestBytes uint64
	// Expandable says the failing call was a cuMemCreate of an
	// expandable segment's pages, not a cudaMalloc.
	Expandable bool
	// PagesBytes, under expandable segments, is the pages the allocator
	// asked the driver for (see RequestBytes), the refused one included:
	// the kind (fragmentation or capacity) is judged on them.
	PagesBytes uint64
	// Reported is the allocator's own account of the request it gave up
	// on (event.KindOOMReport), nil when it made none. Under expandable
	// segments RequestBytes is then its request: the pages asked stop at
	// the first the driver refused, a lower bound.
	Reported *OOMReport
	// State is the geometry at the failure.
	State PoolState
	Kind  OOMKind
	// Outcome is retry_succeeded or final; RetryTime the retry's time (0
	// when none came).
	Outcome   OOMOutcome
	RetryTime uint64
	// ReleasedBytes and ReleasedSegments are the segments freed between
	// the failure and the retry (the allocator flushing its cache).
	ReleasedBytes    uint64
	ReleasedSegments int
	// CostNs is the time spent inside the failed call, the frees that
	// flushed the cache and the retry.
	CostNs uint64
	// LiveStacks are the live blocks at the failure by stack, largest
	// first (at most Options.TopStacks).
	LiveStacks []StackUsage
	// Live is everything the pool held at the failure as allocation
	// classes (segments and blocks): the samples of oom-<Index>.pb.gz.
	Live []Class
}

// outOfMemory is the out-of-memory code of both numberings
// (cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY).
const outOfMemory = 2

// IsOutOfMemory reports whether an allocation's return code says the memory
// ran out, as opposed to a setup or usage error (no device, no driver, an
// invalid argument), which no amount of freeing would fix.
func IsOutOfMemory(ret int32) bool { return ret == outOfMemory }

// TopStacks returns m's stacks largest first (bytes, then allocations, then
// stack ID), the first n when n > 0.
func TopStacks(m map[event.StackID]*Usage, n int) []StackUsage {
	out := make([]StackUsage, 0, len(m))
	for id, u := range m {
		out = append(out, StackUsage{Stack: id, Usage: *u})
	}
	slices.SortFunc(out, func(x, y StackUsage) int {
		return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(y.Count, x.Count), cmp.Compare(x.Stack, y.Stack))
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}
