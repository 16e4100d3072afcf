package compare

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report"
	"github.com/vramprof/vramprof/report/pytests"
)

var (
	// ErrRecording: an input of diff or check (a directory, trace,
	// report.json or baseline) cannot be read.
	ErrRecording = errors.New("cannot read recording")
	// ErrSchema: a JSON input is not the kind of file expected, or a
	// version this vramprof does not know.
	ErrSchema = errors.New("unknown schema")
)

// Figures is what diff and check compare of one recording: the figures of
// report.json, keyed so that two runs line up (see the package doc).
type Figures struct {
	// Source names the recording for people: a path, or the command run.
	Source       string
	Command      []string
	ExitCode     int
	EndedCleanly bool
	// Truncated: a trace cut short; the figures cover what came before.
	Truncated bool
	// Incomplete says why the figures do not cover the whole recording
	// (report.json's run.incomplete_reasons, or what an older report says
	// of its end): no verdict holds on them. Nil when complete.
	Incomplete []string
	// NoFigures: the recording could not be read into figures at all (its
	// segments do not follow each other); Incomplete says why, and every
	// figure is zero.
	NoFigures   bool
	Allocations uint64
	Peak        uint64
	LiveEnd     uint64
	Lost        uint64
	// LostCause says why Lost were lost (report.LostCause).
	LostCause string
	// Events is how many events were recorded (report.json run.events):
	// Lost/(Lost+Events) is the share --allow-lost judges.
	Events     uint64
	Late       uint64   // events out of effect order (report.json late_events)
	Devices    []Figure // by device name
	Processes  []Figure // by command; Count is how many processes ran it
	PeakStacks []Stack  // largest first, ties by frames
	EndStacks  []Stack  // largest first, ties by frames
	Leaks      []report.JSONFinding
	// OOMs are the out-of-memory failures, one per process, in time order
	// (see OOM); nil when nothing ran out of memory.
	OOMs []OOM
	// Tests are the pytest tests' own figures (package pytests), read from
	// the recording's trace by the caller (cmd/vramprof/internal/recorder's
	// Tests); TestsRead says they were read: a report.json has none.
	Tests     []pytests.Test
	TestsRead bool
	// StacksComplete is false for a baseline, which keeps only the top
	// peak stacks (and no stacks live at the end): a stack missing from it
	// may be below its cut rather than new.
	StacksComplete bool
}

// Figure is one device's or one command's peak and live-at-end bytes.
type Figure struct {
	Name  string
	Count int
	Peak  uint64
	End   uint64
}

// Stack is a stack's bytes at the peak or at the end, summed over the
// processes (and the raw stacks that blank to the same frames). Its frames
// and site are normalized (see NormalizeFrame).
type Stack struct {
	// key is Frames joined by newlines: what lines two runs' stacks up.
	key    string
	Frames []string
	Site   string
	Bytes  uint64
	Count  uint64
}

// keyOf is s's key, also for a Stack built outside a stackSet.
func keyOf(s *Stack) string {
	if s.key == "" && len(s.Frames) > 0 {
		return strings.Join(s.Frames, "\n")
	}
	return s.key
}

// addrFrame matches a frame rendered without a symbol: "0x7f12 (libc.so.6)"
// or "0x7f12".
var addrFrame = regexp.MustCompile(`^0x[0-9a-f]+( \(.*\))?$`)

// NormalizeFrame blanks the address of an unsymbolized frame, which ASLR
// changes on every run: "0x7fce9717324a (libc.so.6)" becomes "? (libc.so.6)".
// Other frames are returned as they are.
func NormalizeFrame(f string) string {
	if m := addrFrame.FindStringSubmatch(f); m != nil {
		return "?" + m[1]
	}
	return f
}

func normalizeFrames(frames []string) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = NormalizeFrame(f)
	}
	return out
}

// IsJSONFile tells a JSON file from a trace by its first non-blank byte; a
// file that cannot be read is no JSON file.
func IsJSONFile(path string) bool {
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

// readSchema reads a JSON file and the schema it names.
func readSchema(path string) ([]byte, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrRecording, err)
	}
	schema, err := schemaOf(path, data)
	return data, schema, err
}

// schemaOf is the schema the JSON data (named name in errors) names.
func schemaOf(name string, data []byte) (string, error) {
	var head struct {
		Schema *string `json:"schema"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return "", fmt.Errorf("%w: %s is not valid JSON: %w", ErrRecording, name, err)
	}
	if head.Schema == nil {
		return "", fmt.Errorf("%w: %s has no \"schema\" field", ErrSchema, name)
	}
	return *head.Schema, nil
}

// LoadReport reads the report.json at path (schema report.Schema) as a
// Figures named source. Errors wrap ErrRecording or ErrSchema.
func LoadReport(source, path string) (*Figures, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRecording, err)
	}
	return ParseReport(source, path, data)
}

// ParseReport is LoadReport of a report.json already read (data, named
// name in errors): a pipe, read once.
func ParseReport(source, name string, data []byte) (*Figures, error) {
	schema, err := schemaOf(name, data)
	if err != nil {
		return nil, err
	}
	if schema != report.Schema {
		return nil, fmt.Errorf("%w: %s has schema %q, not %s", ErrSchema, name, schema, report.Schema)
	}
	return parseReport(source, name, data)
}

func parseReport(source, path string, data []byte) (*Figures, error) {
	var j report.JSON
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrRecording, path, err)
	}
	s := FromReport(&j, source)
	// run.complete false with no reason given (not as vramprof writes it):
	// still incomplete. Absent (a report.json from before the field) is
	// judged by what the report says of its end (FromReport).
	var head struct {
		Run struct {
			Complete *bool `json:"complete"`
		} `json:"run"`
	}
	if json.Unmarshal(data, &head) == nil && head.Run.Complete != nil && !*head.Run.Complete && len(s.Incomplete) == 0 {
		s.Incomplete = []string{"report.json says the recording is incomplete (run.complete false)"}
	}
	return s, nil
}

// incompleteReasons is what j says of its completeness: run.incomplete_reasons,
// or, in a report.json written before that field, what its end and
// moment say.
func incompleteReasons(j *report.JSON) []string {
	if len(j.Run.IncompleteReasons) > 0 || j.Run.Complete {
		return j.Run.IncompleteReasons
	}
	switch {
	case j.Run.Moment != nil:
		return []string{fmt.Sprintf("a moment report (%s %d): the figures stop at the moment, while the recording went on",
			j.Run.Moment.Kind, j.Run.Moment.Index)}
	case !j.Run.EndedCleanly:
		return []string{"cut short: the trace ends without its End record (ended_cleanly false), so the figures cover only what was recorded before the cut"}
	}
	return nil
}

// lostCause is s.LostCause, or what figures without one (a baseline)
// says: the cause traces had before the causes were recorded.
func (s *Figures) lostCause() string {
	if s.LostCause == "" {
		return report.LostCause(s.Lost, event.LostCauses{})
	}
	return s.LostCause
}

// FromReport keys a report's figures for comparison, as Figures named
// source.
func FromReport(j *report.JSON, source string) *Figures {
	s := &Figures{
		Source: source, Command: j.Run.Command, ExitCode: j.Run.ExitCode, EndedCleanly: j.Run.EndedCleanly,
		Allocations: j.Totals.Allocations, Peak: j.Totals.PeakBytes, LiveEnd: j.Totals.LiveBytesAtEnd,
		Lost: j.Totals.LostEvents, Events: j.Run.Events, Late: j.Totals.LateEvents, StacksComplete: true,
		Incomplete: incompleteReasons(j),
	}
	var causes event.LostCauses
	if c := j.Totals.LostCauses; c != nil {
		causes = event.LostCauses{RingFull: c.RingFull, Unpaired: c.Unpaired, Malformed: c.Malformed}
	}
	s.LostCause = report.LostCause(s.Lost, causes)
	for _, d := range j.Devices {
		name := d.Name
		if name == "" {
			name = analysis.DeviceName(d.Index)
		}
		s.Devices = append(s.Devices, Figure{Name: name, Count: 1, Peak: d.PeakBytes, End: d.LiveBytesAtEnd})
	}
	procs := map[string]*Figure{}
	peaks, ends := stackSet{}, stackSet{}
	for _, p := range j.Processes {
		name := p.Command
		if name == "" {
			name = "[unknown command]"
		}
		f := procs[name]
		if f == nil {
			f = &Figure{Name: name}
			procs[name] = f
		}
		f.Count++
		f.Peak += p.PeakBytes
		f.End += p.LiveBytesAtEnd
		for _, st := range p.PeakStacks {
			peaks.add(st.Frames, st.Site, st.Bytes, st.Count)
		}
		for _, st := range p.LiveAtEndStacks {
			ends.add(st.Frames, st.Site, st.Bytes, st.Count)
		}
	}
	for _, f := range procs {
		s.Processes = append(s.Processes, *f)
	}
	slices.SortFunc(s.Processes, func(a, b Figure) int { return cmp.Compare(a.Name, b.Name) })
	s.PeakStacks, s.EndStacks = peaks.sorted(), ends.sorted()
	for _, f := range j.Findings {
		if f.Kind == "leak" {
			s.Leaks = append(s.Leaks, f)
		}
	}
	if ooms := oomsOf(j); len(ooms) > 0 {
		s.OOMs = ooms
	}
	return s
}

// stackSet sums stacks by their normalized frames.
type stackSet map[string]*Stack

func (ss stackSet) add(frames []string, site string, bytes, count uint64) {
	if bytes == 0 {
		return
	}
	norm := normalizeFrames(frames)
	key := strings.Join(norm, "\n")
	f := ss[key]
	if f == nil {
		f = &Stack{key: key, Frames: norm, Site: NormalizeFrame(site)}
		ss[key] = f
	}
	f.Bytes += bytes
	f.Count += count
}

// sorted is the set largest first, ties by frames.
func (ss stackSet) sorted() []Stack {
	out := make([]Stack, 0, len(ss))
	for _, f := range ss {
		out = append(out, *f)
	}
	slices.SortFunc(out, func(a, b Stack) int {
		if c := cmp.Compare(b.Bytes, a.Bytes); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	return out
}
