//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
	"github.com/vramprof/vramprof/report/perfettotest"
)

// TestReportPerfetto records scenarios with `vramprof run -o DIR`, writes
// their Perfetto traces with `vramprof report DIR --format perfetto -o DIR`
// (and to stdout: the same bytes), validates them against the Trace Event
// Format's schema and the promises of every trace (report/perfettotest)
// and holds their counters to the programs' own truth: the last point of
// the process's "GPU 0 live" series is what the program still held, its
// largest the program's peak; "GPU 0 blocks" likewise for the caching
// allocator's blocks. Every allocation is a slice, written or counted as
// left out.
func TestReportPerfetto(t *testing.T) {
	probetest.RequirePrivilege(t)
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

			perfettotest.Validate(t, data)
			tr := perfettotest.Parse(t, data)
			assert.Zero(t, tr.Metadata.LostEvents)
			counters := tr.Counters(t)
			series := map[string]*perfettotest.Series{}
			for k, s := range counters {
				if k.PID == truth.PID {
					series[k.Name] = s
				}
			}
			slices := tr.Slices(t)
			assert.EqualValues(t, tr.Metadata.Slices.Written, len(slices))
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
				require.NotNil(t, s, name)
				assert.Equal(t, live, s.Last(), "%s: live at the end", name)
				assert.Equal(t, peak, s.Max(), "%s: the peak", name)
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
