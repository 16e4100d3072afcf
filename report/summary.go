package report

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/report/units"
)

// summaryStacks is how many stacks at the peak the terminal summary names.
const summaryStacks = 3

// WriteSummary writes the terminal summary of res: about 10 to 20 lines with
// the peak, what was live at the end, pinned host memory, the runtime and
// driver books side by side (when both saw calls), the VMM figures (when
// any), the device layer (one line when NVML is off or unavailable) and
// memory from before tracing, the top stacks at the peak, leak candidates,
// failed allocations and lost events; pinned host growth and device
// imbalance findings ride on the pinned host and peak by device lines.
func WriteSummary(w io.Writer, res *analysis.Result) error {
	if res == nil {
		return ErrNilResult
	}
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	t := res.Totals

	p("vramprof: %s\n", runLine(res))
	// A process attached mid-run is said on the line of memory from
	// before tracing.
	for _, l := range cutReasons(res, afterStart) {
		p("incomplete:         %s\n", l)
	}
	if l := noCallsLine(&res.Run); l != "" {
		p("note:               %s\n", l)
	}
	for i, l := range strippedRuntimeLines(&res.Run) {
		if i == maxStrippedLines {
			p("note:               ... more files with a stripped CUDA runtime in the report\n")
			break
		}
		p("note:               %s\n", l)
	}
	p("peak:               %d bytes (%s) at %s\n", t.PeakBytes, units.Bytes(t.PeakBytes), secs(res, t.PeakTime))
	p("live at end:        %d bytes (%s) in %d allocations\n", t.LiveBytesAtEnd,
		units.Bytes(t.LiveBytesAtEnd), t.LiveAllocationsAtEnd)
	p("allocated:          %d bytes (%s) in %d allocations, %d frees\n", t.AllocatedBytes,
		units.Bytes(t.AllocatedBytes), t.Allocations, t.Frees)
	if len(res.Devices) > 1 {
		// Per device, when there is more than one: the peak that matters is
		// the one on the device that runs out. One line; report.md and
		// report.json have the rest.
		var parts []string
		for _, d := range res.Devices {
			parts = append(parts, fmt.Sprintf("%s: %d (%s)", analysis.DeviceName(d.Index), d.PeakBytes, units.Bytes(d.PeakBytes)))
		}
		p("peak by device:     %s%s\n", strings.Join(parts, " | "), findingNote(res, analysis.KindDeviceImbalance, "imbalance"))
	}
	p("pinned host:        %s%s\n", hostLine(res.Host), findingNote(res, analysis.KindPinnedHostGrowth, "growing"))
	if b := res.Books; b.Runtime.Calls() > 0 && b.Driver.Calls() > 0 {
		p("books:              %s\n", booksLine(b))
	}
	if v := res.VMM; v != nil {
		p("vmm:                %s\n", vmmLine(v))
	}
	for _, l := range summaryNVMLLines(res) {
		p("%s\n", l)
	}
	for _, l := range interpreterLines(&res.Run) {
		p("%s\n", l)
	}
	for _, l := range summaryPreexistingLines(res) {
		p("%s\n", l)
	}

	// The stacks of the process with the highest peak; others get one line.
	var top *analysis.Process
	for i := range res.Processes {
		pr := &res.Processes[i]
		if pr.PeakEvent != nil && (top == nil || pr.Totals.PeakBytes > top.Totals.PeakBytes) {
			top = pr
		}
	}
	if top != nil {
		p("top stacks at the peak of %s (%d bytes):\n", procLabel(res, top), top.Totals.PeakBytes)
		for i, s := range top.PeakStacks {
			if i == summaryStacks {
				break
			}
			p("  %d. %d bytes (%s, %.1f%%) in %d allocations at %s\n", i+1, s.Bytes, units.Bytes(s.Bytes),
				pct(s.Bytes, top.Totals.PeakBytes), s.Count, res.Site(s.Stack))
		}
		for i := range res.Processes {
			if pr := &res.Processes[i]; pr != top && pr.PeakEvent != nil {
				p("  %s peaked at %d bytes (%s)\n", procLabel(res, pr), pr.Totals.PeakBytes, units.Bytes(pr.Totals.PeakBytes))
			}
		}
	}

	var leaks []wordedFinding
	for _, f := range wordFindings(res) {
		if f.Kind == analysis.KindLeak {
			leaks = append(leaks, f)
		}
	}
	p("leak candidates:    %d\n", len(leaks))
	for i, f := range leaks {
		if i == summaryStacks {
			p("  ... %d more in the report\n", len(leaks)-i)
			break
		}
		site := analysis.NoStack
		if len(f.Stacks) > 0 {
			site = f.Stacks[0].Site
		}
		// The growth over the run, then its rate under the projection
		// rule (never a per-minute figure from a sub-minute run).
		rate := ""
		if l := f.Leak; l != nil {
			rate = fmt.Sprintf(" over %s, %s", units.Duration(l.To-l.From), growthRate(l))
		}
		p("  +%d bytes (%s%s) at %s\n", f.Bytes, units.Bytes(f.Bytes), rate, site)
	}
	p("failed allocations: %d (%d bytes requested)\n", t.FailedAllocations, t.FailedBytes)
	for _, pr := range res.Processes {
		if ff := pr.FirstFailure; ff != nil {
			p("  first in %s: %d bytes (%s) at %s, error %s, %d bytes live\n", procLabel(res, &pr), ff.Size,
				units.Bytes(ff.Size), res.Site(ff.Stack), analysis.ErrorName(ff.API, ff.Ret), ff.LiveBytes)
		}
	}
	lost := fmt.Sprint(res.LostEvents)
	if res.LostEvents > 0 {
		lost += " (" + lostCause(res) + ": the figures may be wrong either way: a missed free reads high, a missed allocation low)"
	}
	if res.LateEvents > 0 {
		// On the lost line: the summary is held to 20 lines.
		lost += fmt.Sprintf("; %d events late (after the reorder window: may be misordered against calls on the same address)", res.LateEvents)
	}
	p("lost events:        %s\n", lost)
	if l := flightLine(res, afterStart); l != "" {
		p("%s\n", l)
	}
	return bw.Flush()
}

// hostLine sums up pinned host memory, which is never in device figures.
func hostLine(h analysis.Totals) string {
	if h.Allocations == 0 && h.FailedAllocations == 0 && h.UnknownFrees == 0 {
		return "none"
	}
	return fmt.Sprintf("peak %d bytes (%s), %d bytes live at end in %d allocations, %d allocated in %d allocations (not device memory)",
		h.PeakBytes, units.Bytes(h.PeakBytes), h.LiveBytesAtEnd, h.LiveAllocationsAtEnd,
		h.AllocatedBytes, h.Allocations)
}

// booksLine shows the runtime's and the driver's ledgers side by side; they
// overlap (nested calls) and are never summed.
func booksLine(b analysis.Books) string {
	one := func(name string, b analysis.Book) string {
		return fmt.Sprintf("%s: %d allocations, %d bytes (%s)", name, b.Allocations, b.AllocatedBytes,
			units.Bytes(b.AllocatedBytes))
	}
	return one("runtime", b.Runtime) + " | " + one("driver", b.Driver)
}

// vmmLine sums up the virtual memory API: reserved address space is not
// usage; physical memory is (and is in the figures above).
func vmmLine(v *analysis.VMM) string {
	return fmt.Sprintf("reserved peak %d (%s, %d at end), physical peak %d (%s, %d at end), mapped %d at end; %d reserves, %d creates, %d maps",
		v.ReservedPeakBytes, units.Bytes(v.ReservedPeakBytes), v.ReservedBytesAtEnd,
		v.PhysicalPeakBytes, units.Bytes(v.PhysicalPeakBytes), v.PhysicalBytesAtEnd,
		v.MappedBytesAtEnd, v.Reserves, v.Creates, v.Maps)
}

// runLine says what ran, how, for how long and how it ended.
func runLine(res *analysis.Result) string {
	run := res.Run
	cmd := strings.Join(run.Command, " ")
	if cmd == "" {
		cmd = "pid " + run.PIDText(run.PID)
	}
	mode := run.Mode
	if mode == "" {
		mode = "unknown mode"
	}
	end := "cut short (no end record)"
	if run.Ended {
		end = endText(&run)
	}
	return fmt.Sprintf("%s (%s, %s, %s)", cmd, mode, durationText(&run), end)
}

// noCallsLine is the one line every output carries when CUDA was probed but
// no call was seen (analysis.Run.NoCallsSeen); "" otherwise.
func noCallsLine(run *analysis.Run) string {
	if !run.NoCallsSeen() {
		return ""
	}
	return "no calls seen: CUDA was loaded and probed, but no traced call was made while recording " +
		"(the process was idle, or did its allocating before an attach: a caching allocator reuses what it holds; " +
		"or its calls go through a copy of the runtime vramprof did not find)"
}

// secs renders a stream time as the time since the run's start, in the
// unit that fits ("+412 µs", "+1.25 s"); "an unknown time" when the
// stream's times are an order only.
func secs(res *analysis.Result, t uint64) string {
	if !res.Run.TimesKnown() {
		return "an unknown time"
	}
	return units.Offset(res.Rel(t))
}

func pct(part, whole uint64) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * float64(part) / float64(whole)
}

// iterationText describes a process's loop in one line; "" without one.
func iterationText(p *analysis.Process) string {
	it := p.Iterations
	if it == nil {
		return ""
	}
	s := fmt.Sprintf("%d iterations of %s, paced by the allocations at %s", it.Count, units.Duration(it.PeriodNs), it.Site)
	if it.AllocatedBytesPerIteration > 0 {
		sign := "+"
		if it.LiveGrowthPerIteration < 0 {
			sign = "-"
		}
		s += fmt.Sprintf("; %.0f bytes allocated per iteration, live bytes %s%.0f per iteration",
			it.AllocatedBytesPerIteration, sign, math.Abs(it.LiveGrowthPerIteration))
	}
	return s
}

// findingNote sums up the findings of one kind for the end of a summary
// line: "; growing: +N bytes (...) at SITE", "" without any.
func findingNote(res *analysis.Result, kind, label string) string {
	var parts []string
	for _, f := range wordFindings(res) {
		if f.Kind != kind {
			continue
		}
		site := analysis.NoStack
		if len(f.Stacks) > 0 {
			site = f.Stacks[0].Site
		}
		parts = append(parts, fmt.Sprintf("+%d bytes (%s), the most at %s", f.Bytes, units.Bytes(f.Bytes), site))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + label + ": " + strings.Join(parts, "; ")
}
