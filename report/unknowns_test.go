package report

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

// importRecords is an imported snapshot as profile/snapshot writes one: PID
// 0 (a snapshot names no process), exit code 0 (it has none), no host, no
// wall time. With times (time_us), 2 MiB then 4 MiB at +100 µs and +200
// µs; without, the importer numbers the entries and ends with
// analysis.EndReasonUntimed.
func importRecords(timed bool) []event.Record {
	reason := "snapshot"
	if !timed {
		reason = analysis.EndReasonUntimed
	}
	return []event.Record{
		&event.Header{Version: 1, Tool: "vramprof import", Mode: "import", Command: []string{"snap.pickle"}, Start: 1000},
		&event.Process{PID: 0, Command: []string{"torch.cuda.memory._snapshot()"}, Time: 1000},
		&event.Stack{ID: 1, PID: 0, Frames: []event.Frame{{Function: "forward", File: "train.py", Line: 10}}},
		&event.Event{Time: 101_000, Kind: event.KindAlloc, Addr: 0x1000000, Size: 2 * MiB, Stack: 1, Device: 0, API: event.APICudaMalloc},
		&event.Event{Time: 201_000, Kind: event.KindAlloc, Addr: 0x2000000, Size: 4 * MiB, Stack: 1, Device: 0, API: event.APICudaMalloc},
		&event.End{Time: 201_000, Reason: reason},
	}
}

// TestImportUnknowns: what a snapshot does not know reads "unknown" in
// every output, never 0: the PID, the parent, the exit code; and, without
// time_us, the duration and every time.
func TestImportUnknowns(t *testing.T) {
	for _, tc := range []struct {
		name  string
		timed bool
		// text is what the summary must say, absent what it must not.
		text, absent []string
		runUnknown   []string
		procUnknown  []string
	}{
		{name: "timed", timed: true,
			// 1000 ns origin, the 6 MiB peak at 201000 ns: +200 µs, not
			// "+0.000s".
			text:        []string{"(import, 200 µs, snapshot, exit code unknown)", "peak:               6291456 bytes (6.00 MiB) at +200 µs", "top stacks at the peak of pid unknown"},
			absent:      []string{"pid 0", "exit code 0", "+0.000s", "attached mid-run"},
			runUnknown:  []string{"pid", "exit_code", "host", "start_time"},
			procUnknown: []string{"pid", "ppid"}},
		{name: "untimed",
			text:        []string{"(import, duration unknown, snapshot without times, exit code unknown)", "at an unknown time", "pid unknown"},
			absent:      []string{"pid 0", "exit code 0", "µs", "+0 s"},
			runUnknown:  []string{"pid", "exit_code", "host", "start_time", "duration_ns", "times"},
			procUnknown: []string{"pid", "ppid", "peak_time_ns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := mustResult(t, importRecords(tc.timed))
			var txt, md, html, js bytes.Buffer
			require.NoError(t, WriteSummary(&txt, res))
			require.NoError(t, WriteMarkdown(&md, res))
			require.NoError(t, WriteHTML(&html, res))
			require.NoError(t, WriteJSON(&js, res))
			for _, want := range tc.text {
				assert.Contains(t, txt.String(), want)
			}
			for _, not := range tc.absent {
				assert.NotContains(t, txt.String(), not)
				assert.NotContains(t, md.String(), not)
			}
			assert.Contains(t, md.String(), "exit code unknown")
			assert.Contains(t, md.String(), "### Process unknown:")
			assert.Contains(t, md.String(), "| unknown | ")
			assert.Contains(t, html.String(), "<dt>root pid</dt><dd>unknown</dd>")
			assert.Contains(t, html.String(), "exit code unknown")
			assert.NotContains(t, html.String(), "exit code 0")

			// report.json keeps v1's fields (pid 0, exit_code 0) and says
			// they are placeholders.
			var j struct {
				Run struct {
					PID      *uint32  `json:"pid"`
					ExitCode *int     `json:"exit_code"`
					Unknown  []string `json:"unknown"`
				} `json:"run"`
				Processes []struct {
					PID     *uint32  `json:"pid"`
					Unknown []string `json:"unknown"`
				} `json:"processes"`
			}
			require.NoError(t, json.Unmarshal(js.Bytes(), &j))
			require.NotNil(t, j.Run.PID, "v1's run.pid stays")
			require.NotNil(t, j.Run.ExitCode, "v1's run.exit_code stays")
			assert.Equal(t, tc.runUnknown, j.Run.Unknown)
			require.Len(t, j.Processes, 1)
			require.NotNil(t, j.Processes[0].PID, "v1's processes[].pid stays")
			assert.Equal(t, tc.procUnknown, j.Processes[0].Unknown)
		})
	}

	// The importer's literal (profile/snapshot.ReasonUntimed) is this one.
	assert.Equal(t, "snapshot without times", analysis.EndReasonUntimed)

	// A traced run knows them all: no "unknown" list.
	var js bytes.Buffer
	require.NoError(t, WriteJSON(&js, mustResult(t, trainRecords())))
	assert.NotContains(t, js.String(), `"unknown":`)
}

// TestFlightLine: a flight recorder's report says which figures its
// checkpoint carried over the cut and which cover the kept events only.
func TestFlightLine(t *testing.T) {
	res := &analysis.Result{}
	assert.Empty(t, flightLine(res, afterStart), "not a flight recording")
	res.Run.Start, res.Run.Events = 1_000, 700
	res.Run.Flight = &analysis.Flight{SummarisedEvents: 300, Restored: 4, CutTime: 2_001_000}
	for _, tc := range []struct {
		peaks, timelines bool
		covers           string
	}{
		{false, false, "totals, books and peaks cover the whole run; timelines, and stacks at a peak, before the window do not"},
		{true, false, "totals, books, peaks and the stacks live at them cover the whole run; timelines before the window do not"},
		{true, true, "totals, books, peaks, the stacks live at them and timelines cover the whole run"},
	} {
		res.Run.Flight.PeakStacks, res.Run.Flight.Timelines = tc.peaks, tc.timelines
		// 700 kept of 700+300; the cut 2,000,000 ns after the start.
		assert.Equal(t, "flight recorder: kept the last 700 / 1000 events (from 2ms after the start); 300 earlier events summarised in a checkpoint "+
			"(4 allocations live at the cut restored exactly; "+tc.covers+"; churn, spikes and iterations are found in the kept events only)", flightLine(res, afterStart))
	}
}

// TestLostCause: lost records are explained by their causes, counted, in
// the summary, report.md, report.html and report.json; a trace that did
// not record them (older) keeps the one cause they mostly had.
func TestLostCause(t *testing.T) {
	recs := func(l *event.Lost) []event.Record {
		return []event.Record{
			&event.Header{Version: 2, Tool: "vramprof test", Mode: "attach", Start: 1000},
			&event.Process{PID: 7, Command: []string{"train"}, Time: 1000},
			&event.Event{Time: 2000, PID: 7, Kind: event.KindAlloc, Addr: 0x1000, Size: MiB, API: event.APICudaMalloc},
			l,
			&event.End{Time: 3000, Reason: "exited"},
		}
	}
	// 3 + 2 + 1 = 6: each cause named with its count, the empty one left out.
	known := mustResult(t, recs(&event.Lost{Time: 2500, Total: 6, Causes: event.LostCauses{RingFull: 3, Unpaired: 2, Malformed: 1}}))
	cause := "3 refused by the full ring buffer, 2 returns without their call (a call in flight at attach), 1 malformed records"
	assert.Equal(t, cause, lostCause(known))
	partial := mustResult(t, recs(&event.Lost{Time: 2500, Total: 2, Causes: event.LostCauses{Unpaired: 2}}))
	assert.Equal(t, "2 returns without their call (a call in flight at attach)", lostCause(partial))
	old := mustResult(t, recs(&event.Lost{Time: 2500, Total: 6}))
	assert.Equal(t, "ring buffer full", lostCause(old))

	for name, write := range map[string]func(io.Writer, *analysis.Result) error{
		"summary": WriteSummary, "markdown": WriteMarkdown, "html": WriteHTML} {
		var b bytes.Buffer
		require.NoError(t, write(&b, known), name)
		assert.Contains(t, b.String(), cause, name)
	}
	var j struct {
		Totals struct {
			LostEvents uint64          `json:"lost_events"`
			LostCauses *JSONLostCauses `json:"lost_causes"`
		} `json:"totals"`
	}
	for _, tc := range []struct {
		res  *analysis.Result
		want *JSONLostCauses
	}{{known, &JSONLostCauses{RingFull: 3, Unpaired: 2, Malformed: 1}}, {old, nil}} {
		data, err := json.Marshal(NewJSON(tc.res))
		require.NoError(t, err)
		j.Totals.LostCauses = nil
		require.NoError(t, json.Unmarshal(data, &j))
		assert.Equal(t, tc.res.LostEvents, j.Totals.LostEvents)
		assert.Equal(t, tc.want, j.Totals.LostCauses)
	}
}
