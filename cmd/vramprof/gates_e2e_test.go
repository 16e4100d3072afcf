//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/scenario"
)

// TestFailedPitchedRequest: managed_pinned's pitched_too_big asks
// cudaMallocPitch for 1000 x 2^30 and cudaMalloc3D for {700, 2^20, 1024},
// both beyond the device. A failed pitched request counts what was asked
// for, width x height [x depth] (before: 0 bytes, the pitch being unknown).
func TestFailedPitchedRequest(t *testing.T) {
	scenario.RequirePrivilege(t)
	dir, truth, r := runScenario(t, "managed_pinned")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	var want uint64
	var failed int
	for _, c := range truth.Calls {
		if c.Outcome == "failed" {
			failed++
			want += c.Size
		}
	}
	require.Equal(t, 2, failed, "truth: two failed pitched requests")
	require.Equal(t, uint64(1000<<30+700<<30), want, "truth: the requests' bytes")
	data, err := os.ReadFile(filepath.Join(dir, "report.json"))
	require.NoError(t, err)
	var rep struct {
		Totals struct {
			FailedAllocations uint64 `json:"failed_allocations"`
			FailedBytes       uint64 `json:"failed_bytes"`
		} `json:"totals"`
	}
	require.NoError(t, json.Unmarshal(data, &rep))
	assert.EqualValues(t, failed, rep.Totals.FailedAllocations, "failed_allocations")
	assert.Equal(t, want, rep.Totals.FailedBytes, "failed_bytes: width x height [x depth]")
}
