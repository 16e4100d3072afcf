package compare

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/vramprof/vramprof/report"
)

// BaselineSchema names the file `check --write-baseline` writes. Fields are
// only ever added to it.
const BaselineSchema = "vramprof/baseline/v1"

// BaselineStacks is how many peak stacks a baseline keeps: enough to say
// which stacks grew, small enough to commit next to the code.
const BaselineStacks = 20

// Baseline is a baseline file, schema vramprof/baseline/v1: what a later
// `check --baseline FILE --max-increase PCT` compares with. Stacks' frames
// are normalized (unsymbolized addresses blanked, see NormalizeFrame).
type Baseline struct {
	Schema         string           `json:"schema"`
	Tool           string           `json:"tool"`
	Command        []string         `json:"command"`
	PeakBytes      uint64           `json:"peak_bytes"`
	LiveBytesAtEnd uint64           `json:"live_bytes_at_end"`
	LostEvents     uint64           `json:"lost_events"`
	Devices        []BaselineFigure `json:"devices"`
	Processes      []BaselineFigure `json:"processes"`
	PeakStacks     []BaselineStack  `json:"peak_stacks"`
	// PeakStacksTotal is how many stacks the recording held at its peaks;
	// PeakStacks keeps the largest BaselineStacks of them.
	PeakStacksTotal int `json:"peak_stacks_total"`
	// IncompleteReasons say why the recording was no whole run (as
	// report.json's run.incomplete_reasons); absent when it was, as it
	// always is in a baseline check writes (it writes none when the
	// verdict is unknown). A check against a baseline that has them gives
	// no verdict.
	IncompleteReasons []string `json:"incomplete_reasons,omitempty"`
}

// BaselineFigure is a device ("device": "0") or a command ("command", and
// "processes" running it) with its peak and live-at-end bytes.
type BaselineFigure struct {
	Device         string `json:"device,omitempty"`
	Command        string `json:"command,omitempty"`
	Processes      int    `json:"processes,omitempty"`
	PeakBytes      uint64 `json:"peak_bytes"`
	LiveBytesAtEnd uint64 `json:"live_bytes_at_end"`
}

// BaselineStack is one of a baseline's peak stacks.
type BaselineStack struct {
	Frames []string `json:"frames"`
	Site   string   `json:"site"`
	Bytes  uint64   `json:"bytes"`
	Count  uint64   `json:"count"`
}

// NewBaseline is s's baseline, written by tool ("vramprof 0.1.0"). Lists
// are empty, never null.
func NewBaseline(s *Figures, tool string) *Baseline {
	b := &Baseline{Schema: BaselineSchema, Tool: tool, Command: s.Command,
		PeakBytes: s.Peak, LiveBytesAtEnd: s.LiveEnd, LostEvents: s.Lost,
		Devices: []BaselineFigure{}, Processes: []BaselineFigure{}, PeakStacks: []BaselineStack{},
		PeakStacksTotal: len(s.PeakStacks), IncompleteReasons: s.Incomplete}
	if b.Command == nil {
		b.Command = []string{}
	}
	for _, d := range s.Devices {
		b.Devices = append(b.Devices, BaselineFigure{Device: d.Name, PeakBytes: d.Peak, LiveBytesAtEnd: d.End})
	}
	for _, p := range s.Processes {
		b.Processes = append(b.Processes, BaselineFigure{Command: p.Name, Processes: p.Count, PeakBytes: p.Peak, LiveBytesAtEnd: p.End})
	}
	for i, st := range s.PeakStacks {
		if i == BaselineStacks {
			break
		}
		b.PeakStacks = append(b.PeakStacks, BaselineStack{Frames: st.Frames, Site: st.Site, Bytes: st.Bytes, Count: st.Count})
	}
	return b
}

// WriteBaseline writes s's baseline as indented JSON (see NewBaseline).
func WriteBaseline(w io.Writer, s *Figures, tool string) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(NewBaseline(s, tool))
}

// Figures is the baseline as a Figures named source. Its stacks are
// incomplete (StacksComplete false) when the recording held more peak
// stacks than the baseline kept.
func (b *Baseline) Figures(source string) *Figures {
	s := &Figures{Source: source, Command: b.Command, Peak: b.PeakBytes, LiveEnd: b.LiveBytesAtEnd, Lost: b.LostEvents,
		StacksComplete: b.PeakStacksTotal <= len(b.PeakStacks), EndedCleanly: len(b.IncompleteReasons) == 0,
		Incomplete: b.IncompleteReasons}
	for _, d := range b.Devices {
		s.Devices = append(s.Devices, Figure{Name: d.Device, Count: 1, Peak: d.PeakBytes, End: d.LiveBytesAtEnd})
	}
	for _, p := range b.Processes {
		s.Processes = append(s.Processes, Figure{Name: p.Command, Count: p.Processes, Peak: p.PeakBytes, End: p.LiveBytesAtEnd})
	}
	ss := stackSet{}
	for _, st := range b.PeakStacks {
		ss.add(st.Frames, st.Site, st.Bytes, st.Count)
	}
	s.PeakStacks = ss.sorted()
	slices.SortFunc(s.Processes, func(a, b Figure) int { return cmp.Compare(a.Name, b.Name) })
	return s
}

// LoadBaseline reads a baseline written by WriteBaseline, or a report.json
// (whose figures are a baseline's and more), named by its path. Errors wrap
// ErrRecording or ErrSchema.
func LoadBaseline(path string) (*Figures, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRecording, err)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%w: %s is a directory; give the baseline file (or a report.json)", ErrRecording, path)
	}
	data, schema, err := readSchema(path)
	if err != nil {
		return nil, err
	}
	switch schema {
	case report.Schema:
		return parseReport(path, path, data)
	case BaselineSchema:
	default:
		return nil, fmt.Errorf("%w: %s has schema %q, not %s (nor a report.json's %s)", ErrSchema, path, schema, BaselineSchema, report.Schema)
	}
	var b Baseline
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrRecording, path, err)
	}
	return b.Figures(path), nil
}
