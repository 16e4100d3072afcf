//go:build linux

package probes

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// TestScanStrippedRuntime: scanFile marks a file that holds the runtime
// without its symbols, and only such a file: a runtime with symbols is
// probed, a program or library without a runtime is nothing, the driver is
// probed.
func TestScanStrippedRuntime(t *testing.T) {
	specs := append(append([]probeSpec{}, cudaProbes...), loaderProbe)
	stripped := filepath.Join(t.TempDir(), "static_runtime.stripped")
	out, err := exec.Command("strip", "--strip-unneeded", "-o", stripped, probetest.Bin(t, "static_runtime")).CombinedOutput()
	require.NoError(t, err, "strip: %s", out)
	tests := []struct {
		name     string
		path     string
		nil      bool // nothing to probe, nothing to say
		stripped bool
	}{
		{name: "static runtime stripped", path: stripped, stripped: true},
		{name: "runtime symbols stripped", path: probetest.Bin(t, "driver_only"), stripped: true},
		{name: "static runtime", path: probetest.Bin(t, "static_runtime")},
		{name: "shared runtime", path: probetest.Lib(t, "libcudart.so.12")},
		{name: "driver", path: probetest.Lib(t, "libcuda.so.1")},
		{name: "no runtime", path: probetest.Bin(t, "steady"), nil: true},
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

// realNVIDIA returns the paths testdata/nvidia/fetch.sh prints, by base
// name; without them the test skips, or fails under CI=true.
func realNVIDIA(t *testing.T) map[string]string {
	t.Helper()
	cmd := exec.Command(filepath.Join(probetest.Root(), "testdata", "nvidia", "fetch.sh"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := "testdata/nvidia/fetch.sh: " + err.Error() + ": " + strings.TrimSpace(stderr.String())
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (CI=true: this test must run)")
		}
		t.Skip(msg)
	}
	paths := map[string]string{}
	for _, l := range strings.Fields(string(out)) {
		paths[filepath.Base(l)] = l
	}
	return paths
}

// TestScanRealPrivateRuntime: NVIDIA's own libraries link a private copy
// of the runtime in and strip it (here NPP's core, libnppc.so.11 from
// Debian's libnppc11, CUDA 11.8): scanFile marks it, and not NVIDIA's
// shared runtime, whose cudaMalloc it probes.
func TestScanRealPrivateRuntime(t *testing.T) {
	paths := realNVIDIA(t)
	specs := append(append([]probeSpec{}, cudaProbes...), loaderProbe)
	for _, tt := range []struct {
		name     string
		stripped bool
	}{
		{"libnppc.so.11", true},
		{"libcudart.so.11.0", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path, ok := paths[tt.name]
			require.True(t, ok, "fetch.sh printed %s: %v", tt.name, paths)
			pf, err := scanFile(candidate{Path: path, OpenPath: path}, specs, false, nil)
			require.NoError(t, err)
			require.NotNil(t, pf)
			assert.Equal(t, tt.stripped, pf.StrippedRuntime, "StrippedRuntime")
			if tt.stripped {
				assert.Empty(t, pf.cudaSymbols())
			} else {
				assert.Contains(t, pf.cudaSymbols(), "cudaMalloc")
			}
		})
	}
}
