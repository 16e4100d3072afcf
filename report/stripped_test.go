package report

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

// TestStrippedRuntime: a file with a stripped runtime is said in one line
// in every rendering, saying whether the driver was probed instead; a run
// without one says nothing of it.
func TestStrippedRuntime(t *testing.T) {
	header := &event.Header{Version: 1, Tool: "vramprof 0.1.0", Mode: "run", PID: 300, Start: sec}
	proc := &event.Process{PID: 300, Command: []string{"/opt/app/serve"}, Time: sec}
	stripped := &event.Library{PID: 300, Path: "/opt/app/serve", StrippedRuntime: true}
	driver := &event.Library{PID: 300, Path: "/usr/lib/libcuda.so.1", Symbols: []string{"cuMemAlloc_v2", "cuMemFree_v2"}}
	end := &event.End{Time: 2 * sec, Reason: "exited"}
	const prefix = "pid 300: /opt/app/serve has a statically linked, stripped CUDA runtime: its cudaMalloc calls cannot be probed; "
	for _, tc := range []struct {
		name string
		recs []event.Record
		want string
	}{
		{"no driver", []event.Record{header, proc, stripped, end},
			prefix + "the driver probes (libcuda.so.1) still see them when a driver is present; none was loaded"},
		{"driver", []event.Record{header, proc, stripped, driver, end},
			prefix + "the driver's calls under them (libcuda.so.1) are traced instead"},
		{"none", []event.Record{header, proc, driver, end}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := mustResult(t, tc.recs)
			for name, w := range map[string]func(io.Writer, *analysis.Result) error{
				"summary": WriteSummary, "markdown": WriteMarkdown, "html": WriteHTML,
			} {
				var buf bytes.Buffer
				require.NoError(t, w(&buf, res))
				n := strings.Count(buf.String(), "stripped CUDA runtime")
				if tc.want == "" {
					assert.Zero(t, n, name)
					continue
				}
				assert.Equal(t, 1, n, "%s:\n%s", name, buf.String())
				if name == "summary" {
					assert.Contains(t, buf.String(), "\nnote:               "+tc.want+"\n")
				}
			}
			j := decodeJSON(t, res)
			run := j["run"].(map[string]any)
			libs := j["libraries"].([]any)
			if tc.want == "" {
				assert.NotContains(t, run, "stripped_runtimes")
				return
			}
			assert.Equal(t, []any{tc.want}, run["stripped_runtimes"])
			assert.Equal(t, true, libs[0].(map[string]any)["stripped_runtime"])
		})
	}
}
