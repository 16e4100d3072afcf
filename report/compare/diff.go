package compare

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/vramprof/vramprof/report/units"
)

// DiffSchema names `vramprof diff --format json`'s output. Fields are only
// ever added to it.
const DiffSchema = "vramprof/diff/v1"

// DiffTextStacks is how many changed stacks per section the text output
// shows; the JSON has them all.
const DiffTextStacks = 10

// Change statuses: a row or stack in both (changed or not), only in NEW,
// only in BASE.
const (
	StatusChanged   = "changed"
	StatusUnchanged = "unchanged"
	StatusNew       = "new"
	StatusVanished  = "vanished"
)

// Change is one figure in BASE and NEW. Percent is null when Base is 0 (no
// percentage of nothing), else rounded to two decimals; Delta saturates at
// int64's range.
type Change struct {
	Base    uint64   `json:"base"`
	New     uint64   `json:"new"`
	Delta   int64    `json:"delta"`
	Percent *float64 `json:"percent"`
}

// NewChange is the change from base to nw.
func NewChange(base, nw uint64) Change {
	return Change{Base: base, New: nw, Delta: byteDelta(base, nw), Percent: percentChange(base, nw)}
}

// Row is a device or a command in BASE and NEW.
type Row struct {
	// Name is the device name ("0", "unknown") or the command.
	Name   string `json:"name"`
	Status string `json:"status"`
	// BaseCount and NewCount are how many processes ran the command
	// (processes only).
	BaseCount      int    `json:"base_count,omitempty"`
	NewCount       int    `json:"new_count,omitempty"`
	PeakBytes      Change `json:"peak_bytes"`
	LiveBytesAtEnd Change `json:"live_bytes_at_end"`
}

// StackChange is a stack's bytes in BASE and NEW.
type StackChange struct {
	Frames []string `json:"frames"`
	Site   string   `json:"site"`
	Status string   `json:"status"`
	Change
}

// Diff is `vramprof diff --format json`, schema vramprof/diff/v1. Lists
// are largest absolute change first (a row by the larger of its two
// changes), ties by name or frames.
type Diff struct {
	Schema          string        `json:"schema"`
	Base            string        `json:"base"`
	New             string        `json:"new"`
	PeakBytes       Change        `json:"peak_bytes"`
	LiveBytesAtEnd  Change        `json:"live_bytes_at_end"`
	LostEvents      Change        `json:"lost_events"`
	Devices         []Row         `json:"devices"`
	Processes       []Row         `json:"processes"`
	PeakStacks      []StackChange `json:"peak_stacks"`
	LiveAtEndStacks []StackChange `json:"live_at_end_stacks"`

	// BaseIncomplete, NewIncomplete say why BASE or NEW does not cover a
	// whole run (Figures.Incomplete: cut short, a moment report, a
	// process attached mid-run); absent when it does. Their figures may
	// differ for that reason alone: the text says so first.
	BaseIncomplete []string `json:"base_incomplete,omitempty"`
	NewIncomplete  []string `json:"new_incomplete,omitempty"`

	// baseTruncated, newTruncated: BASE or NEW was cut short (the text
	// says so; the JSON has run.ended_cleanly in the reports).
	baseTruncated, newTruncated bool
}

// NewDiff compares base with nw.
func NewDiff(base, nw *Figures) *Diff {
	return &Diff{
		Schema: DiffSchema, Base: base.Source, New: nw.Source,
		PeakBytes: NewChange(base.Peak, nw.Peak), LiveBytesAtEnd: NewChange(base.LiveEnd, nw.LiveEnd),
		LostEvents: NewChange(base.Lost, nw.Lost),
		Devices:    diffRows(base.Devices, nw.Devices, false),
		Processes:  diffRows(base.Processes, nw.Processes, true),
		PeakStacks: DiffStacks(base.PeakStacks, nw.PeakStacks), LiveAtEndStacks: DiffStacks(base.EndStacks, nw.EndStacks),

		BaseIncomplete: base.Incomplete, NewIncomplete: nw.Incomplete,
		baseTruncated: base.Truncated, newTruncated: nw.Truncated,
	}
}

func status(inBase, inNew bool, d ...int64) string {
	switch {
	case !inBase:
		return StatusNew
	case !inNew:
		return StatusVanished
	}
	for _, x := range d {
		if x != 0 {
			return StatusChanged
		}
	}
	return StatusUnchanged
}

func absDelta(d int64) uint64 {
	if d < 0 {
		return uint64(-d)
	}
	return uint64(d)
}

func diffRows(base, nw []Figure, counts bool) []Row {
	names := map[string][2]*Figure{}
	for i := range base {
		e := names[base[i].Name]
		e[0] = &base[i]
		names[base[i].Name] = e
	}
	for i := range nw {
		e := names[nw[i].Name]
		e[1] = &nw[i]
		names[nw[i].Name] = e
	}
	rows := []Row{}
	for name, e := range names {
		var b, n Figure
		if e[0] != nil {
			b = *e[0]
		}
		if e[1] != nil {
			n = *e[1]
		}
		r := Row{Name: name, PeakBytes: NewChange(b.Peak, n.Peak), LiveBytesAtEnd: NewChange(b.End, n.End)}
		if counts {
			r.BaseCount, r.NewCount = b.Count, n.Count
		}
		r.Status = status(e[0] != nil, e[1] != nil, r.PeakBytes.Delta, r.LiveBytesAtEnd.Delta, int64(b.Count-n.Count))
		rows = append(rows, r)
	}
	size := func(r Row) uint64 { return max(absDelta(r.PeakBytes.Delta), absDelta(r.LiveBytesAtEnd.Delta)) }
	slices.SortFunc(rows, func(a, b Row) int {
		if c := cmp.Compare(size(b), size(a)); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return rows
}

// DiffStacks lines base's stacks up with nw's by their frames: largest
// absolute change first, ties by frames.
func DiffStacks(base, nw []Stack) []StackChange {
	type pair struct{ b, n *Stack }
	keys := map[string]*pair{}
	for i := range base {
		keys[keyOf(&base[i])] = &pair{b: &base[i]}
	}
	for i := range nw {
		if p := keys[keyOf(&nw[i])]; p != nil {
			p.n = &nw[i]
		} else {
			keys[keyOf(&nw[i])] = &pair{n: &nw[i]}
		}
	}
	out := []StackChange{}
	for _, p := range keys {
		var b, n uint64
		ref := p.n
		if p.b != nil {
			b, ref = p.b.Bytes, p.b
		}
		if p.n != nil {
			n, ref = p.n.Bytes, p.n
		}
		d := NewChange(b, n)
		out = append(out, StackChange{Frames: ref.Frames, Site: ref.Site, Status: status(p.b != nil, p.n != nil, d.Delta), Change: d})
	}
	slices.SortFunc(out, func(a, b StackChange) int {
		if c := cmp.Compare(absDelta(b.Delta), absDelta(a.Delta)); c != 0 {
			return c
		}
		return cmp.Compare(strings.Join(a.Frames, "\n"), strings.Join(b.Frames, "\n"))
	})
	return out
}

// byteDelta is new - base, saturated at int64's range.
func byteDelta(base, nw uint64) int64 {
	if nw >= base {
		return int64(min(nw-base, math.MaxInt64))
	}
	return -int64(min(base-nw, math.MaxInt64))
}

// percentChange is the change from base to new in percent, rounded to two
// decimals; nil when base is 0 (no percentage of nothing).
func percentChange(base, nw uint64) *float64 {
	if base == 0 {
		return nil
	}
	p := (float64(nw) - float64(base)) / float64(base) * 100
	p = math.Round(p*100) / 100
	return &p
}

// percentText renders percentChange for people: "+24.31%"; "" from 0.
func percentText(base, nw uint64) string {
	if p := percentChange(base, nw); p != nil {
		return fmt.Sprintf("%+.2f%%", *p)
	}
	return ""
}

// Text renders a figure's change for people, change first:
// "+125132800 bytes (+119.34 MiB), +24.31%: 514669634 -> 639802434 bytes (490.83 MiB -> 610.16 MiB)".
func (c Change) Text() string {
	s := units.DeltaExact(c.Delta)
	if p := percentText(c.Base, c.New); p != "" {
		s += ", " + p
	}
	return fmt.Sprintf("%s: %d -> %d bytes (%s -> %s)", s, c.Base, c.New, units.Bytes(c.Base), units.Bytes(c.New))
}

// Write writes d to w in format "json" (WriteJSON) or "text" (WriteText),
// in one write: a failure leaves no half of it.
func (d *Diff) Write(w io.Writer, format string) error {
	var buf bytes.Buffer
	if format == "json" {
		if err := d.WriteJSON(&buf); err != nil {
			return fmt.Errorf("encode: %w", err)
		}
	} else {
		d.WriteText(&buf)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// WriteJSON writes d as indented JSON, schema vramprof/diff/v1.
func (d *Diff) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(d)
}

// WriteText writes d for people: the totals, then devices, commands and
// stacks, largest change first; at most DiffTextStacks changed stacks per
// section.
func (d *Diff) WriteText(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("vramprof diff: BASE %s -> NEW %s\n", d.Base, d.New)
	p("peak:         %s\n", d.PeakBytes.Text())
	p("live at end:  %s\n", d.LiveBytesAtEnd.Text())
	if d.LostEvents.Base > 0 || d.LostEvents.New > 0 {
		p("lost events:  %d -> %d (the kernel dropped records: the figures may be wrong either way: a missed free reads high, a missed allocation low)\n", d.LostEvents.Base, d.LostEvents.New)
	}
	for _, s := range []struct {
		source     string
		truncated  bool
		incomplete []string
	}{{d.Base, d.baseTruncated, d.BaseIncomplete}, {d.New, d.newTruncated, d.NewIncomplete}} {
		switch {
		case len(s.incomplete) > 0:
			// Incomplete holds the cut too, in its own words.
			for _, r := range s.incomplete {
				p("warning:      %s is incomplete: %s; a change may be that alone\n", s.source, r)
			}
		case s.truncated:
			p("note:         %s was cut short; its figures cover the records before the cut\n", s.source)
		}
	}
	rows := func(title string, rs []Row, counts bool) {
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
			p("      peak:        %s\n", r.PeakBytes.Text())
			p("      live at end: %s\n", r.LiveBytesAtEnd.Text())
		}
	}
	rows("devices", d.Devices, false)
	rows("processes by command", d.Processes, true)
	stacks := func(title string, ss []StackChange) {
		p("\n%s (largest change first):\n", title)
		shown, unchanged := 0, 0
		for _, s := range ss {
			if s.Status == StatusUnchanged {
				unchanged++
				continue
			}
			if shown == DiffTextStacks {
				continue
			}
			shown++
			p("  [%s] %s at %s\n", s.Status, s.Text(), s.Site)
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
