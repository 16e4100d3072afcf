package report

import "github.com/vramprof/vramprof/analysis"

// JSONPool is one process's caching allocator on one device, from the
// geometry of its blocks inside its segments: report.json's
// "fragmentation" entries, present when the block layer was traced.
type JSONPool struct {
	PID            uint32 `json:"pid"`
	ProcessStartNs uint64 `json:"process_start_ns"`
	Device         string `json:"device"`
	// Worst is the state at the most cached free bytes while tensors were
	// allocated; null when none was.
	Worst *JSONPoolState `json:"worst"`
	AtEnd JSONPoolState  `json:"at_end"`
	// OOMs are the failed segment allocations while blocks were traced.
	OOMs []JSONOOM `json:"ooms"`
	// Expandable says the allocator maps its segments page by page
	// (expandable_segments:True): segments are runs of mapped pages.
	Expandable bool `json:"expandable_segments"`
}

// JSONPoolState is an allocator's geometry at one moment (see
// analysis.PoolState). cached_free_bytes = reserved_bytes -
// allocated_bytes.
type JSONPoolState struct {
	TimeNs           uint64 `json:"time_ns"`
	ReservedBytes    uint64 `json:"reserved_bytes"`
	AllocatedBytes   uint64 `json:"allocated_bytes"`
	CachedFreeBytes  uint64 `json:"cached_free_bytes"`
	LargestFreeRange uint64 `json:"largest_free_range"`
	FreeRanges       int    `json:"free_ranges"`
	Segments         int    `json:"segments"`
	PinnedSegments   int    `json:"pinned_segments"`
	PinnedBytes      uint64 `json:"pinned_bytes"`
	UnplacedBytes    uint64 `json:"unplaced_bytes"`
}

// JSONOOM is one failed segment allocation with the geometry before the
// allocator freed its cache. RequestBytes is the failing cudaMalloc's size
// (the segment asked for; the tensor's own request is not observable).
type JSONOOM struct {
	Index        int    `json:"index"`
	TimeNs       uint64 `json:"time_ns"`
	Device       string `json:"device"`
	RequestBytes uint64 `json:"request_bytes"`
	Error        string `json:"error"`
	// Kind is "fragmentation" (cached free >= request) or "capacity".
	Kind string `json:"oom_kind"`
	// Expandable says the failing call was a cuMemCreate of an expandable
	// segment's pages: RequestBytes is then the allocator's reported
	// request (Reported), or without a report the pages it asked the
	// driver for, the failing one included.
	Expandable bool `json:"expandable_segments"`
	// PagesBytes, under expandable segments, is the pages the allocator
	// asked the driver for, the failing one included (absent otherwise).
	PagesBytes uint64 `json:"pages_bytes,omitempty"`
	// Reported is the allocator's own account of the request it gave up
	// on (PyTorch's c10::reportOutOfMemoryToProfiler); absent when it made
	// none. Under expandable segments RequestBytes is its request.
	Reported *JSONOOMReport `json:"allocator_report,omitempty"`
	// Outcome is "retry_succeeded" or "final".
	Outcome          string        `json:"outcome"`
	RetryTimeNs      *uint64       `json:"retry_time_ns"`
	ReleasedBytes    uint64        `json:"released_bytes"`
	ReleasedSegments int           `json:"released_segments"`
	CostNs           uint64        `json:"cost_ns"`
	Site             string        `json:"site"`
	Frames           []string      `json:"frames"`
	State            JSONPoolState `json:"state"`
	// LiveStacks are the live blocks at the failure by stack.
	LiveStacks []JSONStack `json:"live_stacks"`
	// Profile names the pprof file of what was live then, in the output
	// directory.
	Profile string `json:"profile"`
}

// JSONOOMReport is a caching allocator's figures for a request it gave up
// on (see analysis.OOMReport): the request as it rounded it, and its
// allocated and reserved bytes by its own statistics.
type JSONOOMReport struct {
	TimeNs         uint64 `json:"time_ns"`
	RequestBytes   uint64 `json:"request_bytes"`
	AllocatedBytes uint64 `json:"allocated_bytes"`
	ReservedBytes  uint64 `json:"reserved_bytes"`
}

// JSONChurn is a process's segment allocator traffic (see analysis.Churn).
type JSONChurn struct {
	Allocs         uint64  `json:"allocs"`
	Frees          uint64  `json:"frees"`
	AllocNs        uint64  `json:"alloc_ns"`
	FreeNs         uint64  `json:"free_ns"`
	CallsPerSecond float64 `json:"calls_per_second"`
	// ObservedNs is the span CallsPerSecond was measured over (the run):
	// the texts quote a rate per second only from a second observed.
	ObservedNs uint64 `json:"observed_ns"`
	Cycles     uint64 `json:"cycles"`
	CycleBytes uint64 `json:"cycle_bytes"`
	CycleNs    uint64 `json:"cycle_ns"`
	CycleGapNs uint64 `json:"cycle_gap_ns"`
	// Releases counts the rounds of cycles (analysis.Churn.Releases).
	Releases uint64 `json:"releases"`
	// Iterations is the process's loop's iteration count (0: none found).
	Iterations      uint64      `json:"iterations"`
	CostMsPerSecond float64     `json:"cost_ms_per_second"`
	FreeStacks      []JSONStack `json:"free_stacks"`
	AllocStacks     []JSONStack `json:"alloc_stacks"`
	// CachingOff: the allocator passed nearly every tensor free to
	// cudaFree (analysis.Churn.CachingOff).
	CachingOff bool `json:"caching_off,omitempty"`
}

func jsonPoolState(res *analysis.Result, s analysis.PoolState) JSONPoolState {
	return JSONPoolState{TimeNs: res.Rel(s.Time), ReservedBytes: s.ReservedBytes, AllocatedBytes: s.AllocatedBytes,
		CachedFreeBytes: s.CachedFreeBytes, LargestFreeRange: s.LargestFreeRange, FreeRanges: s.FreeRanges,
		Segments: s.Segments, PinnedSegments: s.PinnedSegments, PinnedBytes: s.PinnedBytes, UnplacedBytes: s.UnplacedBytes}
}

func jsonOOM(res *analysis.Result, o *analysis.OOM) JSONOOM {
	j := JSONOOM{Index: o.Index, TimeNs: res.Rel(o.Time), Device: analysis.DeviceName(o.Device),
		RequestBytes: o.RequestBytes, Error: analysis.ErrorName(o.API, o.Ret), Kind: string(o.Kind), Expandable: o.Expandable,
		PagesBytes:    o.PagesBytes,
		Outcome:       string(o.Outcome),
		ReleasedBytes: o.ReleasedBytes, ReleasedSegments: o.ReleasedSegments, CostNs: o.CostNs,
		Site: res.Site(o.Stack), Frames: nonNil(res.Lines(o.Stack)), State: jsonPoolState(res, o.State),
		LiveStacks: jsonStacks(res, o.LiveStacks), Profile: analysis.OOMProfileName(o)}
	if o.RetryTime != 0 {
		j.RetryTimeNs = ptr(res.Rel(o.RetryTime))
	}
	if r := o.Reported; r != nil {
		j.Reported = &JSONOOMReport{TimeNs: res.Rel(r.Time), RequestBytes: r.RequestBytes,
			AllocatedBytes: r.AllocatedBytes, ReservedBytes: r.ReservedBytes}
	}
	return j
}

func jsonPools(res *analysis.Result) []JSONPool {
	if len(res.Pools) == 0 {
		return nil
	}
	out := make([]JSONPool, 0, len(res.Pools))
	for i := range res.Pools {
		p := &res.Pools[i]
		jp := JSONPool{PID: p.PID, ProcessStartNs: res.Rel(p.ProcessStart), Device: analysis.DeviceName(p.Device),
			AtEnd: jsonPoolState(res, p.AtEnd), OOMs: []JSONOOM{}, Expandable: p.Expandable}
		if p.Worst != nil {
			w := jsonPoolState(res, *p.Worst)
			jp.Worst = &w
		}
		for j := range p.OOMs {
			jp.OOMs = append(jp.OOMs, jsonOOM(res, &p.OOMs[j]))
		}
		out = append(out, jp)
	}
	return out
}

func jsonChurn(res *analysis.Result, c *analysis.Churn) *JSONChurn {
	if c == nil {
		return nil
	}
	return &JSONChurn{Allocs: c.Allocs, Frees: c.Frees, AllocNs: c.AllocNs, FreeNs: c.FreeNs,
		CallsPerSecond: c.CallsPerSecond, ObservedNs: c.ObservedNs, Cycles: c.Cycles, CycleBytes: c.CycleBytes, CycleNs: c.CycleNs,
		CycleGapNs: c.CycleGapNs, Releases: c.Releases, Iterations: c.Iterations, CostMsPerSecond: c.CostMsPerSecond,
		FreeStacks: jsonStacks(res, c.FreeStacks), AllocStacks: jsonStacks(res, c.AllocStacks), CachingOff: c.CachingOff}
}
