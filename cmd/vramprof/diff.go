package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/report"
)

var (
	// errRecording: an input of diff or check (a directory, trace or
	// report.json) cannot be read.
	errRecording = errors.New("cannot read recording")
	// errSchema: a JSON input is not the kind of file expected, or a
	// version this vramprof does not know.
	errSchema = errors.New("unknown schema")
)

// diffSchema names `vramprof diff --format json`'s output. Fields are only
// ever added to it.
const diffSchema = "vramprof/diff/v1"

// diffTextStacks is how many changed stacks per section the text output
// shows; --format json has them all.
const diffTextStacks = 10

// snapshot is what diff and check compare of one recording: the figures of
// report.json, keyed so that two runs line up. Processes are matched by
// command (pids differ from run to run) and stacks by their rendered frames
// with unsymbolized addresses blanked (ASLR moves them from run to run).
type snapshot struct {
	source       string
	command      []string
	exitCode     int
	endedCleanly bool
	// truncated: a trace cut short; the figures cover what came before.
	truncated   bool
	allocations uint64
	peak        uint64
	liveEnd     uint64
	lost        uint64
	// events is how many events were recorded (report.json run.events):
	// lost/(lost+events) is the share --allow-lost judges.
	events     uint64
	late       uint64   // events out of effect order (report.json late_events)
	devices    []figure // by device name
	processes  []figure // by command; count is how many processes ran it
	peakStacks []stackFigure
	endStacks  []stackFigure
	leaks      []report.JSONFinding
	// stacksComplete is false for a baseline, which keeps only the top
	// peak stacks (and no stacks live at the end): a stack missing from it
	// may be below its cut rather than new.
	stacksComplete bool
}

// figure is one device's or one command's peak and live-at-end bytes.
type figure struct {
	name  string
	count int
	peak  uint64
	end   uint64
}

// stackFigure is a stack's bytes at the peak or at the end, summed over the
// processes (and the raw stacks that blank to the same frames).
type stackFigure struct {
	key    string
	frames []string
	site   string
	bytes  uint64
	count  uint64
}

// addrFrame matches a frame rendered without a symbol: "0x7f12 (libc.so.6)"
// or "0x7f12".
var addrFrame = regexp.MustCompile(`^0x[0-9a-f]+( \(.*\))?$`)

// normalizeFrame blanks the address of an unsymbolized frame, which ASLR
// changes on every run: "0x7fce9717324a (libc.so.6)" becomes "? (libc.so.6)".
func normalizeFrame(f string) string {
	if m := addrFrame.FindStringSubmatch(f); m != nil {
		return "?" + m[1]
	}
	return f
}

func normalizeFrames(frames []string) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = normalizeFrame(f)
	}
	return out
}

// loadSnapshot reads a recording: an output directory (its trace.vpt,
// analysed as `vramprof report` does, else its report.json), a .vpt trace,
// or a report.json.
func loadSnapshot(path string) (*snapshot, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errRecording, err)
	}
	if st.IsDir() {
		trace, rep := filepath.Join(path, traceFile), filepath.Join(path, jsonFile)
		switch {
		case fileExists(trace), len(segmentsOf(trace)) > 0: // segments: --max-trace
			return snapshotFromTrace(path, trace)
		case fileExists(rep):
			return snapshotFromReportFile(path, rep)
		}
		return nil, fmt.Errorf("%w: %s holds neither %s nor %s", errRecording, path, traceFile, jsonFile)
	}
	if isJSONFile(path) {
		return snapshotFromReportFile(path, path)
	}
	return snapshotFromTrace(path, path)
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// isJSONFile tells a JSON file from a trace by its first non-blank byte.
func isJSONFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	br := bufio.NewReader(f)
	for {
		b, err := br.ReadByte()
		if err != nil {
			return false
		}
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return true
		}
		return false
	}
}

func snapshotFromTrace(source, trace string) (*snapshot, error) {
	res, err := analyze(trace, analysis.Options{})
	truncated := errors.Is(err, errTruncatedTrace)
	if err != nil && !truncated {
		return nil, fmt.Errorf("%w: %w", errRecording, err)
	}
	s := snapshotOf(report.NewJSON(res), source)
	s.truncated = truncated
	return s, nil
}

// readSchema reads a JSON file and the schema it names.
func readSchema(path string) ([]byte, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", errRecording, err)
	}
	var head struct {
		Schema *string `json:"schema"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, "", fmt.Errorf("%w: %s is not valid JSON: %w", errRecording, path, err)
	}
	if head.Schema == nil {
		return nil, "", fmt.Errorf("%w: %s has no \"schema\" field", errSchema, path)
	}
	return data, *head.Schema, nil
}

func snapshotFromReportFile(source, path string) (*snapshot, error) {
	data, schema, err := readSchema(path)
	if err != nil {
		return nil, err
	}
	if schema != report.Schema {
		return nil, fmt.Errorf("%w: %s has schema %q, not %s", errSchema, path, schema, report.Schema)
	}
	return snapshotFromReport(source, path, data)
}

func snapshotFromReport(source, path string, data []byte) (*snapshot, error) {
	var j report.JSON
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errRecording, path, err)
	}
	return snapshotOf(&j, source), nil
}

// snapshotOf keys a report's figures for comparison.
func snapshotOf(j *report.JSON, source string) *snapshot {
	s := &snapshot{
		source: source, command: j.Run.Command, exitCode: j.Run.ExitCode, endedCleanly: j.Run.EndedCleanly,
		allocations: j.Totals.Allocations, peak: j.Totals.PeakBytes, liveEnd: j.Totals.LiveBytesAtEnd,
		lost: j.Totals.LostEvents, events: j.Run.Events, late: j.Totals.LateEvents, stacksComplete: true,
	}
	for _, d := range j.Devices {
		name := d.Name
		if name == "" {
			name = analysis.DeviceName(d.Index)
		}
		s.devices = append(s.devices, figure{name: name, count: 1, peak: d.PeakBytes, end: d.LiveBytesAtEnd})
	}
	procs := map[string]*figure{}
	peaks, ends := stackSet{}, stackSet{}
	for _, p := range j.Processes {
		name := p.Command
		if name == "" {
			name = "[unknown command]"
		}
		f := procs[name]
		if f == nil {
			f = &figure{name: name}
			procs[name] = f
		}
		f.count++
		f.peak += p.PeakBytes
		f.end += p.LiveBytesAtEnd
		for _, st := range p.PeakStacks {
			peaks.add(st.Frames, st.Site, st.Bytes, st.Count)
		}
		for _, st := range p.LiveAtEndStacks {
			ends.add(st.Frames, st.Site, st.Bytes, st.Count)
		}
	}
	for _, f := range procs {
		s.processes = append(s.processes, *f)
	}
	slices.SortFunc(s.processes, func(a, b figure) int { return cmp.Compare(a.name, b.name) })
	s.peakStacks, s.endStacks = peaks.sorted(), ends.sorted()
	for _, f := range j.Findings {
		if f.Kind == "leak" {
			s.leaks = append(s.leaks, f)
		}
	}
	return s
}

// stackSet sums stacks by their normalized frames.
type stackSet map[string]*stackFigure

func (ss stackSet) add(frames []string, site string, bytes, count uint64) {
	if bytes == 0 {
		return
	}
	norm := normalizeFrames(frames)
	key := strings.Join(norm, "\n")
	f := ss[key]
	if f == nil {
		f = &stackFigure{key: key, frames: norm, site: normalizeFrame(site)}
		ss[key] = f
	}
	f.bytes += bytes
	f.count += count
}

// sorted is the set largest first, ties by frames.
func (ss stackSet) sorted() []stackFigure {
	out := make([]stackFigure, 0, len(ss))
	for _, f := range ss {
		out = append(out, *f)
	}
	slices.SortFunc(out, func(a, b stackFigure) int {
		if c := cmp.Compare(b.bytes, a.bytes); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	return out
}

// Change statuses: a row or stack in both, only in NEW, only in BASE.
const (
	statusChanged   = "changed"
	statusUnchanged = "unchanged"
	statusNew       = "new"
	statusVanished  = "vanished"
)

// diffDelta is one figure in BASE and NEW. Percent is null when Base is 0.
type diffDelta struct {
	Base    uint64   `json:"base"`
	New     uint64   `json:"new"`
	Delta   int64    `json:"delta"`
	Percent *float64 `json:"percent"`
}

func newDelta(base, nw uint64) diffDelta {
	return diffDelta{Base: base, New: nw, Delta: byteDelta(base, nw), Percent: percentChange(base, nw)}
}

// diffRow is a device or a command in BASE and NEW.
type diffRow struct {
	// Name is the device name ("0", "unknown") or the command.
	Name   string `json:"name"`
	Status string `json:"status"`
	// BaseCount and NewCount are how many processes ran the command
	// (processes only).
	BaseCount      int       `json:"base_count,omitempty"`
	NewCount       int       `json:"new_count,omitempty"`
	PeakBytes      diffDelta `json:"peak_bytes"`
	LiveBytesAtEnd diffDelta `json:"live_bytes_at_end"`
}

// diffStack is a stack's bytes in BASE and NEW.
type diffStack struct {
	Frames []string `json:"frames"`
	Site   string   `json:"site"`
	Status string   `json:"status"`
	diffDelta
}

// diffJSON is `vramprof diff --format json`, schema vramprof/diff/v1. Lists
// are largest absolute change first (a row by the larger of its two
// changes), ties by name or frames.
type diffJSON struct {
	Schema          string      `json:"schema"`
	Base            string      `json:"base"`
	New             string      `json:"new"`
	PeakBytes       diffDelta   `json:"peak_bytes"`
	LiveBytesAtEnd  diffDelta   `json:"live_bytes_at_end"`
	LostEvents      diffDelta   `json:"lost_events"`
	Devices         []diffRow   `json:"devices"`
	Processes       []diffRow   `json:"processes"`
	PeakStacks      []diffStack `json:"peak_stacks"`
	LiveAtEndStacks []diffStack `json:"live_at_end_stacks"`
}

func diffSnapshots(base, nw *snapshot) *diffJSON {
	return &diffJSON{
		Schema: diffSchema, Base: base.source, New: nw.source,
		PeakBytes: newDelta(base.peak, nw.peak), LiveBytesAtEnd: newDelta(base.liveEnd, nw.liveEnd),
		LostEvents: newDelta(base.lost, nw.lost),
		Devices:    diffRows(base.devices, nw.devices, false),
		Processes:  diffRows(base.processes, nw.processes, true),
		PeakStacks: diffStacks(base.peakStacks, nw.peakStacks), LiveAtEndStacks: diffStacks(base.endStacks, nw.endStacks),
	}
}

func status(inBase, inNew bool, d ...int64) string {
	switch {
	case !inBase:
		return statusNew
	case !inNew:
		return statusVanished
	}
	for _, x := range d {
		if x != 0 {
			return statusChanged
		}
	}
	return statusUnchanged
}

func absDelta(d int64) uint64 {
	if d < 0 {
		return uint64(-d)
	}
	return uint64(d)
}

func diffRows(base, nw []figure, counts bool) []diffRow {
	names := map[string][2]*figure{}
	for i := range base {
		e := names[base[i].name]
		e[0] = &base[i]
		names[base[i].name] = e
	}
	for i := range nw {
		e := names[nw[i].name]
		e[1] = &nw[i]
		names[nw[i].name] = e
	}
	rows := []diffRow{}
	for name, e := range names {
		var b, n figure
		if e[0] != nil {
			b = *e[0]
		}
		if e[1] != nil {
			n = *e[1]
		}
		r := diffRow{Name: name, PeakBytes: newDelta(b.peak, n.peak), LiveBytesAtEnd: newDelta(b.end, n.end)}
		if counts {
			r.BaseCount, r.NewCount = b.count, n.count
		}
		r.Status = status(e[0] != nil, e[1] != nil, r.PeakBytes.Delta, r.LiveBytesAtEnd.Delta, int64(b.count-n.count))
		rows = append(rows, r)
	}
	size := func(r diffRow) uint64 { return max(absDelta(r.PeakBytes.Delta), absDelta(r.LiveBytesAtEnd.Delta)) }
	slices.SortFunc(rows, func(a, b diffRow) int {
		if c := cmp.Compare(size(b), size(a)); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return rows
}

func diffStacks(base, nw []stackFigure) []diffStack {
	type pair struct{ b, n *stackFigure }
	keys := map[string]*pair{}
	for i := range base {
		keys[base[i].key] = &pair{b: &base[i]}
	}
	for i := range nw {
		if p := keys[nw[i].key]; p != nil {
			p.n = &nw[i]
		} else {
			keys[nw[i].key] = &pair{n: &nw[i]}
		}
	}
	out := []diffStack{}
	for _, p := range keys {
		var b, n uint64
		ref := p.n
		if p.b != nil {
			b, ref = p.b.bytes, p.b
		}
		if p.n != nil {
			n, ref = p.n.bytes, p.n
		}
		d := newDelta(b, n)
		out = append(out, diffStack{Frames: ref.frames, Site: ref.site, Status: status(p.b != nil, p.n != nil, d.Delta), diffDelta: d})
	}
	slices.SortFunc(out, func(a, b diffStack) int {
		if c := cmp.Compare(absDelta(b.Delta), absDelta(a.Delta)); c != 0 {
			return c
		}
		return cmp.Compare(strings.Join(a.Frames, "\n"), strings.Join(b.Frames, "\n"))
	})
	return out
}

// diffOptions are the flags of `vramprof diff`.
type diffOptions struct {
	base, new string
	format    string
}

func parseDiff(args []string) (*diffOptions, error) {
	c, err := parseCommand("diff", args)
	if err != nil {
		return nil, err
	}
	o := &diffOptions{format: c.Diff.Format}
	positional := c.Diff.Paths
	if len(positional) != 2 {
		return nil, usageError(errors.New("diff: give BASE and NEW (output directories, .vpt traces or report.json files)"))
	}
	o.base, o.new = positional[0], positional[1]
	if o.format != "text" && o.format != "json" {
		return nil, usageError(fmt.Errorf("diff: unknown --format %q; use text or json", o.format))
	}
	return o, nil
}

// diffCmd compares two recordings. It needs no privileges.
func diffCmd(o *diffOptions, stdout io.Writer) error {
	base, err := loadSnapshot(o.base)
	if err != nil {
		return fmt.Errorf("diff: BASE %s: %w", o.base, err)
	}
	nw, err := loadSnapshot(o.new)
	if err != nil {
		return fmt.Errorf("diff: NEW %s: %w", o.new, err)
	}
	d := diffSnapshots(base, nw)
	var buf bytes.Buffer
	if o.format == "json" {
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(d); err != nil {
			return fmt.Errorf("diff: encode: %w", err)
		}
	} else {
		writeDiffText(&buf, d, base, nw)
	}
	if _, err := stdout.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("diff: write: %w", err)
	}
	return nil
}

// deltaText renders a figure's change for people, change first:
// "+125132800 bytes (+119.34 MiB), +24.31%: 514669634 -> 639802434 bytes (490.83 MiB -> 610.16 MiB)".
func deltaText(d diffDelta) string {
	s := signedBytesText(d.Delta)
	if p := percentText(d.Base, d.New); p != "" {
		s += ", " + p
	}
	return fmt.Sprintf("%s: %d -> %d bytes (%s -> %s)", s, d.Base, d.New,
		analysis.FormatBytes(d.Base), analysis.FormatBytes(d.New))
}

func writeDiffText(w io.Writer, d *diffJSON, base, nw *snapshot) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("vramprof diff: BASE %s -> NEW %s\n", d.Base, d.New)
	p("peak:         %s\n", deltaText(d.PeakBytes))
	p("live at end:  %s\n", deltaText(d.LiveBytesAtEnd))
	if d.LostEvents.Base > 0 || d.LostEvents.New > 0 {
		p("lost events:  %d -> %d (the kernel dropped records: the figures may be wrong either way: a missed free reads high, a missed allocation low)\n", d.LostEvents.Base, d.LostEvents.New)
	}
	for _, s := range []*snapshot{base, nw} {
		if s.truncated {
			p("note:         %s was cut short; its figures cover the records before the cut\n", s.source)
		}
	}
	rows := func(title string, rs []diffRow, counts bool) {
		p("\n%s (largest change first):\n", title)
		if len(rs) == 0 {
			p("  none\n")
		}
		for _, r := range rs {
			name := r.Name
			if counts && (r.BaseCount > 1 || r.NewCount > 1) {
				name += fmt.Sprintf(" (%d -> %d processes)", r.BaseCount, r.NewCount)
			}
			p("  [%s] %s\n", r.Status, name)
			p("      peak:        %s\n", deltaText(r.PeakBytes))
			p("      live at end: %s\n", deltaText(r.LiveBytesAtEnd))
		}
	}
	rows("devices", d.Devices, false)
	rows("processes by command", d.Processes, true)
	stacks := func(title string, ss []diffStack) {
		p("\n%s (largest change first):\n", title)
		shown, unchanged := 0, 0
		for _, s := range ss {
			if s.Status == statusUnchanged {
				unchanged++
				continue
			}
			if shown == diffTextStacks {
				continue
			}
			shown++
			p("  [%s] %s at %s\n", s.Status, deltaText(s.diffDelta), s.Site)
			for _, f := range s.Frames {
				p("        %s\n", f)
			}
		}
		changed := len(ss) - unchanged
		if changed == 0 {
			p("  no stack changed\n")
		}
		if changed > shown {
			p("  ... %d more changed stacks (--format json lists them all)\n", changed-shown)
		}
		if unchanged > 0 {
			p("  %d stacks unchanged\n", unchanged)
		}
	}
	stacks("stacks at the peak", d.PeakStacks)
	stacks("stacks live at the end", d.LiveAtEndStacks)
}
