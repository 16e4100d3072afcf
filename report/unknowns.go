package report

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report/units"
)

// What an imported snapshot does not know (analysis.Run.Imported) is
// "unknown" in every output, never 0: its PID, parent, exit code, host and
// wall-clock start, and its times when it has an order only
// (analysis.Run.TimesKnown). report.json keeps v1's fields and values and
// lists those placeholders in "unknown".

// ppidText renders a parent PID: "unknown" in an imported stream.
func ppidText(res *analysis.Result, ppid uint32) string {
	if res.Run.Imported() {
		return "unknown"
	}
	return fmt.Sprint(ppid)
}

// endText says how the run ended and with which exit code, "exit code
// unknown" for an imported snapshot.
func endText(run *analysis.Run) string {
	if m := run.Moment; m != nil {
		// The target was still running: no exit code yet.
		text := fmt.Sprintf("%s %d, recording went on", run.EndReason, m.Index)
		if m.SkippedOOMs > 0 {
			text += fmt.Sprintf(" (%d out-of-memory failures since the previous oom moment had none of their own)", m.SkippedOOMs)
		}
		return text
	}
	if run.Imported() {
		return run.EndReason + ", exit code unknown"
	}
	return fmt.Sprintf("%s, exit code %d", run.EndReason, run.ExitCode)
}

// durationText is the run's duration, "duration unknown" when its times
// are an order only.
func durationText(run *analysis.Run) string {
	if !run.TimesKnown() {
		return "duration unknown"
	}
	return units.Duration(run.Duration)
}

// runUnknown lists the run fields of report.json that hold placeholders,
// nil when every one is known.
func runUnknown(run *analysis.Run) []string {
	var out []string
	if run.Imported() {
		out = append(out, "pid", "exit_code", "host", "start_time")
	}
	if !run.TimesKnown() {
		out = append(out, "duration_ns", "times")
	}
	if run.Moment != nil {
		out = append(out, "exit_code") // a moment report: still running
	}
	return out
}

// processUnknown lists a process's placeholder fields in report.json.
func processUnknown(res *analysis.Result) []string {
	var out []string
	if res.Run.Imported() {
		out = append(out, "pid", "ppid")
	}
	if !res.Run.TimesKnown() {
		out = append(out, "peak_time_ns")
	}
	return out
}

// IncompleteReasons says why res does not cover the whole recording, one
// line per reason; nil when it does. A gate must not pass on such figures
// (report.json's run.complete, read by `vramprof check`).
func IncompleteReasons(res *analysis.Result) []string { return incompleteReasons(res, afterStart) }

func incompleteReasons(res *analysis.Result, at sinceStart) []string {
	out := cutReasons(res, at)
	if l := midRunLine(res); l != "" {
		out = append(out, l)
	}
	return out
}

// sinceStart renders a time since the run's start as a phrase: the text
// outputs say "1.409532893s after the start" (afterStart, exact), the page
// says "at +1.41 s" (atOffset), as its charts and tables do.
type sinceStart func(ns uint64) string

func afterStart(ns uint64) string { return time.Duration(ns).String() + " after the start" }

func atOffset(ns uint64) string { return "at " + units.Offset(ns) }

// cutReasons are IncompleteReasons but for a process attached mid-run:
// the recording stops before its end.
func cutReasons(res *analysis.Result, at sinceStart) []string {
	var out []string
	if m := res.Run.Moment; m != nil {
		out = append(out, fmt.Sprintf("a moment report (%s %d, %s): the figures stop at the moment, while the recording went on",
			m.Kind, m.Index, at(res.Rel(m.Time))))
	} else if !res.Run.Ended {
		out = append(out, "cut short: the trace ends without its End record (vramprof was killed or crashed, or the disk filled), "+
			"so the figures cover only what was recorded before the cut")
	}
	return out
}

// midRunLine says which processes were attached mid-run, "" when every
// one was traced from its start (or the stream is an imported snapshot,
// which says what it knows in its own fields). A process traced from its
// start has seen all it did; one attached mid-run may have peaked,
// allocated and leaked before.
func midRunLine(res *analysis.Result) string {
	if res.Run.Imported() {
		return ""
	}
	var pids []uint32
	for i := range res.Processes {
		if b := res.Processes[i].Preexisting.Basis; b != analysis.PreexistingNone && b != "" {
			pids = append(pids, res.Processes[i].PID)
		}
	}
	if len(pids) == 0 {
		return ""
	}
	slices.Sort(pids)
	pids = slices.Compact(pids)
	names := make([]string, len(pids))
	for i, p := range pids {
		names[i] = fmt.Sprint(p)
	}
	what := "process " + names[0] + " was"
	if len(names) > 1 {
		what = "processes " + strings.Join(names, ", ") + " were"
	}
	return fmt.Sprintf("attached mid-run: %s running before tracing began, so a peak, allocations or leaks "+
		"before the attach are not in the figures (record with `vramprof run` from the start for figures a gate can trust)", what)
}

// incompleteLine is IncompleteReasons in one line; "" when complete.
func incompleteLine(res *analysis.Result, at sinceStart) string {
	return strings.Join(incompleteReasons(res, at), "; ")
}

// momentLine says, in a moment report, that the figures are the trace's up
// to that moment and which request failed; "" in any other report.
func momentLine(res *analysis.Result, at sinceStart) string {
	m := res.Run.Moment
	if m == nil {
		return ""
	}
	line := fmt.Sprintf("these figures are the trace up to %s (%s %d, %s); the recording went on",
		res.Run.EndReason, m.Kind, m.Index, at(res.Rel(m.Time)))
	if e := m.Request; e != nil {
		line += fmt.Sprintf("; the failed request: %s of %d bytes (%s) by pid %d on device %s, %s",
			e.API, e.Size, units.Bytes(e.Size), e.PID, analysis.DeviceName(e.Device), analysis.ErrorName(e.API, e.Ret))
	}
	return line
}

// flightLine says, in a report of a flight recorder's trace, how much of
// the run the events kept cover and what the checkpoint summarised; "" in
// any other report.
func flightLine(res *analysis.Result, at sinceStart) string {
	f := res.Run.Flight
	if f == nil {
		return ""
	}
	n := f.SummarisedEvents + res.Run.Events
	covers := "totals, books and peaks cover the whole run; timelines, and stacks at a peak, before the window do not"
	switch {
	case f.PeakStacks && f.Timelines:
		covers = "totals, books, peaks, the stacks live at them and timelines cover the whole run"
	case f.PeakStacks:
		covers = "totals, books, peaks and the stacks live at them cover the whole run; timelines before the window do not"
	}
	return fmt.Sprintf("flight recorder: kept the last %d / %d events (from %s); %d earlier events summarised in a checkpoint "+
		"(%d allocations live at the cut restored exactly; %s; churn, spikes and iterations are found in the kept events only)",
		res.Run.Events, n, at(res.Rel(f.CutTime)), f.SummarisedEvents, f.Restored, covers)
}

// lostCause says why res's records were lost (LostCause).
func lostCause(res *analysis.Result) string { return LostCause(res.LostEvents, res.LostCauses) }

// LostCause says why total records were lost: each cause with its count
// when the trace recorded them (event.LostCauses), else "ring buffer
// full", the cause traces recorded before the split mostly had.
func LostCause(total uint64, c event.LostCauses) string {
	if !c.Known(total) {
		return "ring buffer full"
	}
	var parts []string
	for _, x := range []struct {
		n    uint64
		what string
	}{
		{c.RingFull, "refused by the full ring buffer"},
		{c.Unpaired, "returns without their call (a call in flight at attach)"},
		{c.Malformed, "malformed records"},
	} {
		if x.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", x.n, x.what))
		}
	}
	return strings.Join(parts, ", ")
}
