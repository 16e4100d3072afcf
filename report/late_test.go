package report

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

// TestLateEventsReachEveryReport: events written out of effect order (the
// last Lost record's Late) are counted in every report, as lost events are.
func TestLateEventsReachEveryReport(t *testing.T) {
	tests := []struct {
		name string
		late uint64
		want []string // in report.json, report.md, report.html, the summary
	}{
		{name: "none", late: 0, want: []string{`"late_events": 0`, "0 events late", "", ""}},
		{name: "some", late: 3, want: []string{`"late_events": 3`, "3 events late", "3 events late", "3 events late"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := analysis.New(analysis.Options{})
			for _, rec := range []event.Record{
				&event.Header{Version: event.Version, Mode: "run", PID: 7},
				&event.Process{PID: 7},
				&event.Event{Time: 10, PID: 7, Addr: 0x1000, Size: 4096, Kind: event.KindAlloc, Layer: event.LayerSegment, API: event.APICudaMalloc},
				&event.Lost{Time: 20, Total: 0, Late: 1},
				&event.Lost{Time: 30, Total: 0, Late: tc.late},
			} {
				require.NoError(t, a.Add(rec))
			}
			res := a.Finish()
			assert.Equal(t, tc.late, res.LateEvents, "the last Lost record's running total")
			writers := []func(*bytes.Buffer) error{
				func(b *bytes.Buffer) error { return WriteJSON(b, res) },
				func(b *bytes.Buffer) error { return WriteMarkdown(b, res) },
				func(b *bytes.Buffer) error { return WriteHTML(b, res) },
				func(b *bytes.Buffer) error { return WriteSummary(b, res) },
			}
			for i, w := range writers {
				var b bytes.Buffer
				require.NoError(t, w(&b))
				if tc.want[i] != "" {
					assert.Contains(t, b.String(), tc.want[i], "output %d", i)
				} else {
					assert.NotContains(t, b.String(), "events late", "output %d", i)
				}
			}
		})
	}
}

// TestUnknownFreesInRunMode: in run mode nothing predates tracing, so an
// unknown free is labelled an anomaly, never "before tracing"; attached,
// it is memory from before tracing.
func TestUnknownFreesInRunMode(t *testing.T) {
	tests := []struct {
		mode     string
		want     string
		wantNote string
	}{
		{mode: "run", want: "an anomaly, since every process was traced from its start",
			wantNote: "1 unknown frees of addresses never seen allocated: an anomaly"},
		{mode: "attach", want: "| unknown frees | 1 | allocated before tracing began |",
			wantNote: "1 unknown frees (memory from before tracing, sizes unknown)"},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			a := analysis.New(analysis.Options{})
			for _, rec := range []event.Record{
				&event.Header{Version: event.Version, Mode: tc.mode, PID: 7},
				&event.Event{Time: 10, PID: 7, Addr: 0x1000, Kind: event.KindFree, Layer: event.LayerSegment, API: event.APICudaFree},
				&event.Lost{Time: 20},
			} {
				require.NoError(t, a.Add(rec))
			}
			res := a.Finish()
			require.Equal(t, uint64(1), res.Totals.UnknownFrees)
			var md, html bytes.Buffer
			require.NoError(t, WriteMarkdown(&md, res))
			require.NoError(t, WriteHTML(&html, res))
			assert.Contains(t, md.String(), tc.want)
			assert.Contains(t, md.String(), tc.wantNote)
			assert.Contains(t, html.String(), tc.wantNote)
			if tc.mode == "run" {
				assert.NotContains(t, md.String(), "allocated before tracing began")
				assert.NotContains(t, md.String(), "memory from before tracing, sizes unknown")
			}
		})
	}
}
