package report

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/report/units"
)

// mdTopStacks is how many stacks the markdown report lists per table: enough
// to cover most of a peak, few enough to read.
const mdTopStacks = 10

// WriteMarkdown writes report.md for res: summary table (pinned host memory
// on its own row), the runtime and driver books side by side (when both saw
// calls), the VMM figures (when any), devices, the device layer (NVML: off,
// unavailable in one line, or its figures reconciled with the traced ones),
// processes with their memory from before tracing, peak with its top
// stacks, live at end, findings with remediation, failed allocations, lost
// events (always, even 0) and the libraries probed.
func WriteMarkdown(w io.Writer, res *analysis.Result) error {
	return writeMarkdown(w, &Report{Result: res})
}

// writeMarkdown is WriteMarkdown for a Report: its tests follow the live
// at end (writeTestsMarkdown).
func writeMarkdown(w io.Writer, r *Report) error {
	res := r.Result
	if res == nil {
		return ErrNilResult
	}
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	t := res.Totals
	run := res.Run

	// Title and one line on the run: what, how, how long, how it ended.
	p("# vramprof report\n\n")
	p("%s\n\n", runLine(res))
	if l := incompleteLine(res, afterStart); l != "" {
		p("**Incomplete recording:** %s.\n\n", l)
	}
	if l := momentLine(res, afterStart); l != "" {
		p("**Moment:** %s.\n\n", l)
	}
	if l := flightLine(res, afterStart); l != "" {
		p("**Note:** %s.\n\n", l)
	}
	if l := noCallsLine(&run); l != "" {
		p("**Note:** %s.\n\n", l)
	}
	for _, l := range strippedRuntimeLines(&run) {
		p("**Note:** %s.\n\n", cell(l))
	}

	// Exact integers in the middle column, human units beside them.
	p("## Summary\n\n")
	p("| | count or bytes | |\n| --- | ---: | --- |\n")
	p("| peak | %d | %s at %s |\n", t.PeakBytes, units.Bytes(t.PeakBytes), secs(res, t.PeakTime))
	p("| live at end | %d | %s in %d allocations |\n", t.LiveBytesAtEnd, units.Bytes(t.LiveBytesAtEnd), t.LiveAllocationsAtEnd)
	p("| allocated | %d | %s |\n", t.AllocatedBytes, units.Bytes(t.AllocatedBytes))
	p("| allocations | %d | |\n", t.Allocations)
	p("| frees | %d | |\n", t.Frees)
	p("| failed allocations | %d | %d bytes requested |\n", t.FailedAllocations, t.FailedBytes)
	p("| unknown frees | %d | %s |\n", t.UnknownFrees, unknownFreesNote(res))
	p("| null frees | %d | |\n", t.NullFrees)
	p("| zero-size allocations | %d | |\n", t.ZeroSizeAllocations)
	p("| replaced allocations | %d | a free was missed |\n", t.ReplacedAllocations)
	if h := res.Host; h.Allocations == 0 && h.FailedAllocations == 0 && h.UnknownFrees == 0 {
		p("| pinned host memory, peak | 0 | none traced |\n")
	} else {
		p("| pinned host memory, peak | %d | %s; %d bytes live at end in %d allocations; %d allocated in %d allocations; not device memory |\n",
			h.PeakBytes, units.Bytes(h.PeakBytes), h.LiveBytesAtEnd, h.LiveAllocationsAtEnd, h.AllocatedBytes, h.Allocations)
	}
	p("| lost events | %d | |\n\n", res.LostEvents)

	// The two books side by side, when both saw calls: they overlap, since a
	// runtime call's nested driver call is in the driver's book.
	if b := res.Books; b.Runtime.Calls() > 0 && b.Driver.Calls() > 0 {
		p("## API books\n\n")
		p("Every call of each API, nested or not: a cudaMalloc and the cuMemAlloc_v2 inside it are one allocation in each book and one in the totals. The books are never summed.\n\n")
		p("| | runtime (libcudart) | driver (libcuda) |\n| --- | ---: | ---: |\n")
		row := func(name string, f func(b analysis.Book) uint64) {
			p("| %s | %d | %d |\n", name, f(b.Runtime), f(b.Driver))
		}
		row("allocations", func(b analysis.Book) uint64 { return b.Allocations })
		row("frees", func(b analysis.Book) uint64 { return b.Frees })
		row("failed allocations", func(b analysis.Book) uint64 { return b.FailedAllocations })
		row("failed frees", func(b analysis.Book) uint64 { return b.FailedFrees })
		row("unknown frees", func(b analysis.Book) uint64 { return b.UnknownFrees })
		row("allocated bytes", func(b analysis.Book) uint64 { return b.AllocatedBytes })
		row("peak bytes", func(b analysis.Book) uint64 { return b.PeakBytes })
		row("live at end", func(b analysis.Book) uint64 { return b.LiveBytesAtEnd })
		p("\n")
	}

	if v := res.VMM; v != nil {
		p("## Virtual memory (VMM)\n\n")
		p("%d reserves, %d unreserves, %d creates, %d releases, %d maps, %d unmaps; %d failed calls, %d calls on a handle or range not seen before (created before attach). Reserved address space is not usage; physical memory is, and is in the figures above.\n\n",
			v.Reserves, v.Unreserves, v.Creates, v.Releases, v.Maps, v.Unmaps, v.FailedCalls, v.UnknownCalls)
		p("| device | reserved peak | reserved at end | physical peak | physical at end | mapped peak | mapped at end |\n")
		p("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		vrow := func(name string, b analysis.VMMBytes) {
			p("| %s | %d | %d | %d | %d | %d | %d |\n", name, b.ReservedPeakBytes, b.ReservedBytesAtEnd,
				b.PhysicalPeakBytes, b.PhysicalBytesAtEnd, b.MappedPeakBytes, b.MappedBytesAtEnd)
		}
		for _, d := range v.Devices {
			vrow(analysis.DeviceName(d.Index), d.VMMBytes)
		}
		vrow("all", v.VMMBytes)
		p("\n")
	}

	if len(res.Devices) > 0 {
		p("## Devices\n\n| device | peak bytes | | live at end | capacity |\n| --- | ---: | --- | ---: | ---: |\n")
		for _, d := range res.Devices {
			capacity := "unknown"
			if d.CapacityBytes > 0 {
				capacity = fmt.Sprint(d.CapacityBytes)
			}
			p("| %s | %d | %s at %s | %d | %s |\n", analysis.DeviceName(d.Index), d.PeakBytes,
				units.Bytes(d.PeakBytes), secs(res, d.PeakTime), d.LiveBytesAtEnd, capacity)
		}
		p("\n")
	}

	writeNVMLMarkdown(p, res)

	if len(res.Processes) > 0 {
		p("## Processes\n\n| pid | started | command | peak bytes | live at end | allocations | failed | parent | pinned host peak |\n| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, pr := range res.Processes {
			p("| %s | %s | %s | %d | %d | %d | %d | %s | %d |\n", res.Run.PIDText(pr.PID), secs(res, pr.Start), cell(strings.Join(pr.Command, " ")),
				pr.Totals.PeakBytes, pr.Totals.LiveBytesAtEnd, pr.Totals.Allocations, pr.Totals.FailedAllocations,
				ppidText(res, pr.PPID), pr.Host.PeakBytes)
		}
		for i := range res.Processes {
			if pr := &res.Processes[i]; pr.SupersededAt != 0 {
				p("\n%s ended by %s, when another process record came for its PID (an exec, or the PID reused after an exit): its live at end is what it held when it ended, and its memory is not in the totals or devices at the end.\n",
					procLabel(res, pr), secs(res, pr.SupersededAt))
			}
		}
		loops := false
		for i := range res.Processes {
			if pr := &res.Processes[i]; pr.Iterations != nil {
				if !loops {
					p("\nTraining loops, from the allocations' rhythm:\n\n")
					loops = true
				}
				p("- %s: %s\n", procLabel(res, pr), md(iterationText(pr)))
			}
		}
		p("\nMemory held before tracing began:\n\n")
		for i := range res.Processes {
			pr := &res.Processes[i]
			p("- %s: %s\n", procLabel(res, pr), preexistingText(res, pr))
		}
		p("\n")
	}

	// One section per process that ever had memory live: the peak, the
	// allocation that crossed it, and what made it up.
	p("## Peak\n\n")
	peaked := false
	for _, pr := range res.Processes {
		if pr.PeakEvent == nil {
			continue
		}
		peaked = true
		e := pr.PeakEvent
		p("### Process %s: %d bytes (%s) at %s\n\n", procHeading(res, &pr), pr.Totals.PeakBytes,
			units.Bytes(pr.Totals.PeakBytes), secs(res, pr.PeakTime))
		p("Crossed by an allocation of %d bytes at %s on device %s (%s).\n\n", e.Size, cell(res.Site(e.Stack)),
			analysis.DeviceName(e.Device), e.API)
		stackTable(bw, res, pr.PeakStacks, pr.Totals.PeakBytes, "of the peak")
	}
	if !peaked {
		p("Nothing was live at any time.\n\n")
	}

	p("## Live at end\n\n")
	lived := false
	for _, pr := range res.Processes {
		if len(pr.LiveAtEnd) == 0 {
			continue
		}
		lived = true
		p("### Process %s: %d bytes (%s) in %d allocations\n\n", procHeading(res, &pr), pr.Totals.LiveBytesAtEnd,
			units.Bytes(pr.Totals.LiveBytesAtEnd), pr.Totals.LiveAllocationsAtEnd)
		stackTable(bw, res, pr.LiveAtEnd, pr.Totals.LiveBytesAtEnd, "of live")
	}
	if !lived {
		p("Nothing was live at the end.\n\n")
	}

	writeTestsMarkdown(p, r)

	// Findings in the analysis's rank order, each with its evidence.
	p("## Findings\n\n")
	if len(res.Findings) == 0 {
		p("None.\n\n")
	}
	for i, f := range wordFindings(res) {
		p("### %d. %s (%s), %d bytes (%s)\n\n%s\n\n", i+1, f.Kind, f.Severity, f.Bytes, units.Bytes(f.Bytes), md(f.Summary))
		if l := f.Leak; l != nil {
			// The bytes at stake, then the rule's evidence and the rate.
			p("Evidence: +%d bytes over the run (%s to %s); detection windows %s; rate %s.\n\n",
				l.GrowthBytes, secs(res, l.From), secs(res, l.To), windowsText(res, l), md(growthRate(l)))
		}
		if len(f.Remediation) > 0 {
			p("Remediation:\n\n")
			for _, r := range f.Remediation {
				p("- %s\n", md(r))
			}
			p("\n")
		}
		for _, s := range f.Stacks {
			p("%d bytes in %d allocations at:\n\n```\n%s\n```\n\n", s.Bytes, s.Count, strings.Join(s.Frames, "\n"))
		}
	}

	writePoolsMarkdown(p, res)

	p("## Failed allocations\n\n")
	if t.FailedAllocations == 0 {
		p("None.\n\n")
	}
	for _, pr := range res.Processes {
		ff := pr.FirstFailure
		if ff == nil {
			continue
		}
		p("### Process %s: %d failed, %d bytes requested\n\n", procHeading(res, &pr), pr.Totals.FailedAllocations, pr.Totals.FailedBytes)
		p("The first asked for %d bytes (%s) at %s on device %s at %s and returned %s, with %d bytes live in the process.\n\n",
			ff.Size, units.Bytes(ff.Size), cell(res.Site(ff.Stack)), analysis.DeviceName(ff.Device),
			secs(res, ff.Time), analysis.ErrorName(ff.API, ff.Ret), ff.LiveBytes)
		p("| requested bytes | calls | site |\n| ---: | ---: | --- |\n")
		for _, s := range pr.Failed {
			p("| %d | %d | %s |\n", s.Bytes, s.Count, cell(res.Site(s.Stack)))
		}
		p("\n")
	}

	// Always present: a reader must know whether the counts are complete.
	p("## Lost events\n\n")
	if res.LostEvents == 0 {
		p("0 records lost.\n\n")
	} else {
		p("%d records lost (%s): the figures above may be wrong either way (a missed free reads high, a missed allocation low).\n\n", res.LostEvents, lostCause(res))
	}
	if res.LateEvents == 0 {
		p("0 events late: every event is in the order it took effect.\n\n")
	} else {
		p("%d events late (a free that took longer than the reorder window): each is counted where it arrived, and may be misordered against calls on the same address (unknown frees, replaced allocations).\n\n", res.LateEvents)
	}

	if lines := interpreterLines(&run); len(lines) > 0 {
		p("## Python\n\n")
		for _, l := range lines {
			p("- %s\n", cell(l))
		}
		p("\n")
	}

	p("## Libraries probed\n\n")
	if len(run.Libraries) == 0 {
		p("None recorded.\n")
	} else {
		// The functions' names are in report.json: a count keeps the table
		// narrow enough for a pull-request comment.
		p("| pid | path | build id | functions probed |\n| ---: | --- | --- | ---: |\n")
		for _, l := range run.Libraries {
			p("| %d | %s | %s | %d |\n", l.PID, cell(l.Path), cell(l.BuildID), len(l.Symbols))
		}
		// An allocator spec's function left unprobed is a gap in the block
		// layer: say which and why, one line each.
		for _, l := range run.Libraries {
			for _, sk := range l.Skipped {
				p("\nWarning: not probed in %s: %s\n", cell(l.Path), cell(sk))
			}
		}
	}
	return bw.Flush()
}

func stackTable(w io.Writer, res *analysis.Result, us []analysis.StackUsage, whole uint64, of string) {
	fmt.Fprintf(w, "| bytes | %% %s | allocations | site |\n| ---: | ---: | ---: | --- |\n", of)
	for i, u := range us {
		if i == mdTopStacks {
			fmt.Fprintf(w, "| | | | %d more stacks |\n", len(us)-i)
			break
		}
		fmt.Fprintf(w, "| %d (%s) | %.1f%% | %d | %s |\n", u.Bytes, units.Bytes(u.Bytes), pct(u.Bytes, whole), u.Count, cell(res.Site(u.Stack)))
	}
	fmt.Fprintln(w)
}

// procHeading is procLabel without its "pid ": "100", or "100 (started
// +5.000s)" for a reused PID.
func procHeading(res *analysis.Result, p *analysis.Process) string {
	return strings.TrimPrefix(procLabel(res, p), "pid ")
}

// mdEscaper makes text from the target (symbols, paths, commands) literal
// in GitHub markdown: `std::vector<float>` must not lose `<float>` to HTML,
// nor `__init__` turn bold.
var mdEscaper = strings.NewReplacer(
	`\`, `\\`, "`", "\\`", "*", `\*`, "_", `\_`, "[", `\[`, "]", `\]`,
	"#", `\#`, "|", `\|`, "<", "&lt;", ">", "&gt;",
)

// md escapes prose that quotes the target's names.
func md(s string) string { return mdEscaper.Replace(s) }

// cell escapes text for a markdown table cell.
func cell(s string) string {
	if s == "" {
		return " "
	}
	return md(s)
}
