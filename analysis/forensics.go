package analysis

import (
	"fmt"
	"strings"

	"github.com/vramprof/vramprof/report/units"
)

// maxPoolOOMFindings caps the OOM findings per pool: past the first few,
// later failures repeat the first's evidence.
const maxPoolOOMFindings = 5

// minChurnCycles: fewer release-and-reallocate cycles are a phase change,
// not a habit worth a finding.
const minChurnCycles = 3

// fragmentationShare: at the worst moment, the cache must hold at least
// this fraction (1/n) of reserved memory free, tensors at least as much,
// and no free range may reach half of the free bytes, for a fragmentation
// finding without an OOM.
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
			if fragOOM == nil && o.Kind == OOMFragmentation && o.Outcome == OOMFinal {
				fragOOM = o
			}
		}
		f := a.fragmentationFinding(r, pl, fragOOM)
		if gc := a.gcThreshold(pl); gc != nil {
			if f == nil {
				f = a.retryFragmentationFinding(r, pl, gc.o)
			}
			f.Remediation = append(f.Remediation, gcRemediation(r, gc))
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

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

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
	for i := range pl.OOMs {
		if o := &pl.OOMs[i]; o.Kind == OOMFragmentation && o.Outcome == OOMFinal {
			return nil
		}
	}
	for i := range pl.OOMs {
		o := &pl.OOMs[i]
		st := o.State
		if o.Ret != 2 || o.Outcome != OOMRetried || o.Kind != OOMFragmentation ||
			st.CachedFreeBytes*fragmentationShare < st.ReservedBytes || o.idleLarge == 0 {
			continue
		}
		ev := &gcEvidence{o: o, capacity: a.opts.Capacity, known: true}
		if ev.capacity == 0 {
			ev.capacity = a.capacity[pl.Device]
		}
		if ev.capacity == 0 {
			// The retry fit once the free-all had released its bytes.
			if o.ReleasedBytes > st.ReservedBytes || o.idleLarge < o.ReleasedBytes {
				continue
			}
			ev.capacity, ev.known = st.ReservedBytes-o.ReleasedBytes+o.RequestBytes, false
		}
		c, s := ev.capacity, o.RequestBytes
		if s >= c || st.ReservedBytes-o.idleLarge+s > c {
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

// gcRemediation explains garbage_collection_threshold:T with the numbers.
func gcRemediation(r *Result, ev *gcEvidence) string {
	o, st := ev.o, ev.o.State
	c := ev.capacity
	limit := ev.threshold * c / 100
	basis := fmt.Sprintf("the device has %d bytes", c)
	if !ev.known {
		basis = fmt.Sprintf("the device offered at least %d bytes (capacity unknown: the retry fit once the flush released %d of the %d reserved, so %d - %d + %d were available)",
			c, o.ReleasedBytes, st.ReservedBytes, st.ReservedBytes, o.ReleasedBytes, o.RequestBytes)
	}
	return fmt.Sprintf(
		"set PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.%02d and call torch.cuda.set_per_process_memory_fraction(1.0) (the threshold is a fraction of that limit and is ignored without it): at %s the cache held %d bytes (%.1f%% of the %d reserved), %d of them in whole free segments, yet the allocator asked cudaMalloc for %d more and failed; %s; with T = 0.%02d = (%d - %d) / %d rounded down, it reclaims free segments before growing whenever reserved passes %d bytes, which leaves room for the %d-byte segment and stays above the %d bytes tensors held, instead of the failed call, the synchronizing flush of %d segments (%d bytes) and the retry (%s)",
		ev.threshold, seconds(r, o.Time), st.CachedFreeBytes, percent(st.CachedFreeBytes, st.ReservedBytes), st.ReservedBytes,
		o.idleLarge, o.RequestBytes, basis, ev.threshold, c, o.RequestBytes, c, limit, o.RequestBytes, st.AllocatedBytes,
		o.ReleasedSegments, o.ReleasedBytes, units.Duration(o.CostNs))
}

// stackSites names the sites of the first n stacks with their bytes.
func stackSites(r *Result, us []StackUsage, n int) string {
	var parts []string
	for i, u := range us {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%d bytes in %d blocks)", r.Site(u.Stack), u.Bytes, u.Count))
	}
	return strings.Join(parts, ", ")
}

// splitSizeMiB is the max_split_size_mb value this run's blocks support:
// one MiB above the largest segment that held live blocks smaller than the
// failing request. Blocks below it keep sharing segments as they did;
// requests of that size and more (the failing one) get blocks that are
// never split, and PyTorch frees such cached blocks before it raises
// out-of-memory. 0 when no such value is at most the request.
func splitSizeMiB(o *OOM) uint64 {
	if o.maxSharedSegment == 0 {
		return 0
	}
	n := (o.maxSharedSegment+(1<<20)-1)>>20 + 1
	if n<<20 > o.RequestBytes {
		return 0
	}
	return n
}

// poolOOMFinding explains one failed segment allocation with the
// allocator's geometry at that moment.
func (a *Analyzer) poolOOMFinding(r *Result, pl *Pool, o *OOM) Finding {
	st := o.State
	site := r.Site(o.Stack)
	f := Finding{Kind: KindOOM, PID: pl.PID, ProcessStart: pl.ProcessStart, Bytes: o.RequestBytes, Time: o.Time,
		Stacks: r.findingStacks(o.LiveStacks, a.opts.TopStacks)}
	oc := *o
	oc.Live = nil
	f.OOM = &oc
	geometry := fmt.Sprintf("reserved %d bytes in %d segments, %d allocated to tensors, %d cached free in %d ranges, the largest %d",
		st.ReservedBytes, st.Segments, st.AllocatedBytes, st.CachedFreeBytes, st.FreeRanges, st.LargestFreeRange)
	if o.Outcome == OOMRetried {
		f.Severity = SeverityMedium
		f.Summary = fmt.Sprintf("a segment allocation of %d bytes (%s) at %s failed on device %s at %s (%s); the allocator freed %d cached segments (%d bytes) and the retry succeeded, costing %s inside cudaMalloc/cudaFree, and the freed segments must be allocated again when needed",
			o.RequestBytes, FormatBytes(o.RequestBytes), site, DeviceName(o.Device), seconds(r, o.Time), geometry,
			o.ReleasedSegments, o.ReleasedBytes, units.Duration(o.CostNs))
		if o.Kind == OOMFragmentation && st.LargestFreeRange < o.RequestBytes {
			f.Remediation = append(f.Remediation, fmt.Sprintf(
				"set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the cache held %d bytes free, more than the %d requested, but no range above %d; expandable segments grow in place and would have served it without flushing the cache",
				st.CachedFreeBytes, o.RequestBytes, st.LargestFreeRange))
		} else {
			f.Remediation = append(f.Remediation, fmt.Sprintf(
				"the device was nearly full: %d bytes reserved when %d more were asked; lower the peak (the largest live blocks then: %s) before this becomes a final OOM",
				st.ReservedBytes, o.RequestBytes, stackSites(r, o.LiveStacks, 3)))
		}
		return f
	}
	f.Severity = SeverityCritical
	switch o.Kind {
	case OOMFragmentation:
		f.Summary = fmt.Sprintf("fragmentation OOM: a segment allocation of %d bytes (%s) at %s failed on device %s at %s and no retry succeeded, while the cache held %d bytes (%s) free, more than requested, in %d ranges of which the largest was %d (%s); %s",
			o.RequestBytes, FormatBytes(o.RequestBytes), site, DeviceName(o.Device), seconds(r, o.Time),
			st.CachedFreeBytes, FormatBytes(st.CachedFreeBytes), st.FreeRanges, st.LargestFreeRange, FormatBytes(st.LargestFreeRange), geometry)
		f.Remediation = append(f.Remediation, fmt.Sprintf(
			"set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: %d bytes were free in the cache but split into %d ranges no larger than %d, below the %d requested; expandable segments map memory into segments that grow in place, so freed ranges are not stranded between live blocks",
			st.CachedFreeBytes, st.FreeRanges, st.LargestFreeRange, o.RequestBytes))
		if n := splitSizeMiB(o); n > 0 {
			f.Remediation = append(f.Remediation, fmt.Sprintf(
				"or set PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:%d: N is one MiB above the largest segment (%.0f MiB) holding live blocks smaller than the request, so those keep sharing segments, while requests of %d MiB and more (this one: %.0f MiB) get blocks that are never split and that PyTorch frees before raising out-of-memory",
				n, mib(o.maxSharedSegment), n, mib(o.RequestBytes)))
		}
	default:
		f.Summary = fmt.Sprintf("capacity OOM: a segment allocation of %d bytes (%s) at %s failed on device %s at %s and no retry succeeded; the cache held only %d bytes (%s) free, less than requested even as one range (%s)",
			o.RequestBytes, FormatBytes(o.RequestBytes), site, DeviceName(o.Device), seconds(r, o.Time),
			st.CachedFreeBytes, FormatBytes(st.CachedFreeBytes), geometry)
		f.Remediation = append(f.Remediation, fmt.Sprintf(
			"reduce the batch size or the activation memory: tensors held %d bytes when %d more were needed; the largest live blocks then: %s",
			st.AllocatedBytes, o.RequestBytes, stackSites(r, o.LiveStacks, 3)))
		f.Remediation = append(f.Remediation, fmt.Sprintf(
			"expandable_segments:True or empty_cache() would not avoid it: even defragmented, the %d cached free bytes are short of the %d requested by %d",
			st.CachedFreeBytes, o.RequestBytes, o.RequestBytes-st.CachedFreeBytes))
	}
	return f
}

// fragmentationFinding reports the bytes reserved but unallocated at a
// fragmentation OOM, or else at the worst moment when they were a large
// share of reserved memory scattered in small ranges.
func (a *Analyzer) fragmentationFinding(r *Result, pl *Pool, o *OOM) *Finding {
	f := &Finding{Kind: KindFragmentation, PID: pl.PID, ProcessStart: pl.ProcessStart}
	if o != nil {
		st := o.State
		f.Severity, f.Bytes, f.Time = SeverityHigh, st.CachedFreeBytes, o.Time
		oc := *o
		oc.Live = nil
		f.OOM = &oc
		f.Summary = fmt.Sprintf("at the failing request of %d bytes on device %s (%s), %d bytes (%.1f%% of the %d reserved) were cached free in %d ranges, the largest %d: fragmentation, not capacity, ended the run",
			o.RequestBytes, DeviceName(pl.Device), seconds(r, o.Time), st.CachedFreeBytes, percent(st.CachedFreeBytes, st.ReservedBytes),
			st.ReservedBytes, st.FreeRanges, st.LargestFreeRange)
		f.Stacks = r.findingStacks(o.LiveStacks, a.opts.TopStacks)
		f.Remediation = []string{fmt.Sprintf(
			"set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (see the oom finding at %s)", seconds(r, o.Time))}
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
	f.Severity, f.Bytes, f.Time = SeverityMedium, w.CachedFreeBytes, w.Time
	f.Summary = fmt.Sprintf("at %s, %d bytes (%.1f%% of the %d reserved on device %s) were cached free but scattered in %d ranges, the largest %d; %d segments were pinned by one small block",
		seconds(r, w.Time), w.CachedFreeBytes, percent(w.CachedFreeBytes, w.ReservedBytes), w.ReservedBytes,
		DeviceName(pl.Device), w.FreeRanges, w.LargestFreeRange, w.PinnedSegments)
	f.Remediation = []string{fmt.Sprintf(
		"set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: no request above %d bytes could use the %d free bytes without a new segment",
		w.LargestFreeRange, w.CachedFreeBytes)}
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
		Summary: fmt.Sprintf("at the failing request of %d bytes on device %s (%s), %d bytes (%.1f%% of the %d reserved) were cached free in %d ranges, the largest %d, %d of them in whole free segments: the allocator grew instead of reclaiming its cache, failed, flushed %d segments (%d bytes) and retried",
			o.RequestBytes, DeviceName(pl.Device), seconds(r, o.Time), st.CachedFreeBytes, percent(st.CachedFreeBytes, st.ReservedBytes),
			st.ReservedBytes, st.FreeRanges, st.LargestFreeRange, o.idleLarge, o.ReleasedSegments, o.ReleasedBytes)}
}

// churnFinding prices a process's release-and-reallocate cycles. Only a
// process whose caching allocator was traced qualifies: there the cycles
// are the cache released and refilled (empty_cache); a program calling
// cudaMalloc/cudaFree itself every step has no cache to keep.
func (a *Analyzer) churnFinding(r *Result, p *Process) *Finding {
	c := p.Churn
	if c == nil || c.Cycles < minChurnCycles || !hasPool(r, p) {
		return nil
	}
	sev := SeverityInfo
	if c.CostMsPerSecond >= 1 || c.Cycles >= 10 {
		sev = SeverityMedium
	}
	gap := units.Duration(c.CycleGapNs / c.Cycles)
	// Calls per second only from a second observed; the cost is a share
	// of the run's time, not a projection.
	calls := "in " + units.Duration(c.ObservedNs)
	if _, ok := RateBaseFor(c.ObservedNs); ok {
		calls = fmt.Sprintf("%.1f per second", c.CallsPerSecond)
	}
	f := &Finding{Kind: KindChurn, Severity: sev, PID: p.PID, ProcessStart: p.Start, Bytes: c.CycleBytes, Time: p.Start,
		Summary: fmt.Sprintf("process %s released %d segments (%d bytes, %s) that a segment of the same size replaced within %s on average: %d cudaMalloc and %d cudaFree calls (%s, %s inside them); the cycles cost %.3f ms per second of run",
			r.Run.PIDText(p.PID), c.Cycles, c.CycleBytes, FormatBytes(c.CycleBytes), gap, c.Allocs, c.Frees, calls,
			units.Duration(c.AllocNs+c.FreeNs), c.CostMsPerSecond),
	}
	// The release stacks first (where empty_cache() is called), when the
	// frees had stacks; then the allocations that took the memory back.
	where := "the release sites (no stack was captured at the frees)"
	for _, s := range c.FreeStacks {
		if s.Stack != 0 {
			if len(f.Stacks) == 0 {
				where = r.Site(s.Stack)
			}
			f.Stacks = append(f.Stacks, r.findingStacks([]StackUsage{s}, 1)...)
		}
	}
	f.Stacks = append(f.Stacks, r.findingStacks(c.AllocStacks, a.opts.TopStacks)...)
	if len(c.AllocStacks) > 0 {
		where += fmt.Sprintf(", before the allocations at %s", r.Site(c.AllocStacks[0].Stack))
	}
	f.Remediation = []string{fmt.Sprintf(
		"remove the empty_cache() (or other cache release) at %s from the loop: the %d bytes it released came back within %s on average, so it saved nothing for long and cost %.3f ms per second in cudaFree/cudaMalloc; call it once after a phase that will not need the memory again",
		where, c.CycleBytes, gap, c.CostMsPerSecond)}
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
