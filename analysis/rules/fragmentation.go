package rules

import "github.com/vramprof/vramprof/analysis/finding"

// fragmentationShare: at the worst moment, the cache must hold at least
// this fraction (1/n) of reserved memory free, tensors at least as much,
// and no free range may reach half of the free bytes, for a fragmentation
// finding without an OOM (severity info: nothing failed).
const fragmentationShare = 4

// fragmentationMin: below this many cached free bytes fragmentation is
// noise (one small-pool segment is 2 MiB).
const fragmentationMin = 16 << 20

// Fragmentation reports, at most once per pool (View.Pools), the bytes a
// caching allocator reserved but could not use: at its worst final
// fragmentation OOM (see worseFailure); else at a failed cudaMalloc the
// allocator survived by flushing its cache, when garbage collection would
// have avoided it (gcThreshold); else, as info, at the worst moment when
// those bytes were a large share of reserved memory scattered in small
// ranges.
func Fragmentation(v *View) []finding.Finding {
	var out []finding.Finding
	for i := range v.Pools {
		pl := &v.Pools[i]
		var fragOOM *finding.OOM
		failures := 0
		for j := range pl.OOMs {
			o := &pl.OOMs[j]
			if !finding.IsOutOfMemory(o.Ret) {
				continue // a failed_call finding, not an OOM
			}
			if o.Kind == finding.OOMFragmentation && o.Outcome == finding.OOMFinal {
				failures++
				if worseFailure(o, fragOOM) {
					fragOOM = o
				}
			}
		}
		f := fragmentation(v, pl, fragOOM)
		if f != nil && fragOOM != nil {
			f.Pool.Failures = failures
		}
		if gc := gcThreshold(v, pl); gc != nil {
			if f == nil {
				f = retryFragmentation(v, pl, gc.o)
			}
			oc := *gc.o
			oc.Live = nil
			f.Pool.GC = &finding.GCThreshold{OOM: oc, IdleLargeBytes: v.OOMGeometry[gc.o.Index].IdleLargeBytes,
				CapacityBytes: gc.capacity, CapacityKnown: gc.known, Threshold: gc.threshold}
		}
		if f != nil {
			out = append(out, *f)
		}
	}
	return out
}

// worseFailure reports whether failing request o stranded more than w (nil:
// none yet): fragmentation is judged at every failing request, and the
// finding quotes the worst, the one with the most cached free bytes that
// could not serve it. Bytes, not the share of reserved memory, decide:
// they are what a person gets back by fixing it, and the finding's bytes
// (DESIGN.md). Ties go to the larger share (the smaller reservation), then
// to a final failure over one a retry survived, then to the earlier.
func worseFailure(o, w *finding.OOM) bool {
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
	return o.Outcome == finding.OOMFinal && w.Outcome != finding.OOMFinal
}

// gcEvidence is what supports garbage_collection_threshold:T for a pool:
// a failed cudaMalloc whose free-all-and-retry worked, while the cache
// held more than the request.
type gcEvidence struct {
	o *finding.OOM
	// capacity is the device's memory (View.Capacity), or, when unknown,
	// the least the retry proved available: reserved - released + request.
	// known says which.
	capacity uint64
	known    bool
	// threshold is T, in hundredths.
	threshold uint64
}

// gcThreshold looks for the evidence that PyTorch's garbage collection
// would have avoided a synchronizing free-all (see the analysis doc,
// "Fragmentation"): a retried fragmentation OOM (cached free >= the
// request) with the cache at least a quarter of reserved memory, whose
// whole free large segments alone make room for the request within the
// capacity, and a threshold T = floor(100 * (capacity - request) /
// capacity) / 100 under which reclamation leaves room for the request while
// the bytes tensors held stay below T x capacity. Nil when the pool also
// had a final fragmentation OOM (reclaiming did not save the run) or no
// failure fits.
func gcThreshold(v *View, pl *finding.Pool) *gcEvidence {
	if pl.Expandable {
		// Its segments are pages: a failure already unmapped every
		// wholly free one before the retry.
		return nil
	}
	for i := range pl.OOMs {
		if o := &pl.OOMs[i]; o.Kind == finding.OOMFragmentation && o.Outcome == finding.OOMFinal {
			return nil
		}
	}
	for i := range pl.OOMs {
		o := &pl.OOMs[i]
		st := o.State
		idleLarge := v.OOMGeometry[o.Index].IdleLargeBytes
		if o.Ret != 2 || o.Outcome != finding.OOMRetried || o.Kind != finding.OOMFragmentation ||
			st.CachedFreeBytes*fragmentationShare < st.ReservedBytes || idleLarge == 0 {
			continue
		}
		ev := &gcEvidence{o: o, capacity: v.Capacity(pl.Device), known: true}
		if ev.capacity == 0 {
			// The retry fit once the free-all had released its bytes.
			if o.ReleasedBytes > st.ReservedBytes || idleLarge < o.ReleasedBytes {
				continue
			}
			ev.capacity, ev.known = st.ReservedBytes-o.ReleasedBytes+o.RequestBytes, false
		}
		c, s := ev.capacity, o.RequestBytes
		if s >= c || st.ReservedBytes-idleLarge+s > c {
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

// fragmentation reports the bytes reserved but unallocated at the worst
// final fragmentation OOM o (see worseFailure; a failure the retry
// survived is reported through the garbage collection evidence, see
// gcThreshold). Without one, the worst moment when those bytes were a large
// share of reserved memory scattered in small ranges is reported as info
// only: nothing failed and nothing measurable was lost.
func fragmentation(v *View, pl *finding.Pool, o *finding.OOM) *finding.Finding {
	f := &finding.Finding{Kind: finding.KindFragmentation, PID: pl.PID, ProcessStart: pl.ProcessStart,
		Pool: poolEvidence(v, pl, o)}
	if o != nil {
		st := o.State
		f.Severity, f.Bytes, f.Time = finding.SeverityHigh, st.CachedFreeBytes, o.Time
		oc := *o
		oc.Live = nil
		f.OOM = &oc
		f.Stacks = v.FindingStacks(o.LiveStacks, v.TopStacks)
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
	f.Severity, f.Bytes, f.Time = finding.SeverityInfo, w.CachedFreeBytes, w.Time
	worst := *w
	f.Pool.Worst = &worst
	return f
}

// retryFragmentation reports the cache at a failed cudaMalloc that the
// allocator survived by flushing it: the bytes reserved but unallocated at
// the failing request.
func retryFragmentation(v *View, pl *finding.Pool, o *finding.OOM) *finding.Finding {
	st := o.State
	oc := *o
	oc.Live = nil
	return &finding.Finding{Kind: finding.KindFragmentation, Severity: finding.SeverityMedium, PID: pl.PID,
		ProcessStart: pl.ProcessStart, Bytes: st.CachedFreeBytes, Time: o.Time, OOM: &oc,
		Stacks: v.FindingStacks(o.LiveStacks, v.TopStacks), Pool: poolEvidence(v, pl, o)}
}
