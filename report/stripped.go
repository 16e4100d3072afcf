package report

import (
	"fmt"
	"strings"

	"github.com/vramprof/vramprof/analysis"
)

// maxStrippedLines is how many stripped-runtime lines the terminal summary
// prints; the report lists them all.
const maxStrippedLines = 2

// strippedRuntimeLines says, one line per file, which traced files hold a
// CUDA runtime linked in statically with its symbols stripped
// (event.Library.StrippedRuntime): what vramprof cannot see there, and
// whether the driver's probes saw the calls instead.
func strippedRuntimeLines(run *analysis.Run) []string {
	var out []string
	for _, l := range run.Libraries {
		if !l.StrippedRuntime {
			continue
		}
		driver := "the driver probes (libcuda.so.1) still see them when a driver is present; none was loaded"
		if driverProbed(run, l.PID) {
			driver = "the driver's calls under them (libcuda.so.1) are traced instead"
		}
		out = append(out, fmt.Sprintf("pid %d: %s has a statically linked, stripped CUDA runtime: its cudaMalloc calls cannot be probed; %s",
			l.PID, l.Path, driver))
	}
	return out
}

// driverProbed reports whether a driver function (cuMemAlloc_v2...) was
// probed in a file process pid maps.
func driverProbed(run *analysis.Run, pid uint32) bool {
	for _, l := range run.Libraries {
		if l.PID != pid {
			continue
		}
		for _, s := range l.Symbols {
			if strings.HasPrefix(s, "cu") && !strings.HasPrefix(s, "cuda") {
				return true
			}
		}
	}
	return false
}
