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
