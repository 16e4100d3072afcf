package profile

import (
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"

	gprofile "github.com/google/pprof/profile"
	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

// Sample type indexes, in the order of SampleTypes.
const (
	AllocObjects = iota
	AllocSpace
	InuseObjects
	InuseSpace
	PeakObjects
	PeakSpace
)

// SampleTypes are the profile's sample types, in order. DESIGN.md fixes the
// order: append only.
var SampleTypes = []*gprofile.ValueType{
	{Type: "alloc_objects", Unit: "count"},
	{Type: "alloc_space", Unit: "bytes"},
	{Type: "inuse_objects", Unit: "count"},
	{Type: "inuse_space", Unit: "bytes"},
	{Type: "peak_objects", Unit: "count"},
	{Type: "peak_space", Unit: "bytes"},
}

// DefaultSampleType is what pprof shows unless told otherwise.
const DefaultSampleType = "peak_space"

// Label keys of every sample.
const (
	LabelDevice = "device"
	LabelPID    = "pid"
	LabelAPI    = "api"
	LabelLayer  = "layer"
	// LabelSpace is the memory space: "device", "physical" (cuMemCreate) or
	// "host" (pinned host memory). Added after DESIGN.md's four labels:
	// device and physical samples are the device memory; host samples must
	// be left out of device figures (-tagignore=space=host).
	LabelSpace = "space"
	// LabelHelper names the shared helper a sample's site was reached
	// through (analysis.Stack.Helper: "dev_alloc"), whose frames the
	// sample's stack leaves out; absent when the site is one frame. A
	// function name, never an address.
	LabelHelper = "helper"
	// NumLabelBytes is the allocation size, as in Go heap profiles.
	NumLabelBytes = "bytes"
)

// noStackFunction names the frame of a sample whose stack was not captured,
// so its bytes still show in pprof's views instead of vanishing.
const noStackFunction = analysis.NoStack

// ErrNilResult is returned for a nil Result.
var ErrNilResult = errors.New("profile: nil analysis result")

// Build converts res into a pprof profile. It does not modify res.
func Build(res *analysis.Result) (*gprofile.Profile, error) {
	if res == nil {
		return nil, ErrNilResult
	}
	b := newBuilder(res)
	for i := range res.Classes {
		b.sample(&res.Classes[i])
	}
	if err := b.p.CheckValid(); err != nil {
		return nil, fmt.Errorf("build profile: %w", err)
	}
	return b.p, nil
}

// Write builds the profile of res and writes it to w, gzip-compressed
// protobuf as `go tool pprof` reads it.
func Write(w io.Writer, res *analysis.Result) error {
	p, err := Build(res)
	if err != nil {
		return err
	}
	if err := p.Write(w); err != nil {
		return fmt.Errorf("write profile: %w", err)
	}
	return nil
}

// builder interns mappings, locations and functions through maps, so each
// appears once in the profile however many samples share it.
type builder struct {
	res       *analysis.Result
	p         *gprofile.Profile
	mappings  map[event.MappingID]*gprofile.Mapping
	locations map[locationKey]*gprofile.Location
	functions map[functionKey]*gprofile.Function
	stacks    map[event.StackID][]*gprofile.Location
}

// locationKey identifies a location. Two frames at one address of one
// mapping are the same location; frames outside any known mapping are told
// apart by process (address spaces differ), and frames without an address
// (interpreted code, such as Python) by their function and line.
type locationKey struct {
	mapping  event.MappingID
	pid      uint32
	addr     uint64
	function string
	file     string
	line     int64
}

type functionKey struct {
	name, file string
}

func newBuilder(res *analysis.Result) *builder {
	b := &builder{
		res: res,
		p: &gprofile.Profile{
			SampleType:        SampleTypes,
			DefaultSampleType: DefaultSampleType,
			PeriodType:        &gprofile.ValueType{Type: "space", Unit: "bytes"},
			Period:            1,
			TimeNanos:         res.Run.WallTime,
			DurationNanos:     int64(res.Run.Duration),
			Comments:          comments(res),
		},
		mappings:  make(map[event.MappingID]*gprofile.Mapping),
		locations: make(map[locationKey]*gprofile.Location),
		functions: make(map[functionKey]*gprofile.Function),
		stacks:    make(map[event.StackID][]*gprofile.Location),
	}
	for _, m := range res.Mappings {
		gm := &gprofile.Mapping{
			ID:      uint64(len(b.p.Mapping) + 1),
			Start:   m.Start,
			Limit:   m.Limit,
			Offset:  m.Offset,
			File:    m.File,
			BuildID: m.BuildID,
			// Claimed below once every frame in it turns out symbolized, so
			// pprof does not try to symbolize them again.
			HasFunctions: true,
		}
		b.mappings[m.ID] = gm
		b.p.Mapping = append(b.p.Mapping, gm)
	}
	return b
}

// comments are the run facts a profile reader should not miss.
func comments(res *analysis.Result) []string {
	run := res.Run
	out := []string{fmt.Sprintf("lost_events: %d", res.LostEvents)}
	if res.LateEvents > 0 {
		out = append(out, fmt.Sprintf("late_events: %d (out of effect order: may be misordered against calls on the same address)", res.LateEvents))
	}
	if run.Tool != "" {
		out = append(out, "tool: "+run.Tool)
	}
	if run.Mode != "" {
		out = append(out, "mode: "+run.Mode)
	}
	if len(run.Command) > 0 {
		out = append(out, "command: "+strings.Join(run.Command, " "))
	}
	if run.Ended {
		out = append(out, fmt.Sprintf("ended: %s, exit code %d", run.EndReason, run.ExitCode))
	} else {
		out = append(out, "ended: no (stream cut short)")
	}
	return out
}

// sample adds one sample for an allocation class. Values follow
// SampleTypes; the size is a numeric label as in Go heap profiles, so pprof
// can filter by it (-tagfocus=bytes=1GiB:) without one sample per address.
func (b *builder) sample(c *analysis.Class) {
	s := &gprofile.Sample{
		Location: b.stack(c.Stack, c.PID),
		Value: []int64{
			int64(c.Alloc.Count), int64(c.Alloc.Bytes),
			int64(c.Live.Count), int64(c.Live.Bytes),
			int64(c.Peak.Count), int64(c.Peak.Bytes),
		},
		Label: map[string][]string{
			LabelDevice: {analysis.DeviceName(c.Device)},
			LabelPID:    {strconv.FormatUint(uint64(c.PID), 10)},
			LabelAPI:    {c.API.String()},
			LabelLayer:  {c.Layer.String()},
			LabelSpace:  {c.Space.String()},
		},
		NumLabel: map[string][]int64{NumLabelBytes: {int64(c.Size)}},
		NumUnit:  map[string][]string{NumLabelBytes: {"bytes"}},
	}
	if st := b.res.Stacks[c.Stack]; st != nil && st.Helper >= 0 && st.Helper < len(st.Frames) {
		s.Label[LabelHelper] = []string{st.Frames[st.Helper].Function}
	}
	b.p.Sample = append(b.p.Sample, s)
}

// stack returns the locations of a stack, leaf first, built once per stack.
// The stack starts at its site's frame (analysis.Stack.SiteFrame): the
// frames leafward of it (the CUDA call and the runtime under it, a caching
// allocator, FFI and interpreter glue, a shared helper) are left out, so
// the site is the leaf, and `go tool pprof -top` puts the flat bytes on the
// place to fix, as Go's heap profiles leave out the runtime's malloc. The
// CUDA call stays in the api label, the helper in the helper label; the
// full stacks are in report.json and report.html.
func (b *builder) stack(id event.StackID, pid uint32) []*gprofile.Location {
	if locs, ok := b.stacks[id]; ok {
		return locs
	}
	var locs []*gprofile.Location
	if st := b.res.Stacks[id]; st != nil {
		for _, f := range st.Frames[max(st.SiteFrame, 0):] {
			locs = append(locs, b.location(f, pid))
		}
	}
	if len(locs) == 0 {
		locs = []*gprofile.Location{b.location(event.Frame{Function: noStackFunction}, pid)}
	}
	b.stacks[id] = locs
	return locs
}

// location returns the interned location of a frame. A frame without a
// function keeps only its address, for pprof to symbolize from the mapping's
// file if it can; its mapping then stops claiming HasFunctions.
func (b *builder) location(f event.Frame, pid uint32) *gprofile.Location {
	m := b.mappings[f.Mapping]
	k := locationKey{mapping: f.Mapping, addr: f.Addr, function: f.Function, file: f.File, line: f.Line}
	if m == nil {
		k.mapping, k.pid = 0, pid
	}
	if loc := b.locations[k]; loc != nil {
		return loc
	}
	loc := &gprofile.Location{ID: uint64(len(b.p.Location) + 1), Mapping: m, Address: f.Addr}
	if f.Function != "" {
		loc.Line = []gprofile.Line{{Function: b.function(f.Function, f.File, f.Mapping == 0), Line: f.Line}}
	}
	if m != nil {
		if f.Function == "" {
			m.HasFunctions = false
		}
		if f.File != "" {
			m.HasFilenames = true
		}
		if f.Line > 0 {
			m.HasLineNumbers = true
		}
	}
	b.locations[k] = loc
	b.p.Location = append(b.p.Location, loc)
	return loc
}

// function returns the interned function of a name in a file. An
// interpreted frame (no mapping) gets a name pprof keeps (pprofName).
func (b *builder) function(name, file string, interpreted bool) *gprofile.Function {
	k := functionKey{name, file}
	if fn := b.functions[k]; fn != nil {
		return fn
	}
	shown := name
	if interpreted {
		shown = pprofName(name, file)
	}
	fn := &gprofile.Function{ID: uint64(len(b.p.Function) + 1), Name: shown, SystemName: name, Filename: file}
	b.functions[k] = fn
	b.p.Function = append(b.p.Function, fn)
	return fn
}

// pprofName renames Python's bracketed code names (<module>, <lambda>,
// <listcomp>, <genexpr>) as "<module name>.<name>": "model.<module>" for
// model.py. pprof's symbolizer takes a name with brackets for demangled C++
// and strips the "template arguments", leaving "<unknown>" (so every
// module frame of every file became one node); a dotted name before "<" is
// Java's "Class.<init>" form, which it keeps. Without a file the brackets
// go ("python code 0x..."). SystemName keeps the name the interpreter gave.
func pprofName(name, file string) string {
	if !strings.HasPrefix(name, "<") {
		return name
	}
	if file == "" || strings.HasPrefix(file, "<") {
		// No module to name ("<python code 0x...>", a code object that
		// could not be read): the name without its brackets.
		return strings.TrimSuffix(strings.TrimPrefix(name, "<"), ">")
	}
	mod := path.Base(file)
	mod = strings.TrimSuffix(mod, path.Ext(mod))
	if mod == "" || mod == "." || mod == "/" {
		return name
	}
	return mod + "." + name
}
