package report

import (
	"fmt"
	"strings"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/report/units"
)

// The words of the block layer's findings (oom with a pool, fragmentation)
// and of churn: the caching allocator's geometry and the
// PYTORCH_CUDA_ALLOC_CONF settings it supports.

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

// geometryWords states a pool's geometry at a failure.
func geometryWords(st analysis.PoolState) string {
	return fmt.Sprintf("reserved %d bytes in %d segments, %d allocated to tensors, %d cached free in %d ranges, the largest %d",
		st.ReservedBytes, st.Segments, st.AllocatedBytes, st.CachedFreeBytes, st.FreeRanges, st.LargestFreeRange)
}

// stackSites names the sites of the first n stacks with their bytes.
func stackSites(res *analysis.Result, us []analysis.StackUsage, n int) string {
	var parts []string
	for i, u := range us {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%d bytes in %d blocks)", res.Site(u.Stack), u.Bytes, u.Count))
	}
	return strings.Join(parts, ", ")
}

// poolOOMWords explains one failed segment allocation with the allocator's
// geometry at that moment: the summary by how it ended and its kind, the
// remediation by the advice the analysis chose.
func poolOOMWords(res *analysis.Result, f *analysis.Finding) (string, []string) {
	o, ev := f.OOM, f.Pool
	st := o.State
	site := res.Site(o.Stack)
	geometry := geometryWords(st)
	retried := o.Outcome == analysis.OOMRetried
	// Under expandable segments the allocator asks the driver for pages
	// (cuMemCreate), and its flush unmaps wholly free pages.
	what := fmt.Sprintf("a segment allocation of %d bytes (%s)", o.RequestBytes, units.Bytes(o.RequestBytes))
	freed := fmt.Sprintf("freed %d cached segments (%d bytes)", o.ReleasedSegments, o.ReleasedBytes)
	inside := "cudaMalloc/cudaFree"
	if o.Expandable {
		what = fmt.Sprintf("creating %d bytes (%s) of pages for an expandable segment", o.RequestBytes, units.Bytes(o.RequestBytes))
		freed = fmt.Sprintf("unmapped %d wholly free %s (%d bytes)", o.ReleasedSegments, plural(uint64(o.ReleasedSegments), "page", "pages"), o.ReleasedBytes)
		inside = "cuMemCreate/cuMemUnmap"
		if o.Reported != nil {
			what = fmt.Sprintf("a request of %d bytes (%s), for which an expandable segment could not get its pages,", o.RequestBytes, units.Bytes(o.RequestBytes))
		}
	}
	var summary string
	switch {
	case retried:
		summary = fmt.Sprintf("%s at %s failed on device %s at %s (%s); the allocator %s and the retry succeeded, costing %s inside %s, and the freed memory must be allocated again when needed",
			what, site, analysis.DeviceName(o.Device), secs(res, o.Time), geometry, freed, units.Duration(o.CostNs), inside)
	case o.Kind == analysis.OOMFragmentation:
		// Under expandable segments the kind is judged on the pages the
		// driver was asked for, which a reported request exceeds.
		than := "more than requested"
		if o.Expandable && o.PagesBytes != o.RequestBytes {
			than = fmt.Sprintf("more than the %d bytes of pages it asked the driver for", o.PagesBytes)
		}
		summary = fmt.Sprintf("fragmentation OOM: %s at %s failed on device %s at %s and no retry succeeded, while the cache held %d bytes (%s) free, %s, in %d ranges of which the largest was %d (%s); %s",
			what, site, analysis.DeviceName(o.Device), secs(res, o.Time),
			st.CachedFreeBytes, units.Bytes(st.CachedFreeBytes), than, st.FreeRanges, st.LargestFreeRange, units.Bytes(st.LargestFreeRange), geometry)
	default:
		summary = fmt.Sprintf("capacity OOM: %s at %s failed on device %s at %s and no retry succeeded; the cache held only %d bytes (%s) free, less than requested even as one range (%s)",
			what, site, analysis.DeviceName(o.Device), secs(res, o.Time),
			st.CachedFreeBytes, units.Bytes(st.CachedFreeBytes), geometry)
	}
	if ev.Expandable && !retried {
		// The verdict under expandable segments: what was reserved but
		// unallocated, what the flush gave back, what was live.
		summary += fmt.Sprintf("; expandable segments were on: %d bytes were reserved but unallocated, the allocator unmapped %d of them (%d wholly free %s) before it gave up, and tensors held %d bytes (the largest: %s)",
			st.CachedFreeBytes, o.ReleasedBytes, o.ReleasedSegments, plural(uint64(o.ReleasedSegments), "page", "pages"),
			st.AllocatedBytes, stackSites(res, o.LiveStacks, 3))
	}
	if r := o.Reported; r != nil {
		summary += fmt.Sprintf("; the allocator's own figures: %d bytes (%s) requested, %d allocated, %d reserved",
			r.RequestBytes, units.Bytes(r.RequestBytes), r.AllocatedBytes, r.ReservedBytes)
	}
	var rem []string
	switch ev.Advice {
	case analysis.AdviceExpandable:
		if retried {
			rem = append(rem, fmt.Sprintf(
				"set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the cache held %d bytes free, more than the %d requested, but no range above %d; expandable segments grow in place and would have served it without flushing the cache",
				st.CachedFreeBytes, o.RequestBytes, st.LargestFreeRange))
			break
		}
		rem = append(rem, fmt.Sprintf(
			"set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: %d bytes were free in the cache but split into %d ranges no larger than %d, below the %d requested; expandable segments map memory into segments that grow in place, so freed ranges are not stranded between live blocks",
			st.CachedFreeBytes, st.FreeRanges, st.LargestFreeRange, o.RequestBytes))
		if n := ev.SplitSizeMiB; n > 0 {
			rem = append(rem, fmt.Sprintf(
				"or set PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:%d: N is one MiB above the largest segment (%.0f MiB) holding live blocks smaller than the request, so those keep sharing segments, while requests of %d MiB and more (this one: %.0f MiB) get blocks that are never split and that PyTorch frees before raising out-of-memory",
				n, mib(ev.MaxSharedSegment), n, mib(o.RequestBytes)))
		}
	case analysis.AdviceLowerPeak:
		rem = append(rem, fmt.Sprintf(
			"the device was nearly full: %d bytes reserved when %d more were asked; lower the peak (the largest live blocks then: %s) before this becomes a final OOM",
			st.ReservedBytes, o.RequestBytes, stackSites(res, o.LiveStacks, 3)))
	case analysis.AdviceReduceBatch:
		rem = append(rem,
			fmt.Sprintf("reduce the batch size or the activation memory: tensors held %d bytes when %d more were needed; the largest live blocks then: %s",
				st.AllocatedBytes, o.RequestBytes, stackSites(res, o.LiveStacks, 3)))
		if ev.Expandable {
			rem = append(rem, fmt.Sprintf(
				"expandable segments are already on, and the allocator unmapped every wholly free page (%d bytes) before it raised: empty_cache() or another allocator setting would not avoid it; even defragmented, the %d bytes reserved but unallocated are short of the %d requested by %d",
				o.ReleasedBytes, st.CachedFreeBytes, o.RequestBytes, o.RequestBytes-st.CachedFreeBytes))
			break
		}
		rem = append(rem,
			fmt.Sprintf("expandable_segments:True or empty_cache() would not avoid it: even defragmented, the %d cached free bytes are short of the %d requested by %d",
				st.CachedFreeBytes, o.RequestBytes, o.RequestBytes-st.CachedFreeBytes))
	case analysis.AdviceInterleaved:
		rem = append(rem,
			fmt.Sprintf("expandable segments are already on, and the allocator unmapped every wholly free page (%d bytes) before it raised: the %d bytes still reserved but unallocated lie in ranges between live blocks (the largest %d), in pages those blocks share; free the live blocks around them sooner, or allocate long-lived tensors before the short-lived ones so they do not interleave: the live blocks then: %s",
				o.ReleasedBytes, st.CachedFreeBytes-min(o.ReleasedBytes, st.CachedFreeBytes), st.LargestFreeRange, stackSites(res, o.LiveStacks, 3)),
			fmt.Sprintf("or reduce the batch size or the activation memory: tensors held %d bytes when %d more were needed", st.AllocatedBytes, o.RequestBytes))
	}
	return summary, rem
}

// fragmentationWords states the bytes reserved but unallocated at a
// fragmentation OOM, at a failure the allocator survived by flushing its
// cache, or at the worst moment; then the garbage collection advice when
// its evidence is there.
func fragmentationWords(res *analysis.Result, f *analysis.Finding) (string, []string) {
	ev := f.Pool
	dev := analysis.DeviceName(ev.Device)
	var summary string
	var rem []string
	switch o := f.OOM; {
	case o != nil && o.Outcome == analysis.OOMRetried:
		st := o.State
		summary = fmt.Sprintf("at the failing request of %d bytes on device %s (%s), %d bytes (%.1f%% of the %d reserved) were cached free in %d ranges, the largest %d, %d of them in whole free segments: the allocator grew instead of reclaiming its cache, failed, flushed %d segments (%d bytes) and retried",
			o.RequestBytes, dev, secs(res, o.Time), st.CachedFreeBytes, pct(st.CachedFreeBytes, st.ReservedBytes),
			st.ReservedBytes, st.FreeRanges, st.LargestFreeRange, ev.IdleLargeBytes, o.ReleasedSegments, o.ReleasedBytes)
	case o != nil:
		st := o.State
		summary = fmt.Sprintf("at the failing request of %d bytes on device %s (%s), %d bytes (%.1f%% of the %d reserved) were cached free in %d ranges, the largest %d: fragmentation, not capacity, ended the run; tensors held %d bytes",
			o.RequestBytes, dev, secs(res, o.Time), st.CachedFreeBytes, pct(st.CachedFreeBytes, st.ReservedBytes),
			st.ReservedBytes, st.FreeRanges, st.LargestFreeRange, st.AllocatedBytes)
		if ev.Failures > 1 {
			summary += fmt.Sprintf(" (the worst of %d failing requests, by the bytes cached free)", ev.Failures)
		}
		if ev.Expandable {
			rem = append(rem, fmt.Sprintf(
				"expandable segments are already on: free or move the live blocks between the free ranges (see the oom finding at %s)", secs(res, o.Time)))
			break
		}
		rem = append(rem, fmt.Sprintf(
			"set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (see the oom finding at %s)", secs(res, o.Time)))
	case ev.Worst != nil:
		w := ev.Worst
		summary = fmt.Sprintf("at %s, %d bytes (%.1f%% of the %d reserved on device %s) were cached free but scattered in %d ranges, the largest %d; %d segments were pinned by one small block",
			secs(res, w.Time), w.CachedFreeBytes, pct(w.CachedFreeBytes, w.ReservedBytes), w.ReservedBytes,
			dev, w.FreeRanges, w.LargestFreeRange, w.PinnedSegments)
		if ev.Expandable {
			rem = append(rem, fmt.Sprintf(
				"nothing failed: expandable segments are already on, and no request above %d bytes could use the %d free bytes without mapping more; act only if memory runs short",
				w.LargestFreeRange, w.CachedFreeBytes))
			break
		}
		rem = append(rem, fmt.Sprintf(
			"set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: no request above %d bytes could use the %d free bytes without a new segment",
			w.LargestFreeRange, w.CachedFreeBytes))
	}
	if ev.GC != nil {
		rem = append(rem, gcWords(res, ev.GC))
	}
	return summary, rem
}

// gcWords explains garbage_collection_threshold:T with the numbers.
func gcWords(res *analysis.Result, ev *analysis.GCThreshold) string {
	o, st := &ev.OOM, ev.OOM.State
	c := ev.CapacityBytes
	limit := ev.Threshold * c / 100
	basis := fmt.Sprintf("the device has %d bytes", c)
	if !ev.CapacityKnown {
		basis = fmt.Sprintf("the device offered at least %d bytes (capacity unknown: the retry fit once the flush released %d of the %d reserved, so %d - %d + %d were available)",
			c, o.ReleasedBytes, st.ReservedBytes, st.ReservedBytes, o.ReleasedBytes, o.RequestBytes)
	}
	return fmt.Sprintf(
		"set PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.%02d and call torch.cuda.set_per_process_memory_fraction(1.0) (the threshold is a fraction of that limit and is ignored without it): at %s the cache held %d bytes (%.1f%% of the %d reserved), %d of them in whole free segments, yet the allocator asked cudaMalloc for %d more and failed; %s; with T = 0.%02d = (%d - %d) / %d rounded down, it reclaims free segments before growing whenever reserved passes %d bytes, which leaves room for the %d-byte segment and stays above the %d bytes tensors held, instead of the failed call, the synchronizing flush of %d segments (%d bytes) and the retry (%s)",
		ev.Threshold, secs(res, o.Time), st.CachedFreeBytes, pct(st.CachedFreeBytes, st.ReservedBytes), st.ReservedBytes,
		ev.IdleLargeBytes, o.RequestBytes, basis, ev.Threshold, c, o.RequestBytes, c, limit, o.RequestBytes, st.AllocatedBytes,
		o.ReleasedSegments, o.ReleasedBytes, units.Duration(o.CostNs))
}

// churnRounds says how often the cache was released and refilled: per
// iteration of the loop when one was found.
func churnRounds(c *analysis.Churn) string {
	if c.Iterations > 0 {
		return fmt.Sprintf("the cache was released and refilled %d times in %d iterations", c.Releases, c.Iterations)
	}
	return fmt.Sprintf("the cache was released and refilled %d times", c.Releases)
}

// churnWords prices a process's release-and-reallocate cycles.
func churnWords(res *analysis.Result, f *analysis.Finding) (string, []string) {
	c := f.Churn
	gap := units.Duration(c.CycleGapNs / c.Cycles)
	// Calls per second only from a second observed; the cost is a share
	// of the run's time, not a projection.
	calls := "in " + units.Duration(c.ObservedNs)
	if _, ok := analysis.RateBaseFor(c.ObservedNs); ok {
		calls = fmt.Sprintf("%.1f per second", c.CallsPerSecond)
	}
	summary := fmt.Sprintf("process %s released %d segments (%d bytes, %s) that a segment of the same size replaced within %s on average: %d cudaMalloc and %d cudaFree calls (%s, %s inside them); the cycles cost %.3f ms per second of run; %s",
		res.Run.PIDText(f.PID), c.Cycles, c.CycleBytes, units.Bytes(c.CycleBytes), gap, c.Allocs, c.Frees, calls,
		units.Duration(c.AllocNs+c.FreeNs), c.CostMsPerSecond, churnRounds(c))
	// The release stacks first (where empty_cache() is called), when the
	// frees had stacks; then the allocations that took the memory back.
	where := "the release sites (no stack was captured at the frees)"
	for _, s := range c.FreeStacks {
		if s.Stack != 0 {
			where = res.Site(s.Stack)
			break
		}
	}
	if len(c.AllocStacks) > 0 {
		where += fmt.Sprintf(", before the allocations at %s", res.Site(c.AllocStacks[0].Stack))
	}
	if c.CachingOff {
		return summary, []string{fmt.Sprintf(
			"the caching allocator is not caching: %d of the %d tensor frees went straight to cudaFree, so each tensor's memory is allocated again from the driver (%.3f ms per second); unset PYTORCH_NO_CUDA_MEMORY_CACHING (or the allocator setting that turns its cache off) unless this run is for debugging memory",
			c.PassedFrees, c.TensorFrees, c.CostMsPerSecond)}
	}
	return summary, []string{fmt.Sprintf(
		"remove the empty_cache() (or other cache release) at %s from the loop: the %d bytes it released came back within %s on average, so it saved nothing for long and cost %.3f ms per second in cudaFree/cudaMalloc; call it once after a phase that will not need the memory again",
		where, c.CycleBytes, gap, c.CostMsPerSecond)}
}
