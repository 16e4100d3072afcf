package analysis

// maxPoolOOMFindings caps the OOM findings per pool: past the first few,
// later failures repeat the first's evidence.
const maxPoolOOMFindings = 5

// minChurnCycles: fewer release-and-reallocate cycles are a phase change,
// not a habit worth a finding.
const minChurnCycles = 3

// fragmentationShare: at the worst moment, the cache must hold at least
// this fraction (1/n) of reserved memory free, tensors at least as much,
// and no free range may reach half of the free bytes, for a fragmentation
// finding without an OOM (severity info: nothing failed).
const fragmentationShare = 4

// fragmentationMin: below this many cached free bytes fragmentation is
// noise (one small-pool segment is 2 MiB).
const fragmentationMin = 16 << 20

// poolFindings derives the oom, fragmentation and churn findings of the
// block layer and the segment traffic. It returns the processes whose
// failures it explained, so the generic oom finding is not repeated.
func (a *Analyzer) poolFindings(r *Result) (out []Finding, explained map[uint32]map[uint64]bool) {
	explained = make(map[uint32]map[uint64]bool)
	for i := range r.Pools {
		pl := &r.Pools[i]
		var fragOOM *OOM
		failures := 0
		for j := range pl.OOMs {
			o := &pl.OOMs[j]
			if !IsOutOfMemory(o.Ret) {
				continue // a failed_call finding (findings.go), not an OOM
			}
			if explained[pl.PID] == nil {
				explained[pl.PID] = make(map[uint64]bool)
			}
			explained[pl.PID][pl.ProcessStart] = true
			if j < maxPoolOOMFindings {
				out = append(out, a.poolOOMFinding(r, pl, o))
			}
			if o.Kind == OOMFragmentation && o.Outcome == OOMFinal {
				failures++
				if worseFailure(o, fragOOM) {
					fragOOM = o
				}
			}
		}
		f := a.fragmentationFinding(r, pl, fragOOM)
		if f != nil && fragOOM != nil {
			f.Pool.Failures = failures
		}
		if gc := a.gcThreshold(pl); gc != nil {
			if f == nil {
				f = a.retryFragmentationFinding(r, pl, gc.o)
			}
			oc := *gc.o
			oc.Live = nil
			f.Pool.GC = &GCThreshold{OOM: oc, IdleLargeBytes: a.oomGeometry[gc.o.Index].idleLarge, CapacityBytes: gc.capacity,
				CapacityKnown: gc.known, Threshold: gc.threshold}
		}
		if f != nil {
			out = append(out, *f)
		}
	}
	for i := range r.Processes {
		if f := a.churnFinding(r, &r.Processes[i]); f != nil {
			out = append(out, *f)
		}
	}
	return out, explained
}

// worseFailure reports whether failing request o stranded more than w (nil:
// none yet): fragmentation is judged at every failing request, and the
// finding quotes the worst, the one with the most cached free bytes that
// could not serve it. Bytes, not the share of reserved memory, decide:
// they are what a person gets back by fixing it, and the finding's bytes
// (DESIGN.md). Ties go to the larger share (the smaller reservation), then
// to a final failure over one a retry survived, then to the earlier.
func worseFailure(o, w *OOM) bool {
	if w == nil {
		return true
	}
	if o.State.CachedFreeBytes != w.State.CachedFreeBytes {
		return o.State.CachedFreeBytes > w.State.CachedFreeBytes
	}
	// Equal free bytes: the smaller reservation is the larger share.
	if o.State.ReservedBytes != w.State.ReservedBytes {
		return o.State.ReservedBytes < w.State.ReservedBytes
	}
	return o.Outcome == OOMFinal && w.Outcome != OOMFinal
}

// smallSegment is PyTorch's small-pool segment (kSmallBuffer, 2 MiB):
// large-pool segments are 20 MiB or at least 10 MiB, and only they are
// released by garbage collection (garbage_collect_cached_blocks walks the
// large pool's unsplit free blocks).
const smallSegment = 2 << 20

// gcEvidence is what supports garbage_collection_threshold:T for a pool:
// a failed cudaMalloc whose free-all-and-retry worked, while the cache
// held more than the request.
type gcEvidence struct {
	o *OOM
	// capacity is the device's memory (Options.Capacity or NVML), or, when
	// unknown, the least the retry proved available: reserved - released
	// + request. known says which.
	capacity uint64
	known    bool
	// threshold is T, in hundredths.
	threshold uint64
}

// gcThreshold looks for the evidence that PyTorch's garbage collection
// would have avoided a synchronizing free-all (see doc.go,
// "Fragmentation"): a retried fragmentation OOM (cached free >= the
// request) with the cache at least a quarter of reserved memory, whose
// whole free large segments alone make room for the request within the
// capacity, and a threshold T = floor(100 * (capacity - request) /
// capacity) / 100 under which reclamation leaves room for the request while
// the bytes tensors held stay below T x capacity. Nil when the pool also
// had a final fragmentation OOM (reclaiming did not save the run) or no
// failure fits.
func (a *Analyzer) gcThreshold(pl *Pool) *gcEvidence {
	if pl.Expandable {
		// Its segments are pages: a failure already unmapped every
		// wholly free one before the retry.
		return nil
	}
	for i := range pl.OOMs {
		if o := &pl.OOMs[i]; o.Kind == OOMFragmentation && o.Outcome == OOMFinal {
			return nil
		}
	}
	for i := range pl.OOMs {
		o := &pl.OOMs[i]
		st := o.State
		if o.Ret != 2 || o.Outcome != OOMRetried || o.Kind != OOMFragmentation ||
			st.CachedFreeBytes*fragmentationShare < st.ReservedBytes || a.oomGeometry[o.Index].idleLarge == 0 {
			continue
		}
		ev := &gcEvidence{o: o, capacity: a.opts.Capacity, known: true}
		if ev.capacity == 0 {
			ev.capacity = a.capacity[pl.Device]
		}
		if ev.capacity == 0 {
			// The retry fit once the free-all had released its bytes.
			if o.ReleasedBytes > st.ReservedBytes || a.oomGeometry[o.Index].idleLarge < o.ReleasedBytes {
				continue
			}
			ev.capacity, ev.known = st.ReservedBytes-o.ReleasedBytes+o.RequestBytes, false
		}
		c, s := ev.capacity, o.RequestBytes
		if s >= c || st.ReservedBytes-a.oomGeometry[o.Index].idleLarge+s > c {
			continue
		}
		ev.threshold = 100 * (c - s) / c
		if ev.threshold == 0 || ev.threshold*c <= 100*st.AllocatedBytes {
			continue
		}
		return ev
	}
	return nil
}

// splitSizeMiB is the max_split_size_mb value this run's blocks support:
// one MiB above the largest segment that held live blocks smaller than the
// failing request. Blocks below it keep sharing segments as they did;
// requests of that size and more (the failing one) get blocks that are
// never split, and PyTorch frees such cached blocks before it raises
// out-of-memory. 0 when no such value is at most the request.
func splitSizeMiB(o *OOM, maxShared uint64) uint64 {
	if maxShared == 0 {
		return 0
	}
	n := (maxShared+(1<<20)-1)>>20 + 1
	if n<<20 > o.RequestBytes {
		return 0
	}
	return n
}

// poolOOMFinding explains one failed segment allocation with the
// allocator's geometry at that moment.
func (a *Analyzer) poolOOMFinding(r *Result, pl *Pool, o *OOM) Finding {
	f := Finding{Kind: KindOOM, PID: pl.PID, ProcessStart: pl.ProcessStart, Bytes: o.RequestBytes, Time: o.Time,
		Stacks: r.findingStacks(o.LiveStacks, a.opts.TopStacks), Pool: a.poolEvidence(pl, o)}
	oc := *o
	oc.Live = nil
	f.OOM = &oc
	// Under expandable segments that advice is already taken: never give
	// it again.
	expandable := pl.Expandable || o.Expandable
	switch {
	case o.Outcome == OOMRetried:
		f.Severity = SeverityMedium
		f.Pool.Advice = AdviceLowerPeak
		if o.Kind == OOMFragmentation && o.State.LargestFreeRange < o.RequestBytes && !expandable {
			f.Pool.Advice = AdviceExpandable
		}
	case o.Kind == OOMFragmentation && expandable:
		f.Severity, f.Pool.Advice = SeverityCritical, AdviceInterleaved
	case o.Kind == OOMFragmentation:
		f.Severity, f.Pool.Advice = SeverityCritical, AdviceExpandable
	default:
		f.Severity, f.Pool.Advice = SeverityCritical, AdviceReduceBatch
	}
	return f
}

// poolEvidence is the evidence of pool pl's failure o (nil: none).
func (a *Analyzer) poolEvidence(pl *Pool, o *OOM) *PoolEvidence {
	ev := &PoolEvidence{Device: pl.Device, Expandable: pl.Expandable || (o != nil && o.Expandable)}
	if o != nil {
		g := a.oomGeometry[o.Index]
		ev.IdleLargeBytes, ev.MaxSharedSegment, ev.SplitSizeMiB = g.idleLarge, g.maxSharedSegment, splitSizeMiB(o, g.maxSharedSegment)
	}
	return ev
}

// fragmentationFinding reports the bytes reserved but unallocated at the
// worst final fragmentation OOM (see worseFailure; a failure the retry
// survived is reported through the garbage collection evidence, see
// gcThreshold). Without one, the worst moment when those bytes were a large
// share of reserved memory scattered in small ranges is reported as info
// only: nothing failed and nothing measurable was lost.
func (a *Analyzer) fragmentationFinding(r *Result, pl *Pool, o *OOM) *Finding {
	f := &Finding{Kind: KindFragmentation, PID: pl.PID, ProcessStart: pl.ProcessStart, Pool: a.poolEvidence(pl, o)}
	if o != nil {
		st := o.State
		f.Severity, f.Bytes, f.Time = SeverityHigh, st.CachedFreeBytes, o.Time
		oc := *o
		oc.Live = nil
		f.OOM = &oc
		f.Stacks = r.findingStacks(o.LiveStacks, a.opts.TopStacks)
		return f
	}
	w := pl.Worst
	// Tensors must still hold a quarter of the reserved memory: the worst
	// moment is otherwise a teardown (everything freed, segments cached),
	// which is no fragmentation.
	if w == nil || w.CachedFreeBytes < fragmentationMin || w.CachedFreeBytes*fragmentationShare < w.ReservedBytes ||
		w.AllocatedBytes*fragmentationShare < w.ReservedBytes || 2*w.LargestFreeRange >= w.CachedFreeBytes {
		return nil
	}
	f.Severity, f.Bytes, f.Time = SeverityInfo, w.CachedFreeBytes, w.Time
	worst := *w
	f.Pool.Worst = &worst
	return f
}

// retryFragmentationFinding reports the cache at a failed cudaMalloc that
// the allocator survived by flushing it: the bytes reserved but
// unallocated at the failing request.
func (a *Analyzer) retryFragmentationFinding(r *Result, pl *Pool, o *OOM) *Finding {
	st := o.State
	oc := *o
	oc.Live = nil
	return &Finding{Kind: KindFragmentation, Severity: SeverityMedium, PID: pl.PID, ProcessStart: pl.ProcessStart,
		Bytes: st.CachedFreeBytes, Time: o.Time, OOM: &oc, Stacks: r.findingStacks(o.LiveStacks, a.opts.TopStacks),
		Pool: a.poolEvidence(pl, o)}
}

// churnFinding prices a process's release-and-reallocate cycles. Only a
// process whose caching allocator was traced qualifies: there the cycles
// are the cache released and refilled (empty_cache), or, when the
// allocator passed every tensor free to cudaFree (Churn.CachingOff), the
// caching turned off; a program calling cudaMalloc/cudaFree itself every
// step has no cache to keep.
func (a *Analyzer) churnFinding(r *Result, p *Process) *Finding {
	c := p.Churn
	if c == nil || c.Cycles < minChurnCycles || !hasPool(r, p) {
		return nil
	}
	sev := SeverityInfo
	// With caching off the cycles are every tensor's own cudaMalloc and
	// cudaFree: no empty_cache() to remove, and the setting is a choice
	// (a memory debugging run), so it is said, at info.
	if !c.CachingOff && (c.CostMsPerSecond >= 1 || c.Cycles >= 10) {
		sev = SeverityMedium
	}
	f := &Finding{Kind: KindChurn, Severity: sev, PID: p.PID, ProcessStart: p.Start, Bytes: c.CycleBytes, Time: p.Start}
	// The release stacks first (where empty_cache() is called), when the
	// frees had stacks; then the allocations that took the memory back.
	for _, s := range c.FreeStacks {
		if s.Stack != 0 {
			f.Stacks = append(f.Stacks, r.findingStacks([]StackUsage{s}, 1)...)
		}
	}
	f.Stacks = append(f.Stacks, r.findingStacks(c.AllocStacks, a.opts.TopStacks)...)
	f.Churn = c
	return f
}

// hasPool reports whether the block layer was traced for p.
func hasPool(r *Result, p *Process) bool {
	for i := range r.Pools {
		if r.Pools[i].PID == p.PID && r.Pools[i].ProcessStart == p.Start {
			return true
		}
	}
	return false
}
