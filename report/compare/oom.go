package compare

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/vramprof/vramprof/report"
	"github.com/vramprof/vramprof/report/units"
)

// OOM is one process's out-of-memory failure as the recording's forensics
// (report.json's oom finding) give it: what failed, what was live, and
// their verdict. A failure the caching allocator survived (its
// free-all-and-retry succeeded: the program never saw it) is none.
type OOM struct {
	PID     uint32
	Command string
	// RequestBytes, Site, Frames, Device, Error and TimeNs are the first
	// failing request's (Site and Frames normalized, see NormalizeFrame).
	RequestBytes uint64
	Site         string
	Frames       []string
	API          string // empty when the report does not say
	Device       string
	Error        string
	TimeNs       uint64
	// LiveBytes is what the process had live at the failure (all devices)
	// and DeviceLiveBytes on the failing device, at the segment layer;
	// LiveKnown is false when the report does not say (an older
	// report.json).
	LiveBytes, DeviceLiveBytes uint64
	LiveKnown                  bool
	// Pool is the caching allocator's state at the failure, when its block
	// layer was traced: reserved, allocated to tensors, cached free and the
	// largest free range. Kind is then "fragmentation" (the cache held the
	// request's bytes free, in ranges too small) or "capacity".
	Pool *report.JSONPoolState
	Kind string
	// LiveStacks is what was live at the failure by stack, largest first
	// (tensors when Pool is set).
	LiveStacks []Stack
	// Count and Bytes sum the process's requests that ran out of memory.
	Count, Bytes uint64
	// Summary and Remediation are the finding's words: the forensics'
	// verdict and what to do.
	Summary     string
	Remediation []string
}

// oomsOf reads the out-of-memory failures of a report: its oom findings,
// one per process (the first failure, with the count of all), in the
// order of their times. Failures the allocator's retry survived are left
// out: the program never saw them.
func oomsOf(j *report.JSON) []OOM {
	commands := map[[2]uint64]string{}
	for _, p := range j.Processes {
		commands[[2]uint64{uint64(p.PID), p.StartNs}] = p.Command
	}
	byProc := map[[2]uint64]*OOM{}
	var order [][2]uint64
	for i := range j.Findings {
		f := &j.Findings[i]
		if f.Kind != "oom" || f.OOM != nil && f.OOM.Outcome == "retry_succeeded" {
			continue
		}
		key := [2]uint64{uint64(f.PID), f.ProcessStartNs}
		o := byProc[key]
		if o != nil {
			// A later failure of a process already counted (the pool
			// findings come one per failing request).
			o.Count++
			o.Bytes += f.Bytes
			continue
		}
		o = &OOM{PID: f.PID, Command: commands[key], RequestBytes: f.Bytes, TimeNs: f.TimeNs, Count: 1, Bytes: f.Bytes,
			Summary: f.Summary, Remediation: f.Remediation}
		switch {
		case f.OOM != nil:
			p := f.OOM
			o.RequestBytes, o.Site, o.Frames, o.Device, o.Error, o.TimeNs = p.RequestBytes, p.Site, p.Frames, p.Device, p.Error, p.TimeNs
			st := p.State
			o.Pool, o.Kind = &st, p.Kind
			o.LiveStacks = jsonStacks(p.LiveStacks)
		case f.OOMCalls != nil:
			ff := &f.OOMCalls.First
			o.RequestBytes, o.Site, o.Frames, o.API, o.Device, o.Error, o.TimeNs = ff.Size, ff.Site, ff.Frames, ff.API, ff.Device, ff.Error, ff.TimeNs
			o.LiveBytes, o.DeviceLiveBytes, o.LiveKnown = ff.LiveBytes, ff.DeviceLiveBytes, true
			o.LiveStacks = jsonStacks(ff.LiveStacks)
			o.Count, o.Bytes = f.OOMCalls.Count, f.OOMCalls.Bytes
		default:
			// A report.json from before oom_calls: the finding's failing
			// stacks name the site.
			if len(f.Stacks) > 0 {
				o.Site, o.Frames = f.Stacks[0].Site, f.Stacks[0].Frames
			}
		}
		o.Site, o.Frames = NormalizeFrame(o.Site), normalizeFrames(o.Frames)
		byProc[key] = o
		order = append(order, key)
	}
	out := make([]OOM, 0, len(order))
	for _, k := range order {
		out = append(out, *byProc[k])
	}
	slices.SortStableFunc(out, func(a, b OOM) int { return cmp.Compare(a.TimeNs, b.TimeNs) })
	return out
}

func jsonStacks(in []report.JSONStack) []Stack {
	ss := stackSet{}
	for _, s := range in {
		ss.add(s.Frames, s.Site, s.Bytes, s.Count)
	}
	return ss.sorted()
}

// oomCheck fails: the recording ran out of memory. Its message is the
// first failure's forensics in one line.
func oomCheck(ooms []OOM) Check {
	var n uint64
	for _, o := range ooms {
		n += o.Count
	}
	first := &ooms[0]
	measured := fmt.Sprintf("%s ran out of memory", plural(int(n), "request"))
	if len(ooms) > 1 {
		measured += fmt.Sprintf(" in %d processes", len(ooms))
	}
	measured += fmt.Sprintf("; the first: %s at %s", units.BytesExact(first.RequestBytes), first.Site)
	c := Check{Name: "oom", Measured: measured, Limit: "none may run out of memory", Message: first.line()}
	for i := range ooms {
		c.Sites = append(c.Sites, Annotation{Site: ooms[i].Site, Message: ooms[i].line()})
	}
	return c
}

// line is the failure's forensics in one line: what failed, what was live,
// and the verdict.
func (o *OOM) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "out of memory: a request for %s at %s failed", units.BytesExact(o.RequestBytes), o.Site)
	if o.Error != "" {
		fmt.Fprintf(&b, " with error %s", o.Error)
	}
	fmt.Fprintf(&b, " on device %s in process %d", o.Device, o.PID)
	switch {
	case o.Pool != nil:
		fmt.Fprintf(&b, " while tensors held %s and the cache %s free (largest free range %s): %s OOM",
			units.BytesExact(o.Pool.AllocatedBytes), units.BytesExact(o.Pool.CachedFreeBytes),
			units.BytesExact(o.Pool.LargestFreeRange), o.Kind)
	case o.LiveKnown:
		fmt.Fprintf(&b, " while %s were live (%s on that device)", units.BytesExact(o.LiveBytes), units.BytesExact(o.DeviceLiveBytes))
	}
	if len(o.Remediation) > 0 {
		fmt.Fprintf(&b, "; %s", o.Remediation[0])
	}
	return b.String()
}

// writeOOMs writes the forensics of each out-of-memory failure: the
// evidence of a failed oom check.
func writeOOMs(w io.Writer, ooms []OOM) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	for i := range ooms {
		o := &ooms[i]
		cmdText := ""
		if o.Command != "" {
			cmdText = " (" + o.Command + ")"
		}
		p("\nout of memory in process %d%s:\n", o.PID, cmdText)
		api := ""
		if o.API != "" {
			api = " " + o.API
		}
		p("  failed:    %s%s on device %s, error %s, at %s\n", units.BytesExact(o.RequestBytes), api, o.Device, o.Error, units.Offset(o.TimeNs))
		p("  site:      %s\n", o.Site)
		if o.Count > 1 {
			p("  in all:    %d requests ran out of memory, %s requested\n", o.Count, units.BytesExact(o.Bytes))
		}
		switch {
		case o.Pool != nil:
			st := o.Pool
			p("  live then: %s reserved in %d segments, %s allocated to tensors, %s cached free in %d ranges, the largest %s\n",
				units.BytesExact(st.ReservedBytes), st.Segments, units.BytesExact(st.AllocatedBytes),
				units.BytesExact(st.CachedFreeBytes), st.FreeRanges, units.BytesExact(st.LargestFreeRange))
			p("  verdict:   %s\n", o.Summary)
		case o.LiveKnown:
			p("  live then: %s in the process, %s on device %s\n", units.BytesExact(o.LiveBytes), units.BytesExact(o.DeviceLiveBytes), o.Device)
			p("  verdict:   %s\n", o.Summary)
		default:
			p("  verdict:   %s\n", o.Summary)
		}
		for _, r := range o.Remediation {
			p("  advice:    %s\n", r)
		}
		if len(o.LiveStacks) > 0 {
			what := "live"
			if o.Pool != nil {
				what = "tensors live"
			}
			p("  %s at the failure, by stack:\n", what)
			writeTopIndent(w, o.LiveStacks, sumBytes(o.LiveStacks), "    ")
		}
		if len(o.Frames) > 0 {
			p("  failing stack:\n")
			for _, f := range o.Frames {
				p("       %s\n", f)
			}
		}
	}
}

func sumBytes(stacks []Stack) uint64 {
	var n uint64
	for _, s := range stacks {
		n += s.Bytes
	}
	return n
}
