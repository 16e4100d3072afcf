// Package perfettotest reads back the Perfetto traces package report
// writes (report.Perfetto), for tests only: it validates a trace against
// a JSON Schema of the Trace Event Format (trace_event_format.schema.json
// beside this file, written from the format's document: no Perfetto trace
// processor is reachable from the test machines), and reads its counter
// series and its slices, failing the test on what breaks a promise every
// trace makes: counter values are exact byte integers and never go back
// in time on their track; every slice begins once and ends once, after
// it began; two slices of one track and id never overlap.
//
// It imports the standard library, testify and the JSON Schema validator
// only, so that report's own tests and the command's end-to-end tests can
// both use it.
package perfettotest

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Event is one trace event, its numbers kept as json.Number.
type Event struct {
	Ph   string      `json:"ph"`
	Name string      `json:"name"`
	Cat  string      `json:"cat"`
	PID  uint32      `json:"pid"`
	TID  uint32      `json:"tid"`
	TS   json.Number `json:"ts"`
	S    string      `json:"s"`
	ID2  *struct {
		Local string `json:"local"`
	} `json:"id2"`
	Args map[string]any `json:"args"`
}

// Trace is a Perfetto trace as written: the events and the metadata.
type Trace struct {
	TraceEvents     []Event  `json:"traceEvents"`
	DisplayTimeUnit string   `json:"displayTimeUnit"`
	Metadata        Metadata `json:"metadata"`
}

// Metadata is the part of a trace's "metadata" the tests read.
type Metadata struct {
	Clock      string `json:"clock"`
	LostEvents uint64 `json:"lost_events"`
	LateEvents uint64 `json:"late_events"`
	Slices     struct {
		Written uint64 `json:"written"`
		Omitted uint64 `json:"omitted"`
	} `json:"slices"`
}

// SeriesKey names a counter series: Perfetto's track "<name> <arg>" of a
// process ("GPU 0 live").
type SeriesKey struct {
	PID  uint32
	Name string
}

// Series is a counter series: its values and their times (ns), in file
// order.
type Series struct {
	Values, Times []uint64
}

// Last is the series' last value.
func (s *Series) Last() uint64 { return s.Values[len(s.Values)-1] }

// Max is the series' largest value.
func (s *Series) Max() uint64 {
	var m uint64
	for _, v := range s.Values {
		m = max(m, v)
	}
	return m
}

// Slice is an allocation's slice: its "b" and "e" events paired.
type Slice struct {
	PID           uint32
	Name, ID      string
	Begin, End    uint64
	Args, EndArgs map[string]any
}

var schema struct {
	once sync.Once
	s    *jsonschema.Schema
	err  error
}

// Validate checks data against the Trace Event Format's schema.
func Validate(tb testing.TB, data []byte) {
	tb.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	require.NoError(tb, err, "parse the trace")
	require.NoError(tb, Schema(tb).Validate(doc), "the Trace Event Format")
}

// Schema returns the Trace Event Format's schema, compiled once.
func Schema(tb testing.TB) *jsonschema.Schema {
	tb.Helper()
	schema.once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		schema.s, schema.err = jsonschema.NewCompiler().Compile(filepath.Join(filepath.Dir(file), "trace_event_format.schema.json"))
	})
	require.NoError(tb, schema.err, "compile the Trace Event Format's schema")
	return schema.s
}

// Parse reads a trace.
func Parse(tb testing.TB, data []byte) *Trace {
	tb.Helper()
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var tr Trace
	require.NoError(tb, d.Decode(&tr))
	return &tr
}

// NS reads a ts (µs with three decimals, as report writes it) back to
// integer nanoseconds, exactly.
func NS(tb testing.TB, ts json.Number) uint64 {
	tb.Helper()
	whole, frac, ok := strings.Cut(string(ts), ".")
	require.True(tb, ok && len(frac) == 3, "ts %s: µs with three decimals", ts)
	us, err := strconv.ParseUint(whole, 10, 64)
	require.NoError(tb, err)
	f, err := strconv.ParseUint(frac, 10, 64)
	require.NoError(tb, err)
	return us*1000 + f
}

// Uint reads an exact integer arg.
func Uint(tb testing.TB, v any) uint64 {
	tb.Helper()
	n, ok := v.(json.Number)
	require.True(tb, ok, "%v is a number", v)
	x, err := strconv.ParseUint(string(n), 10, 64)
	require.NoError(tb, err, "an exact integer")
	return x
}

// Counters reads the counter series, one value per counter event.
func (tr *Trace) Counters(tb testing.TB) map[SeriesKey]*Series {
	tb.Helper()
	out := map[SeriesKey]*Series{}
	for _, e := range tr.TraceEvents {
		if e.Ph != "C" {
			continue
		}
		require.Len(tb, e.Args, 1, "one series per counter event")
		for k, v := range e.Args {
			sk := SeriesKey{e.PID, e.Name + " " + k}
			s := out[sk]
			if s == nil {
				s = &Series{}
				out[sk] = s
			}
			at := NS(tb, e.TS)
			if n := len(s.Times); n > 0 {
				assert.GreaterOrEqual(tb, at, s.Times[n-1], "%v: times in order", sk)
			}
			s.Values, s.Times = append(s.Values, Uint(tb, v)), append(s.Times, at)
		}
	}
	return out
}

// Slices pairs the "b" and "e" events by process, name and id, in the
// order they begin.
func (tr *Trace) Slices(tb testing.TB) []Slice {
	tb.Helper()
	type key struct {
		pid      uint32
		name, id string
	}
	open := map[key]int{}
	last := map[key]uint64{} // the end of the key's last slice
	var out []Slice
	for _, e := range tr.TraceEvents {
		if e.Ph != "b" && e.Ph != "e" {
			continue
		}
		require.NotNil(tb, e.ID2, "an async event's id")
		k := key{e.PID, e.Name, e.ID2.Local}
		at := NS(tb, e.TS)
		if e.Ph == "b" {
			_, dup := open[k]
			require.False(tb, dup, "%v begun again before it ended", k)
			if end, ok := last[k]; ok {
				assert.GreaterOrEqual(tb, at, end, "%v: two slices of one id at once", k)
			}
			open[k] = len(out)
			out = append(out, Slice{PID: e.PID, Name: e.Name, ID: e.ID2.Local, Begin: at, Args: e.Args})
			continue
		}
		i, ok := open[k]
		require.True(tb, ok, "%v ended without its begin", k)
		delete(open, k)
		assert.GreaterOrEqual(tb, at, out[i].Begin, "%v ends after it begins", k)
		out[i].End, out[i].EndArgs = at, e.Args
		last[k] = at
	}
	assert.Empty(tb, open, "every slice ends")
	return out
}
