package report

import (
	"fmt"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/report/units"
)

// The device layer (NVML) and pre-existing memory, as text: shared by the
// markdown report and the terminal summary.

// nvmlOffLine is printed when the trace has no NVML record.
const nvmlOffLine = "NVML: off"

// nvmlLine is the one line that says whether NVML figures exist: "NVML:
// off", "NVML unavailable: <reason>", or how many samples there are.
func nvmlLine(res *analysis.Result) string {
	n := res.NVML
	switch {
	case n == nil:
		return nvmlOffLine
	case !n.Available:
		return analysis.NVMLUnavailablePrefix + n.Reason
	}
	line := fmt.Sprintf("NVML: %d samples", n.Samples)
	if n.Interruptions > 0 {
		line += fmt.Sprintf(", sampling interrupted %d times (last: %s)", n.Interruptions, n.LastError)
	}
	return line
}

// nvmlNotes are the lines about figures NVML could not give while it
// sampled (NVML.Notes), each printed under nvmlLine.
func nvmlNotes(res *analysis.Result) []string {
	if res.NVML == nil {
		return nil
	}
	return res.NVML.Notes
}

// gapText renders a reconciliation: "NVML 2860 MiB vs 2048 MiB traced,
// gap +812 MiB" with exact bytes.
func gapText(r analysis.Reconciliation) string {
	return fmt.Sprintf("NVML %d bytes (%s) vs %d traced (%s), gap %s", r.NVMLBytes, units.Bytes(r.NVMLBytes),
		r.TracedBytes, units.Bytes(r.TracedBytes), gapBytes(r.GapBytes))
}

// gapBytes renders a gap with its sign and human units: "+812 bytes
// (812 B)", "-805306368 bytes (-768.00 MiB, NVML lags the trace)".
func gapBytes(n int64) string {
	if n < 0 {
		return fmt.Sprintf("%d bytes (%s, NVML lags the trace)", n, units.SignedBytes(n))
	}
	return fmt.Sprintf("+%d bytes (%s)", n, units.Bytes(uint64(n)))
}

// preexistingText says what a process held before tracing began, with the
// frees of that memory (sizes unknown).
func preexistingText(res *analysis.Result, p *analysis.Process) string {
	pre := p.Preexisting
	var s string
	switch pre.Basis {
	case analysis.PreexistingNone:
		if n := p.Totals.UnknownFrees; n > 0 {
			// Nothing predates tracing: these frees are not of old memory.
			return fmt.Sprintf("0 (traced from its start); %d unknown frees of addresses never seen allocated: an anomaly (a missed or misordered event), not memory from before tracing", n)
		}
		return "0 (traced from its start)"
	case analysis.PreexistingEstimate:
		s = fmt.Sprintf("%d bytes (%s), an estimate: NVML minus traced at %s, CUDA context included",
			pre.Bytes, units.Bytes(pre.Bytes), secs(res, pre.At.Time))
	default:
		s = "unknown (attached mid-run, no NVML figure)"
		if res.Run.Imported() {
			// A snapshot's allocations from before its trace began are
			// imported as made at its start; what else the process held
			// (context, other allocators) it does not say.
			s = "unknown (an imported snapshot: memory from before its trace is counted as allocated at its start; the CUDA context and other allocators are not in it)"
		}
	}
	return s + fmt.Sprintf("; %d unknown frees (memory from before tracing, sizes unknown)", p.Totals.UnknownFrees)
}

// unknownFreesNote explains the totals' unknown frees. Where every process
// was traced from its first instruction (run mode) nothing predates
// tracing, and a free of an address never seen allocated is an anomaly to
// show, not old memory.
func unknownFreesNote(res *analysis.Result) string {
	fromStart := len(res.Processes) > 0
	for i := range res.Processes {
		if res.Processes[i].Preexisting.Basis != analysis.PreexistingNone {
			fromStart = false
		}
	}
	switch {
	case !fromStart:
		return "allocated before tracing began"
	case res.Totals.UnknownFrees == 0:
		return "every process traced from its start"
	}
	return "addresses never seen allocated: an anomaly, since every process was traced from its start (a missed or misordered event)"
}

// procLabel names a process: "pid 100", or "pid 100 (started +5.000s)"
// when its PID was reused during the run.
func procLabel(res *analysis.Result, p *analysis.Process) string {
	n := 0
	for i := range res.Processes {
		if res.Processes[i].PID == p.PID {
			n++
		}
	}
	if n > 1 {
		return fmt.Sprintf("pid %s (started %s)", res.Run.PIDText(p.PID), secs(res, p.Start))
	}
	return "pid " + res.Run.PIDText(p.PID)
}

// writeNVMLMarkdown writes the device layer's section of report.md.
func writeNVMLMarkdown(p func(string, ...any), res *analysis.Result) {
	p("## Device memory (NVML)\n\n%s\n\n", nvmlLine(res))
	for _, note := range nvmlNotes(res) {
		p("%s\n\n", note)
	}
	if res.NVML == nil || !res.NVML.Available {
		return
	}
	var devs []analysis.Device
	for _, d := range res.Devices {
		if d.NVML != nil {
			devs = append(devs, d)
		}
	}
	if len(devs) > 0 {
		p("Every process's memory and the driver's, per device. NVML's device of the same index is taken for CUDA's: where CUDA_VISIBLE_DEVICES renumbers devices, these are another GPU's.\n\n")
		p("| device | product | uuid | capacity | NVML used at the traced peak | max NVML used | last NVML sample: used, free |\n| --- | --- | --- | ---: | ---: | ---: | ---: |\n")
		for _, d := range devs {
			atPeak := "no sample before it"
			if at := d.NVML.AtPeak; at != nil {
				atPeak = fmt.Sprintf("%d (sample at %s)", at.UsedBytes, secs(res, at.Time))
			} else if d.PeakBytes == 0 {
				atPeak = "nothing traced"
			}
			p("| %s | %s | %s | %d | %s | %d (at %s) | %d, %d (at %s) |\n", analysis.DeviceName(d.Index), cell(d.Name), cell(d.UUID),
				d.CapacityBytes, atPeak, d.NVML.Max.UsedBytes, secs(res, d.NVML.Max.Time),
				d.NVML.Last.UsedBytes, d.NVML.Last.FreeBytes, secs(res, d.NVML.Last.Time))
		}
		p("\n")
	}
	p("Per process, NVML's used bytes next to the traced live bytes at the same sample. The gap (NVML - traced) is the CUDA context, library workspaces and memory allocated before attach; negative when NVML lags the trace.\n\n")
	p("| process | latest sample | NVML | traced | gap | sample before the peak | NVML | traced | gap |\n| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n")
	for i := range res.Processes {
		pr := &res.Processes[i]
		n := pr.NVML
		if n == nil {
			why := pr.NVMLAbsent
			if why == "" {
				why = "no sample sized it"
			}
			p("| %s | %s | | | | | | | |\n", procLabel(res, pr), cell(why))
			continue
		}
		l := n.Latest
		row := fmt.Sprintf("| %s | %s | %d | %d | %+d |", procLabel(res, pr), secs(res, l.Time), l.NVMLBytes, l.TracedBytes, l.GapBytes)
		if at := n.AtPeak; at != nil {
			row += fmt.Sprintf(" %s | %d | %d | %+d |", secs(res, at.Time), at.NVMLBytes, at.TracedBytes, at.GapBytes)
		} else {
			row += " none | | | |"
		}
		p("%s\n", row)
	}
	p("\n")
}

// summaryNVMLLines are the terminal summary's device-layer lines: the
// status line, then the gap of up to summaryStacks processes.
func summaryNVMLLines(res *analysis.Result) []string {
	out := append([]string{nvmlLine(res)}, nvmlNotes(res)...)
	if res.NVML == nil || !res.NVML.Available {
		return out
	}
	shown := 0
	for i := range res.Processes {
		pr := &res.Processes[i]
		if pr.NVML == nil {
			continue
		}
		if shown == summaryStacks {
			out = append(out, "  ... more in the report")
			break
		}
		shown++
		out = append(out, fmt.Sprintf("  %s at %s: %s", procLabel(res, pr), secs(res, pr.NVML.Latest.Time), gapText(pr.NVML.Latest)))
	}
	return out
}

// summaryPreexistingLines say what processes held before tracing began:
// one line when every process was traced from its start, else one per other
// process (up to summaryStacks).
func summaryPreexistingLines(res *analysis.Result) []string {
	if len(res.Processes) == 0 {
		return nil
	}
	var out []string
	for i := range res.Processes {
		pr := &res.Processes[i]
		if pr.Preexisting.Basis == analysis.PreexistingNone {
			continue
		}
		if len(out) == summaryStacks {
			out = append(out, "  ... more in the report")
			break
		}
		out = append(out, fmt.Sprintf("  %s: %s", procLabel(res, pr), preexistingText(res, pr)))
	}
	if len(out) == 0 {
		return []string{"pre-existing:       0 (every process traced from its start)"}
	}
	out[0] = "pre-existing:       " + out[0][2:]
	return out
}
