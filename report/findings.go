package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report/units"
)

// wordedFinding is an analysis finding with its words: the summary and the
// remediation every output prints (report.json's "summary" and
// "remediation"). The words quote the finding's facts; no advice without
// evidence.
type wordedFinding struct {
	*analysis.Finding
	Summary     string
	Remediation []string
}

// wordFindings words res's findings, in the order the outputs list them:
// the analysis's rank (analysis.RankFindings), then the summary, then the
// first stack.
func wordFindings(res *analysis.Result) []wordedFinding {
	out := make([]wordedFinding, len(res.Findings))
	for i := range res.Findings {
		f := &res.Findings[i]
		s, rem := findingWords(res, f)
		out[i] = wordedFinding{Finding: f, Summary: s, Remediation: rem}
	}
	slices.SortStableFunc(out, func(x, y wordedFinding) int {
		return cmp.Or(analysis.RankFindings(x.Finding, y.Finding), cmp.Compare(x.Summary, y.Summary),
			cmp.Compare(analysis.FirstStack(x.Finding), analysis.FirstStack(y.Finding)))
	})
	return out
}

// findingWords words one finding from its kind's evidence.
func findingWords(res *analysis.Result, f *analysis.Finding) (summary string, remediation []string) {
	switch {
	case f.Peak != nil:
		return peakWords(res, f)
	case f.OOMCalls != nil:
		return oomWords(res, f)
	case f.FailedCall != nil:
		return failedCallWords(res, f)
	case f.Kind == analysis.KindLeak && f.Leak != nil:
		return leakWords(res, f)
	case f.Pinned != nil:
		return pinnedWords(res, f)
	case f.Spike != nil:
		return spikeWords(res, f)
	case f.Imbalance != nil:
		return imbalanceWords(res, f)
	case f.Kind == analysis.KindOOM && f.Pool != nil && f.OOM != nil:
		return poolOOMWords(res, f)
	case f.Kind == analysis.KindFragmentation && f.Pool != nil:
		return fragmentationWords(res, f)
	case f.Churn != nil:
		return churnWords(res, f)
	case f.Cache != nil:
		return cacheWords(res, f)
	}
	return "", nil
}

// peakWords states a process's peak and the allocation that crossed it;
// the remediation names the largest stacks at the peak.
func peakWords(res *analysis.Result, f *analysis.Finding) (string, []string) {
	peak, ev := f.Bytes, f.Peak
	summary := fmt.Sprintf("process %s peaked at %d bytes (%s) at %s; the allocation that crossed it: %d bytes at %s on device %s",
		res.Run.PIDText(f.PID), peak, units.Bytes(peak), secs(res, f.Time), ev.Crossing.Size, res.Site(ev.Crossing.Stack),
		analysis.DeviceName(ev.Crossing.Device))
	var rem []string
	if len(ev.Tensors) > 0 {
		// The segments at the peak are the allocator's cache: the tensors
		// say what to reduce.
		summary += fmt.Sprintf("; its tensors peaked at %d bytes (%s) at %s",
			ev.TensorPeakBytes, units.Bytes(ev.TensorPeakBytes), secs(res, ev.TensorPeakTime))
		for _, s := range ev.Tensors {
			rem = append(rem, fmt.Sprintf(
				"reduce, reuse or free earlier the tensors allocated at %s: %d bytes (%s, %.1f%% of the tensors' peak) in %d allocations were live at the tensors' peak",
				res.Site(s.Stack), s.Bytes, units.Bytes(s.Bytes), pct(s.Bytes, ev.TensorPeakBytes), s.Count))
		}
		return summary, rem
	}
	for _, s := range ev.Largest {
		rem = append(rem, fmt.Sprintf(
			"reduce, reuse or free earlier the buffers allocated at %s: %d bytes (%s, %.1f%% of the peak) in %d allocations were live at the peak",
			res.Site(s.Stack), s.Bytes, units.Bytes(s.Bytes), pct(s.Bytes, peak), s.Count))
	}
	return summary, rem
}

// oomWords explains a process's first out-of-memory failure with what was
// live then.
func oomWords(res *analysis.Result, f *analysis.Finding) (string, []string) {
	ff, calls := &f.OOMCalls.First, f.OOMCalls
	site := res.Site(ff.Stack)
	summary := fmt.Sprintf("a request for %d bytes (%s) at %s failed with error %s on device %s at %s while %d bytes (%s) were live in process %s (%d on that device; peak so far %d)",
		ff.Size, units.Bytes(ff.Size), site, analysis.ErrorName(ff.API, ff.Ret), analysis.DeviceName(ff.Device), secs(res, ff.Time),
		ff.LiveBytes, units.Bytes(ff.LiveBytes), res.Run.PIDText(f.PID), ff.DeviceLiveBytes, ff.PeakBytes)
	var rem []string
	if len(ff.LiveStacks) == 0 {
		rem = append(rem, fmt.Sprintf(
			"nothing traced was live when %d bytes were requested at %s: the request alone exceeded the free memory; shrink it, or look for memory not traced here (other processes, allocations before attach)",
			ff.Size, site))
	} else {
		top := ff.LiveStacks[0]
		rem = append(rem, fmt.Sprintf(
			"free or shrink memory before the request at %s (%d bytes): the largest live allocation site then was %s with %d bytes (%.1f%% of the %d live) in %d allocations",
			site, ff.Size, res.Site(top.Stack), top.Bytes, pct(top.Bytes, ff.LiveBytes), ff.LiveBytes, top.Count))
	}
	if calls.Count > 1 {
		rem = append(rem, fmt.Sprintf(
			"%d allocation calls ran out of memory in all (%d bytes requested); fix the first at %s, later ones may follow from it",
			calls.Count, calls.Bytes, site))
	}
	return summary, rem
}

// setupKey names an error code of the driver API (driver) or the runtime.
type setupKey struct {
	driver bool
	ret    int32
}

// setupHints say what to fix for the codes that mean CUDA cannot work in
// the process at all (analysis.IsSetupError).
var setupHints = map[setupKey]string{
	{false, 3}:   "CUDA could not initialize: check that the NVIDIA driver is loaded (nvidia-smi, dmesg)",
	{true, 3}:    "the driver API was called before cuInit, or cuInit failed: check that the NVIDIA driver is loaded (nvidia-smi, dmesg)",
	{false, 34}:  "the CUDA library loaded is a stub (libcuda.so from the toolkit's stubs directory): put the driver's libcuda.so.1 first on the library path",
	{true, 34}:   "the CUDA library loaded is a stub (libcuda.so from the toolkit's stubs directory): put the driver's libcuda.so.1 first on the library path",
	{false, 35}:  "the NVIDIA driver is missing or older than this CUDA runtime: install a driver that supports the runtime's CUDA version (nvidia-smi shows the driver's), or use a runtime built for the installed driver",
	{false, 100}: "no CUDA device is visible: check nvidia-smi, CUDA_VISIBLE_DEVICES and the container's device access (--gpus)",
	{true, 100}:  "no CUDA device is visible: check nvidia-smi, CUDA_VISIBLE_DEVICES and the container's device access (--gpus)",
	{false, 803}: "the display driver and the CUDA driver are different versions: reinstall the driver or reboot after an upgrade",
	{true, 803}:  "the display driver and the CUDA driver are different versions: reinstall the driver or reboot after an upgrade",
}

// failedCallWords reports an error other than out-of-memory: its name, how
// many calls and bytes, and where.
func failedCallWords(res *analysis.Result, f *analysis.Finding) (string, []string) {
	fc := &f.FailedCall.Calls
	site := res.Site(fc.First.Stack)
	summary := fmt.Sprintf("%d allocation %s failed with error %s (not out-of-memory), %d bytes (%s) requested; the first, %s of %d bytes at %s on device %s at %s",
		fc.Count, plural(fc.Count, "call", "calls"), fc.Error, fc.Bytes, units.Bytes(fc.Bytes),
		fc.First.API, fc.First.Size, site, analysis.DeviceName(fc.First.Device), secs(res, fc.First.Time))
	if hint, ok := setupHints[setupKey{fc.Driver, fc.Ret}]; ok && f.FailedCall.Setup {
		return summary, []string{hint}
	}
	return summary, []string{fmt.Sprintf(
		"error %s is not out-of-memory: check the call's arguments at %s and the driver and device setup before the sizes", fc.Error, site)}
}

func plural(n uint64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// leakWords says what grows, where, how fast and since when: tensors
// (the block layer) or device memory, at the stack's site; the growth
// over the run, still live at the end; the rates (rateWords); since when
// (the first iteration of the growth, else the process's first traced
// moment). The detection windows are in report.json only.
func leakWords(res *analysis.Result, f *analysis.Finding) (string, []string) {
	lk, st := f.Leak, f.Stacks[0]
	site := res.Site(st.Stack)
	growth := f.Bytes
	what, things := "device memory", "buffers"
	if lk.Layer == event.LayerBlock {
		what, things = "tensors", "tensors"
	}
	since := lk.From
	if lk.Since != 0 {
		since = lk.Since
	}
	summary := fmt.Sprintf("%s allocated at %s in process %s grew by %d bytes (%s) since %s (%s), %d allocations still live at the end%s",
		what, site, res.Run.PIDText(f.PID), growth, units.Bytes(growth), secs(res, since), units.Duration(lk.To-since),
		st.Count, rateWords(lk, "the stack"))
	rem := []string{fmt.Sprintf(
		"free or detach the %s allocated at %s: +%d bytes (%s) over %s; %d allocations from there were still live at the end",
		things, site, growth, units.Bytes(growth), units.Duration(lk.To-lk.From), st.Count)}
	if lk.Iterations > 0 {
		fix := fmt.Sprintf("each iteration keeps %.0f more bytes (%s) allocated at %s: release what the iteration no longer needs at its end (drop the reference, detach the tensor from the graph, or keep a bounded cache)",
			lk.BytesPerIteration, units.FloatBytes(lk.BytesPerIteration), site)
		if lk.TimeToOOMProjectable() {
			fix += fmt.Sprintf("; at this rate %s run out in %s", headroomText(lk), units.Seconds(lk.TimeToOOMSeconds))
		}
		rem = append(rem, fix)
	}
	return summary, rem
}

// leakLayer names what a leak finding's stack holds, as report.json
// says it: "block" (tensors) or "segment" (device memory from CUDA).
func leakLayer(l *analysis.Leak) string {
	if l.Layer == event.LayerBlock {
		return "block"
	}
	return "segment"
}

// cacheWords says once that a caching allocator's reserve grew past its
// tensors: the cache, not a leak. Reserved against allocated, how far the
// reserve grew and when it stopped, and both at the end.
func cacheWords(res *analysis.Result, f *analysis.Finding) (string, []string) {
	c := f.Cache
	summary := fmt.Sprintf("cache, not a leak: the caching allocator of process %s reserved up to %d bytes (%s) by %s, never more after (%s to the end), while its tensors peaked at %d bytes (%s); at the end %d bytes (%s) reserved, %d (%s) allocated",
		res.Run.PIDText(f.PID), c.ReservedPeakBytes, units.Bytes(c.ReservedPeakBytes), secs(res, c.ReservedPeakTime),
		units.Duration(c.End-min(c.End, c.ReservedPeakTime)), c.AllocatedPeakBytes, units.Bytes(c.AllocatedPeakBytes),
		c.ReservedAtEnd, units.Bytes(c.ReservedAtEnd), c.AllocatedAtEnd, units.Bytes(c.AllocatedAtEnd))
	idle := c.ReservedAtEnd - min(c.ReservedAtEnd, c.AllocatedAtEnd)
	rem := []string{fmt.Sprintf(
		"nothing to fix: the allocator keeps freed memory to reuse it (torch.cuda.memory_reserved() against memory_allocated()); if other processes need it, torch.cuda.empty_cache() returns the unused %d bytes (%s) at the cost of allocating them again",
		idle, units.Bytes(idle))}
	return summary, rem
}

// headroomText names what a leak's time to out-of-memory counts down:
// "device 0's 85899345920 bytes" (its capacity, less the traced memory at
// the end), or, from NVML, "device 0's 85520809984 free bytes (79.65 GiB,
// NVML's last sample)".
func headroomText(l *analysis.Leak) string {
	if l.HeadroomNVML {
		return fmt.Sprintf("device %s's %d free bytes (%s, NVML's last sample)", analysis.DeviceName(l.Device),
			l.HeadroomBytes, units.Bytes(l.HeadroomBytes))
	}
	return fmt.Sprintf("device %s's %d bytes", analysis.DeviceName(l.Device), l.CapacityBytes)
}

// rateWords renders a leak's rates for a summary, following the projection
// rule (see analysis's doc.go, "Rates and projections"): per iteration
// with a loop; per second, minute or hour only when that much time was
// observed; the time to out-of-memory only when within
// analysis.ProjectionFactor times the observed span, else the plain
// observation. what names the memory ("the stack", "pinned host memory").
func rateWords(l *analysis.Leak, what string) string {
	var s string
	if l.Iterations > 0 {
		s = fmt.Sprintf("; %.0f bytes (%s) per iteration over %d iterations of %s",
			l.BytesPerIteration, units.FloatBytes(l.BytesPerIteration), l.Iterations, units.Duration(l.PeriodNs))
	}
	rate, obs := l.BytesPerSecondObserved()
	if b, ok := analysis.RateBaseFor(obs); ok {
		s += fmt.Sprintf("; %s over %s", units.Rate(rate*float64(b.Ns)/1e9, b.Name), units.Duration(obs))
	} else if l.Iterations == 0 {
		s += fmt.Sprintf("; %s observed for %s, too short for a rate per second", what, units.Duration(obs))
	}
	if l.CapacityBytes > 0 {
		if l.TimeToOOMProjectable() {
			s += fmt.Sprintf("; at that rate device %s (%d bytes, %s) runs out in %s",
				analysis.DeviceName(l.Device), l.CapacityBytes, units.Bytes(l.CapacityBytes), units.Seconds(l.TimeToOOMSeconds))
			if l.HeadroomNVML {
				s += fmt.Sprintf(", from its %d free bytes (%s) at NVML's last sample", l.HeadroomBytes, units.Bytes(l.HeadroomBytes))
			}
		} else {
			s += fmt.Sprintf("; run too short to project when device %s (%d bytes, %s) runs out: %s grew by %d bytes (%s) over %s",
				analysis.DeviceName(l.Device), l.CapacityBytes, units.Bytes(l.CapacityBytes), what,
				l.GrowthBytes, units.Bytes(l.GrowthBytes), units.Duration(l.To-l.From))
		}
	}
	return s
}

// pinnedWords states a process's pinned host growth and its growing sites.
func pinnedWords(res *analysis.Result, f *analysis.Finding) (string, []string) {
	lk, ev := f.Leak, f.Pinned
	growth := f.Bytes
	var sites []string
	var liveCount, liveBytes uint64
	for _, s := range ev.Growing {
		sites = append(sites, fmt.Sprintf("%s (+%d bytes, %d allocations live at the end)", res.Site(s.Stack), s.Bytes, s.Count))
		liveCount += s.Count
		liveBytes += s.Bytes
	}
	summary := fmt.Sprintf("pinned host memory of process %s grew by %d bytes (%s) over the run (%s to %s, %s) without falling in the detection windows (+%d bytes, %s, from %s to %s), allocated at %s%s; pinned host peak %d bytes, %d live at the end (host RAM, not device memory)",
		res.Run.PIDText(f.PID), growth, units.Bytes(growth), secs(res, lk.From), secs(res, lk.To), units.Duration(lk.To-lk.From),
		lk.WindowGrowthBytes, units.Bytes(lk.WindowGrowthBytes), secs(res, lk.WindowStart), secs(res, lk.WindowEnd),
		strings.Join(sites, ", "), rateWords(lk, "pinned host memory"), ev.HostPeakBytes, ev.HostLiveBytesAtEnd)
	rem := []string{fmt.Sprintf(
		"free the pinned buffers allocated at %s with cudaFreeHost (or drop the tensors holding them) once their copy is done: %d allocations (%d bytes) from the growing sites were still live at the end",
		res.Site(ev.Growing[0].Stack), liveCount, liveBytes)}
	if liveCount >= 2 {
		rate := fmt.Sprintf("+%d bytes (%s) over %s", growth, units.Bytes(growth), units.Duration(lk.To-lk.From))
		if lk.Iterations > 0 {
			rate = fmt.Sprintf("%.0f bytes (%s) per iteration", lk.BytesPerIteration, units.FloatBytes(lk.BytesPerIteration))
		}
		rem = append(rem, fmt.Sprintf(
			"pin once, reuse: the run pinned new buffers %d times without freeing them (%s); allocate a fixed set of pinned staging buffers (a pinned-memory pool) up front and copy each batch through them",
			liveCount, rate))
	}
	if ev.PinMemoryFrame != "" {
		rem = append(rem, fmt.Sprintf(
			"the growing stack at %s runs through %s: with a DataLoader(pin_memory=True), use persistent_workers=True and a bounded prefetch_factor so the pinned batches in flight stay bounded, and keep no reference to a pinned batch after its step",
			res.Site(ev.PinMemoryStack), ev.PinMemoryFrame))
	}
	return summary, rem
}

// spikeWords states a site's brief, large allocations.
func spikeWords(res *analysis.Result, f *analysis.Finding) (string, []string) {
	ev, st := f.Spike, f.Stacks[0]
	height := f.Bytes
	site := res.Site(st.Stack)
	what, whose := "allocations", "the process's"
	if ev.Layer == event.LayerBlock {
		what, whose = "tensors", "the tensors'"
	}
	summary := fmt.Sprintf("%d short-lived %s of up to %d bytes (%s) at %s in process %s, each freed within %s",
		st.Count, what, height, units.Bytes(height), site, res.Run.PIDText(f.PID), units.Duration(ev.LongestNs))
	if ev.SetPeak {
		summary += fmt.Sprintf("; %s peak of %d bytes (%s) at %s fell inside one: without it the peak there was %d bytes",
			whose, ev.PeakBytes, units.Bytes(ev.PeakBytes), secs(res, ev.PeakTime), ev.PeakBytes-height)
	}
	return summary, []string{fmt.Sprintf(
		"allocate the %s at %s where less is live, in smaller pieces, or on the host (e.g. copy tensors to CPU before saving a checkpoint): it adds %d bytes on top of what is live",
		units.Bytes(height), site, height)}
}

// imbalanceWords compares the heaviest device's peak with the lightest's.
func imbalanceWords(res *analysis.Result, f *analysis.Finding) (string, []string) {
	ev := f.Imbalance
	heavy, light := &ev.Heavy, &ev.Light
	hd, ld := analysis.DeviceName(heavy.Index), analysis.DeviceName(light.Index)
	diff := f.Bytes
	var parts []string
	for _, s := range ev.Stacks {
		parts = append(parts, fmt.Sprintf("%s (+%d bytes: %s)", res.Site(s.Stack), s.HeavyBytes-s.LightBytes, lightWords(s, ld)))
	}
	where := "the same code paths hold more there"
	if len(parts) > 0 {
		where = "the difference is at " + strings.Join(parts, ", ")
	}
	summary := fmt.Sprintf("device %s peaked at %d bytes (%s), %d bytes (%s, %.1f%%) above device %s (%d bytes, %s), the lightest of %d devices in use (device %s: processes %s; device %s: processes %s); %s",
		hd, heavy.PeakBytes, units.Bytes(heavy.PeakBytes), diff, units.Bytes(diff), pct(diff, light.PeakBytes), ld,
		light.PeakBytes, units.Bytes(light.PeakBytes), ev.Devices, hd, pidWords(heavy.PIDs), ld, pidWords(light.PIDs), where)
	var rem []string
	if len(ev.Stacks) > 0 {
		top := ev.Stacks[0]
		rem = append(rem, fmt.Sprintf(
			"the allocations at %s held %d bytes at device %s's peak, %s: if this is state one rank or device keeps alone (optimizer state, an evaluation pass, a checkpoint gathered on rank 0), shard it across the devices (ZeRO/FSDP-style sharding of optimizer state, a sharded checkpoint instead of a gather to one rank) or move it off the device (CPU offload); device %s's peak would come down by up to %d bytes",
			res.Site(top.Stack), top.HeavyBytes, hd, lightWords(top, ld), hd, top.HeavyBytes-top.LightBytes))
	}
	if capacity := heavy.CapacityBytes; capacity > 0 {
		other := fmt.Sprintf("device %s peaked at %d", ld, light.PeakBytes)
		if c := light.CapacityBytes; c > 0 {
			other = fmt.Sprintf("device %s used %.1f%% of its %d", ld, pct(light.PeakBytes, c), c)
		}
		rem = append(rem, fmt.Sprintf(
			"device %s reached %.1f%% of its %d bytes while %s: the heaviest device sets the batch size every device can run",
			hd, pct(heavy.PeakBytes, capacity), capacity, other))
	}
	return summary, rem
}

// lightWords says what the light device held of a stack's frames.
func lightWords(s analysis.ImbalanceStack, light string) string {
	if s.LightBytes == 0 {
		return fmt.Sprintf("none at device %s's peak", light)
	}
	return fmt.Sprintf("%d bytes at device %s's peak", s.LightBytes, light)
}

func pidWords(pids []uint32) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, ", ")
}
