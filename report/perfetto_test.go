package report

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report/perfettotest"
)

// The Perfetto trace is checked three ways: against a JSON Schema of the
// Trace Event Format and for the promises every trace makes (package
// perfettotest: no trace processor is reachable here), for what it says
// of the run (its counters are the analysis's figures, the lost events
// shown), and against arithmetic on the recorded events themselves.

// mustFixtureRecords reads probes/event's recorded trace NAME (format 1),
// its Header first.
func mustFixtureRecords(tb testing.TB, name string) []event.Record {
	tb.Helper()
	f, err := os.Open(filepath.Join("..", "probes", "event", "testdata", "v1", name+".vpt.gz"))
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = f.Close() })
	zr, err := gzip.NewReader(f)
	require.NoError(tb, err)
	r, err := event.NewReader(zr)
	require.NoError(tb, err)
	h := *r.Header()
	recs := []event.Record{&h}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return recs
		}
		require.NoError(tb, err)
		if e, ok := rec.(*event.Event); ok { // the reader reuses its Event
			c := *e
			rec = &c
		}
		recs = append(recs, rec)
	}
}

// perfettoOf analyses recs while writing their Perfetto trace, as
// `vramprof report --format perfetto` does.
func perfettoOf(tb testing.TB, recs []event.Record, opts PerfettoOptions) (*analysis.Result, []byte) {
	tb.Helper()
	var buf bytes.Buffer
	p := NewPerfetto(&buf, opts)
	a := analysis.New(analysis.Options{Watch: p.Watch})
	for _, rec := range recs {
		require.NoError(tb, p.Record(rec))
		require.NoError(tb, a.Add(rec))
	}
	res := a.Finish()
	require.NoError(tb, p.Finish(res))
	return res, buf.Bytes()
}

// counterSeriesKey names a counter series (perfettotest.SeriesKey).
type counterSeriesKey = perfettotest.SeriesKey

// checkPerfetto checks what a trace promises, against the analysis it was
// written with, and returns its counter series.
func checkPerfetto(t *testing.T, res *analysis.Result, data []byte) (*perfettotest.Trace, map[counterSeriesKey]*perfettotest.Series) {
	t.Helper()
	perfettotest.Validate(t, data)
	tr := perfettotest.Parse(t, data)
	assert.Equal(t, "ms", tr.DisplayTimeUnit)
	assert.Equal(t, res.LostEvents, tr.Metadata.LostEvents, "metadata: lost events")
	assert.Equal(t, res.LateEvents, tr.Metadata.LateEvents, "metadata: late events")

	// The run's start is the lost-events instant's time; its end is as far
	// on as the analysis's.
	var lostInstants, findings int
	var origin uint64
	for _, e := range tr.TraceEvents {
		if e.Ph != "i" {
			continue
		}
		switch e.Cat {
		case "vramprof":
			lostInstants++
			assert.Equal(t, fmt.Sprintf("vramprof: %d events lost", res.LostEvents), e.Name)
			assert.Equal(t, "g", e.S)
			assert.Equal(t, res.LostEvents, perfettotest.Uint(t, e.Args["lost_events"]))
			origin = perfettotest.NS(t, e.TS)
		case "finding":
			findings++
			assert.Contains(t, e.Args, "summary")
		}
	}
	assert.Equal(t, 1, lostInstants, "the lost events are shown, even 0")
	assert.Len(t, res.Findings, findings, "one instant per finding")
	end := origin + res.Run.End - res.Run.Start

	counters := tr.Counters(t)
	slices := tr.Slices(t)
	assert.EqualValues(t, tr.Metadata.Slices.Written, len(slices), "metadata: slices written")
	for _, s := range slices {
		for _, a := range []string{"bytes", "address", "device", "stack", "live_at_peak"} {
			assert.Contains(t, s.Args, a)
		}
		if s.EndArgs["live_at_end"] == true {
			assert.Equal(t, end, s.End, "%s: live at the end ends with the run", s.Name)
		}
	}

	// The counters are the report's: per process and device, the last
	// value is what was live at the end, the largest the peak.
	pids := map[uint32]int{}
	for _, p := range res.Processes {
		pids[p.PID]++
	}
	for _, p := range res.Processes {
		if pids[p.PID] > 1 {
			continue // a reused PID: its instances share the process's tracks
		}
		for _, d := range p.Devices {
			s := counters[counterSeriesKey{PID: p.PID, Name: "GPU " + analysis.DeviceName(d.Index) + " live"}]
			if d.PeakBytes == 0 && s == nil {
				continue
			}
			require.NotNil(t, s, "pid %d device %d", p.PID, d.Index)
			assert.Equal(t, d.LiveBytesAtEnd, s.Last(), "pid %d device %d: live at the end", p.PID, d.Index)
			assert.Equal(t, d.PeakBytes, s.Max(), "pid %d device %d: peak", p.PID, d.Index)
			assert.Equal(t, end, s.Times[len(s.Times)-1], "pid %d device %d: the series reaches the end", p.PID, d.Index)
		}
	}
	return tr, counters
}

// truthOf is arithmetic on a trace's own events, independent of the
// analysis: per process and device, the live bytes of the segment layer
// (non-nested allocations that succeeded, less what their frees
// released) after every call, and the allocations made in every layer.
type truthOf struct {
	live, peak map[counterSeriesKey]uint64
	allocs     uint64
	changes    uint64
}

func arithmetic(recs []event.Record) truthOf {
	type key struct {
		pid         uint32
		block, host bool
		addr        uint64
	}
	type alloc struct {
		size   uint64
		device int32
	}
	out := truthOf{live: map[counterSeriesKey]uint64{}, peak: map[counterSeriesKey]uint64{}}
	live := map[key]alloc{}
	for _, r := range recs {
		e, ok := r.(*event.Event)
		if !ok || e.Flags&event.FlagNested != 0 || e.Ret != 0 {
			continue
		}
		host := e.Kind == event.KindHostAlloc || e.Kind == event.KindHostFree
		k := key{e.PID, e.Layer == event.LayerBlock, host, e.Addr}
		name := func(d int32) counterSeriesKey {
			switch {
			case k.block:
				return counterSeriesKey{PID: e.PID, Name: "GPU " + analysis.DeviceName(d) + " blocks"}
			case host:
				return counterSeriesKey{PID: e.PID, Name: "pinned host live"}
			}
			return counterSeriesKey{PID: e.PID, Name: "GPU " + analysis.DeviceName(d) + " live"}
		}
		switch e.Kind {
		case event.KindCreate:
			if e.Size > 0 && e.Addr != 0 {
				out.allocs++ // a slice; physical memory is not followed here
			}
		case event.KindAlloc, event.KindHostAlloc:
			if e.Size == 0 || e.Addr == 0 {
				continue
			}
			if old, ok := live[k]; ok { // a missed free
				out.live[name(old.device)] -= old.size
				out.changes++
			}
			live[k] = alloc{e.Size, e.Device}
			sk := name(e.Device)
			out.live[sk] += e.Size
			out.peak[sk] = max(out.peak[sk], out.live[sk])
			out.allocs++
			out.changes++
		case event.KindFree, event.KindHostFree:
			if old, ok := live[k]; ok {
				delete(live, k)
				out.live[name(old.device)] -= old.size
				out.changes++
			}
		}
	}
	return out
}

// TestPerfettoFixtures writes the Perfetto trace of recorded traces and
// checks it against the format, its promises and the events' arithmetic.
func TestPerfettoFixtures(t *testing.T) {
	for _, name := range []string{"steady", "leak", "spike", "oom", "threads", "four_devices", "async_streams", "hashed",
		"pool_steady", "managed_pinned", "vmm", "static_runtime", "dlopen_runtime"} {
		t.Run(name, func(t *testing.T) {
			recs := mustFixtureRecords(t, name)
			res, data := perfettoOf(t, recs, PerfettoOptions{})
			tr, counters := checkPerfetto(t, res, data)
			want := arithmetic(recs)
			if name == "vmm" {
				// Physical memory is live until released and unmapped: the
				// arithmetic above does not follow it; checkPerfetto held
				// the series to the report's figures.
				assert.Equal(t, want.allocs, tr.Metadata.Slices.Written)
				return
			}
			for k, v := range want.live {
				s := counters[k]
				require.NotNil(t, s, "%v", k)
				assert.Equal(t, v, s.Last(), "%v: live at the end", k)
				assert.Equal(t, want.peak[k], s.Max(), "%v: peak", k)
			}
			// One point per allocation and free, and one at the end per
			// series that had changed before it.
			var points uint64
			for _, s := range counters {
				points += uint64(len(s.Values))
			}
			assert.LessOrEqual(t, want.changes, points)
			assert.LessOrEqual(t, points, want.changes+uint64(len(counters)))
			// Nothing left out of these small runs: a slice per allocation.
			assert.Equal(t, want.allocs, tr.Metadata.Slices.Written)
			assert.Zero(t, tr.Metadata.Slices.Omitted)
			assert.Equal(t, "unix", tr.Metadata.Clock, "recorded with the wall clock")
			t.Logf("%s: %d bytes, %d events, %d slices", name, len(data), len(tr.TraceEvents), tr.Metadata.Slices.Written)
		})
	}
}

// TestPerfettoOOMInstants: the oom fixture's failed request is an
// instant of its process, with the error named.
func TestPerfettoOOMInstants(t *testing.T) {
	recs := mustFixtureRecords(t, "oom")
	var failed []*event.Event
	for _, r := range recs {
		if e, ok := r.(*event.Event); ok && e.Ret != 0 && e.Flags&event.FlagNested == 0 && analysis.IsOutOfMemory(e.Ret) {
			failed = append(failed, e)
		}
	}
	require.NotEmpty(t, failed, "the fixture runs out of memory")
	res, data := perfettoOf(t, recs, PerfettoOptions{})
	tr := perfettotest.Parse(t, data)
	var got []perfettotest.Event
	for _, e := range tr.TraceEvents {
		if e.Ph == "i" && e.Cat == "oom" {
			got = append(got, e)
		}
	}
	require.Len(t, got, len(failed))
	for i, e := range got {
		assert.Equal(t, "p", e.S)
		assert.Equal(t, failed[i].PID, e.PID)
		assert.Equal(t, failed[i].Size, perfettotest.Uint(t, e.Args["bytes"]))
		assert.Equal(t, analysis.ErrorName(failed[i].API, failed[i].Ret), e.Args["error"])
		assert.Equal(t, perfettotest.NS(t, got[i].TS)-perfettotest.NS(t, tr.TraceEvents[0].TS), failed[i].Time-firstChange(recs),
			"at the failure's time")
	}
	_ = res
}

// firstChange is the time of a trace's first allocation that succeeded:
// the first counter point's.
func firstChange(recs []event.Record) uint64 {
	for _, r := range recs {
		if e, ok := r.(*event.Event); ok && e.Kind == event.KindAlloc && e.Ret == 0 && e.Flags&event.FlagNested == 0 && e.Size > 0 {
			return e.Time
		}
	}
	return 0
}

// TestPerfettoBounded: a run of many allocations keeps, per process, the
// largest of those live at its peak and the largest of the others, and
// counts the rest; the counters keep every point.
func TestPerfettoBounded(t *testing.T) {
	const pid, limit = 42, 8
	h := &event.Header{Version: event.Version, Start: 1000, PID: pid, Mode: "run"}
	recs := []event.Record{h, &event.Process{PID: pid, Time: 1000, Command: []string{"train"}}}
	tm := uint64(1000)
	ev := func(kind event.Kind, addr, size uint64) {
		tm += 10
		recs = append(recs, &event.Event{Time: tm, PID: pid, TID: pid, Kind: kind, API: event.APICudaMalloc,
			Layer: event.LayerSegment, Addr: addr, Size: size})
	}
	// Phase 1: 10 allocations of 1000..1009 KiB, freed: a first peak of
	// 10045 KiB. Phase 2: 200 of 1..200 KiB held at once: the peak, 20100
	// KiB, then all freed but the last 10, which stay live to the end.
	for i := uint64(0); i < 10; i++ {
		ev(event.KindAlloc, 0x10000000+i<<20, (1000+i)<<10)
	}
	for i := uint64(0); i < 10; i++ {
		ev(event.KindFree, 0x10000000+i<<20, 0)
	}
	for i := uint64(1); i <= 200; i++ {
		ev(event.KindAlloc, 0x40000000+i<<20, i<<10)
	}
	for i := uint64(1); i <= 190; i++ {
		ev(event.KindFree, 0x40000000+i<<20, 0)
	}
	recs = append(recs, &event.End{Time: tm + 10, Reason: "exited"})

	res, data := perfettoOf(t, recs, PerfettoOptions{MaxSlices: limit})
	tr, counters := checkPerfetto(t, res, data)
	s := counters[counterSeriesKey{PID: pid, Name: "GPU 0 live"}]
	require.NotNil(t, s)
	assert.Len(t, s.Values, 210+200+1, "a point per allocation and free, and the end's")
	assert.Equal(t, uint64(200*201/2)<<10, s.Max())
	assert.Equal(t, uint64((191+200)*10/2)<<10, s.Last())

	// Live at the peak: phase 2's 200, the 8 largest kept (193..200 KiB,
	// the live ones among them); the others: phase 1's 10 and phase 2's
	// 192 smaller, of which the 8 largest (phase 1's 1002..1009 KiB).
	var atPeak, others []uint64
	for _, sl := range tr.Slices(t) {
		n := perfettotest.Uint(t, sl.Args["bytes"])
		if sl.Args["live_at_peak"] == true {
			atPeak = append(atPeak, n>>10)
		} else {
			others = append(others, n>>10)
		}
	}
	assert.ElementsMatch(t, []uint64{193, 194, 195, 196, 197, 198, 199, 200}, atPeak)
	assert.ElementsMatch(t, []uint64{1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009}, others)
	assert.EqualValues(t, 2*limit, tr.Metadata.Slices.Written)
	assert.EqualValues(t, 210-2*limit, tr.Metadata.Slices.Omitted)
}

// TestPerfettoLostEvents: the lost events are in the metadata and in the
// global instant at the start.
func TestPerfettoLostEvents(t *testing.T) {
	recs := mustFixtureRecords(t, "steady")
	end := recs[len(recs)-1]
	recs = append(recs[:len(recs)-1], &event.Lost{Time: recs[0].(*event.Header).Start + 1, Total: 7}, end)
	res, data := perfettoOf(t, recs, PerfettoOptions{})
	require.EqualValues(t, 7, res.LostEvents)
	checkPerfetto(t, res, data)
}

// TestPerfettoSchemaRejects: the schema is no rubber stamp.
func TestPerfettoSchemaRejects(t *testing.T) {
	for name, doc := range map[string]string{
		"no traceEvents":       `{"displayTimeUnit":"ms"}`,
		"counter without args": `{"traceEvents":[{"ph":"C","name":"x","pid":1,"ts":1}]}`,
		"counter text":         `{"traceEvents":[{"ph":"C","name":"x","pid":1,"ts":1,"args":{"v":"lots"}}]}`,
		"async without id":     `{"traceEvents":[{"ph":"b","cat":"alloc","name":"x","pid":1,"ts":1}]}`,
		"instant scope":        `{"traceEvents":[{"ph":"i","s":"x","name":"x","pid":1,"ts":1}]}`,
		"metadata name":        `{"traceEvents":[{"ph":"M","name":"process_title","pid":1,"args":{"name":"x"}}]}`,
		"negative ts":          `{"traceEvents":[{"ph":"i","s":"g","name":"x","pid":1,"ts":-1}]}`,
		"complete without dur": `{"traceEvents":[{"ph":"X","name":"x","pid":1,"tid":1,"ts":1}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
			require.NoError(t, err)
			assert.Error(t, perfettotest.Schema(t).Validate(v))
		})
	}
}

// TestPerfettoDeterministic: a replay of one trace writes the same bytes
// (the live allocations left at the end are kept whatever order a map
// gives them in).
func TestPerfettoDeterministic(t *testing.T) {
	recs := mustFixtureRecords(t, "leak")
	_, a := perfettoOf(t, recs, PerfettoOptions{MaxSlices: 16})
	_, b := perfettoOf(t, recs, PerfettoOptions{MaxSlices: 16})
	assert.Equal(t, string(a), string(b))
}
