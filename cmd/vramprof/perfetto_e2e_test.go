//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// perfettoEvent is one event of a Perfetto trace, as these tests read it.
type perfettoEvent struct {
	Ph   string                  `json:"ph"`
	Name string                  `json:"name"`
	PID  uint32                  `json:"pid"`
	TS   json.Number             `json:"ts"`
	ID2  *struct{ Local string } `json:"id2"`
	Args map[string]any          `json:"args"`
}

// TestReportPerfetto records scenarios with `vramprof run -o DIR`, writes
// their Perfetto traces with `vramprof report DIR --format perfetto -o DIR`
// (and to stdout: the same bytes), validates them against the Trace Event
// Format's schema (report/testdata) and holds their counters to the
// programs' own truth: the last point of the process's "GPU 0 live"
// series is what the program still held, its largest the program's peak;
// "GPU 0 blocks" likewise for the caching allocator's blocks. Every
// allocation is a slice, written or counted as left out.
func TestReportPerfetto(t *testing.T) {
	probetest.RequirePrivilege(t)
	schema, err := jsonschema.NewCompiler().Compile(filepath.Join(probetest.Root(), "report", "testdata", "trace_event_format.schema.json"))
	require.NoError(t, err)
	for _, name := range []string{"leak", "pool_steady"} {
		t.Run(name, func(t *testing.T) {
			dir, truth, r := runScenario(t, name)
			require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)

			r = vramprof(t, execOpts{}, "report", dir, "--format", "perfetto", "-o", dir)
			assert.Equal(t, 2, r.code, "the recording's outputs are not replaced without --force")
			r = vramprof(t, execOpts{}, "report", dir, "--format", "perfetto", "-o", dir, "--force")
			require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
			assert.Empty(t, r.stdout, "with -o the trace goes to the file")
			path := filepath.Join(dir, "trace.perfetto.json")
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			assertDirHolds(t, dir, []string{"profile.pb.gz", "report.html", "report.json", "report.md", "trace.perfetto.json", "trace.vpt"})
			stdout := vramprof(t, execOpts{}, "report", dir, "--format", "perfetto")
			require.Equal(t, 0, stdout.code, "stderr:\n%s", stdout.stderr)
			assert.Equal(t, string(data), stdout.stdout, "stdout and the file hold the same trace")

			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
			require.NoError(t, err)
			require.NoError(t, schema.Validate(doc), "the Trace Event Format")

			d := json.NewDecoder(bytes.NewReader(data))
			d.UseNumber()
			var tr struct {
				TraceEvents []perfettoEvent `json:"traceEvents"`
				Metadata    struct {
					LostEvents uint64 `json:"lost_events"`
					Slices     struct{ Written, Omitted uint64 }
				} `json:"metadata"`
			}
			require.NoError(t, d.Decode(&tr))
			assert.Zero(t, tr.Metadata.LostEvents)

			series := map[string][]uint64{}
			open := map[string]bool{}
			var begun uint64
			for _, e := range tr.TraceEvents {
				switch e.Ph {
				case "C":
					if e.PID != truth.PID {
						continue
					}
					for k, v := range e.Args {
						n, err := strconv.ParseUint(string(v.(json.Number)), 10, 64)
						require.NoError(t, err, "exact byte integers")
						series[e.Name+" "+k] = append(series[e.Name+" "+k], n)
					}
				case "b":
					k := e.Name + "|" + e.ID2.Local
					require.False(t, open[k], "%s begun twice", k)
					open[k] = true
					begun++
				case "e":
					k := e.Name + "|" + e.ID2.Local
					require.True(t, open[k], "%s ended before it began", k)
					delete(open, k)
				}
			}
			assert.Empty(t, open, "every slice ends")
			assert.Equal(t, tr.Metadata.Slices.Written, begun)
			allocs := truth.Totals.Allocations
			if truth.Blocks != nil {
				allocs += truth.Blocks.Allocations
			}
			assert.Equal(t, allocs, tr.Metadata.Slices.Written+tr.Metadata.Slices.Omitted, "a slice per allocation, or counted")

			var devices []string
			for k := range series {
				if strings.HasSuffix(k, " live") {
					devices = append(devices, k)
				}
			}
			require.Equal(t, []string{"GPU 0 live"}, devices, "one device")
			check := func(name string, live, peak uint64) {
				s := series[name]
				require.NotEmpty(t, s, name)
				assert.Equal(t, live, s[len(s)-1], "%s: live at the end", name)
				m := uint64(0)
				for _, v := range s {
					m = max(m, v)
				}
				assert.Equal(t, peak, m, "%s: the peak", name)
			}
			check("GPU 0 live", truth.Totals.LiveBytesAtEnd, truth.Totals.PeakBytes)
			if truth.Blocks != nil {
				check("GPU 0 blocks", truth.Blocks.LiveBytesAtEnd, truth.Blocks.PeakAllocatedBytes)
			} else {
				assert.NotContains(t, series, "GPU 0 blocks")
			}
		})
	}
}
