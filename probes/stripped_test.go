//go:build linux

package probes

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/scenario"
)

// TestScanStrippedRuntime: scanFile marks a file that holds the runtime
// without its symbols, and only such a file: a runtime with symbols is
// probed, a program or library without a runtime is nothing, the driver is
// probed.
func TestScanStrippedRuntime(t *testing.T) {
	specs := append(append([]probeSpec{}, cudaProbes...), loaderProbe)
	stripped := filepath.Join(t.TempDir(), "static_runtime.stripped")
	out, err := exec.Command("strip", "--strip-unneeded", "-o", stripped, scenario.Bin(t, "static_runtime")).CombinedOutput()
	require.NoError(t, err, "strip: %s", out)
	tests := []struct {
		name     string
		path     string
		nil      bool // nothing to probe, nothing to say
		stripped bool
	}{
		{name: "static runtime stripped", path: stripped, stripped: true},
		{name: "runtime symbols stripped", path: scenario.Bin(t, "driver_only"), stripped: true},
		{name: "static runtime", path: scenario.Bin(t, "static_runtime")},
		{name: "shared runtime", path: scenario.Lib(t, "libcudart.so.12")},
		{name: "driver", path: scenario.Lib(t, "libcuda.so.1")},
		{name: "no runtime", path: scenario.Bin(t, "steady"), nil: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pf, err := scanFile(candidate{Path: tt.path, OpenPath: tt.path}, specs, false, nil)
			require.NoError(t, err)
			if tt.nil {
				assert.Nil(t, pf)
				return
			}
			require.NotNil(t, pf)
			assert.Equal(t, tt.stripped, pf.StrippedRuntime, "StrippedRuntime")
			if tt.stripped {
				assert.Empty(t, pf.cudaSymbols(), "nothing of the runtime can be probed")
			} else {
				assert.NotEmpty(t, pf.cudaSymbols())
			}
		})
	}
}
