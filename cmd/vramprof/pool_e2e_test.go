//go:build linux

package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
	"github.com/vramprof/vramprof/report"
)

// poolReport is the part of report.json the block-layer tests read.
type poolReport struct {
	Totals struct {
		Allocations       uint64 `json:"allocations"`
		FailedAllocations uint64 `json:"failed_allocations"`
		Frees             uint64 `json:"frees"`
		PeakBytes         uint64 `json:"peak_bytes"`
		LiveBytesAtEnd    uint64 `json:"live_bytes_at_end"`
		LostEvents        uint64 `json:"lost_events"`
		// LostCauses says why, in a failure's message.
		LostCauses *report.JSONLostCauses `json:"lost_causes"`
	} `json:"totals"`
	Blocks *struct {
		Allocations        uint64 `json:"allocations"`
		Frees              uint64 `json:"frees"`
		FailedAllocations  uint64 `json:"failed_allocations"`
		AllocatedBytes     uint64 `json:"allocated_bytes"`
		PeakAllocatedBytes uint64 `json:"peak_allocated_bytes"`
		LiveBytesAtEnd     uint64 `json:"live_bytes_at_end"`
	} `json:"blocks"`
	Libraries []struct {
		Path    string   `json:"path"`
		Symbols []string `json:"symbols"`
	} `json:"libraries"`
}

func readPoolReport(t *testing.T, dir string) *poolReport {
	t.Helper()
	return mustReadJSON[poolReport](t, filepath.Join(dir, "report.json"))
}

// TestRunBlockLayer profiles a caching allocator over the fake runtime: the
// block layer comes from its USDT probes (pytorch:malloc and pytorch:free,
// guarded by semaphores that only a tracer raises), the segment layer from
// the CUDA API underneath. Both equal the allocator's own truth; with
// --pool off the block layer is absent.
func TestRunBlockLayer(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tc := range []struct {
		name string
		exit int
	}{
		{"pool_retry", 0},          // a cudaMalloc fails, the cache is freed, the retry works
		{"pool_empty_cache", 0},    // empty_cache every step: segment churn
		{"pool_frag_oom", 1},       // the final request fails: fragmentation
		{"pool_capacity_oom", 1},   // the final request fails: capacity
		{"pool_frag_worst", 1},     // two requests fail, the second with more cached free
		{"pool_expandable_oom", 1}, // expandable segments: pages (cuMemCreate) fail
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, truth, r := runScenario(t, tc.name)
			require.Equal(t, tc.exit, r.code, "stderr:\n%s", r.stderr)
			require.NotNil(t, truth.Blocks)
			rep := readPoolReport(t, dir)
			require.NotNil(t, rep.Blocks)
			// pytorch:malloc fires only for a block handed out: a failed
			// request shows at the segment layer (its failed cudaMalloc),
			// not as a failed block.
			want := *truth.Blocks
			want.FailedAllocations = 0
			assert.Equal(t, want, probetest.Blocks(*rep.Blocks), "blocks")
			assert.Equal(t, truth.Totals.Allocations, rep.Totals.Allocations, "segment allocations")
			assert.Equal(t, truth.Totals.FailedAllocations, rep.Totals.FailedAllocations, "failed segment allocations")
			assert.Equal(t, truth.Totals.PeakBytes, rep.Totals.PeakBytes, "segment peak")
			assert.Equal(t, truth.Totals.LiveBytesAtEnd, rep.Totals.LiveBytesAtEnd, "segment live at end")
		})
	}

	dir, truth, r := runScenario(t, "pool_steady")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	require.NotNil(t, truth.Blocks, "pool_steady's truth has blocks")
	rep := readPoolReport(t, dir)

	require.NotNil(t, rep.Blocks, "report.json has the blocks section")
	b, want := rep.Blocks, truth.Blocks
	assert.Equal(t, want.Allocations, b.Allocations, "block allocations")
	assert.Equal(t, want.Frees, b.Frees, "block frees")
	assert.Equal(t, want.FailedAllocations, b.FailedAllocations, "failed block allocations")
	assert.Equal(t, want.AllocatedBytes, b.AllocatedBytes, "block bytes allocated")
	assert.Equal(t, want.PeakAllocatedBytes, b.PeakAllocatedBytes, "block peak")
	assert.Equal(t, want.LiveBytesAtEnd, b.LiveBytesAtEnd, "block bytes live at end")

	// The segments the allocator got from CUDA: counted once, apart.
	assert.Equal(t, truth.Totals.Allocations, rep.Totals.Allocations, "segment allocations")
	assert.Equal(t, truth.Totals.Frees, rep.Totals.Frees, "segment frees")
	assert.Equal(t, truth.Totals.PeakBytes, rep.Totals.PeakBytes, "segment peak")
	assert.Equal(t, truth.Totals.LiveBytesAtEnd, rep.Totals.LiveBytesAtEnd, "segment live at end")
	assert.Zero(t, rep.Totals.LostEvents)

	var usdtSyms []string
	for _, l := range rep.Libraries {
		if filepath.Base(l.Path) == "libc10_cuda.so" {
			usdtSyms = l.Symbols
		}
	}
	assert.Subset(t, usdtSyms, []string{"pytorch:malloc", "pytorch:free"}, "libc10_cuda.so's probes are listed")
	checkReplay(t, dir)

	t.Run("pool off", func(t *testing.T) {
		tmp := t.TempDir()
		out := filepath.Join(tmp, "out")
		r := vramprof(t, execOpts{dir: tmp, env: []string{"VRAMPROF_TRUTH=" + filepath.Join(tmp, "truth.json")}},
			"run", "--pool", "off", "-o", out, "--", probetest.Bin(t, "pool_steady"))
		require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
		rep := readPoolReport(t, out)
		assert.Nil(t, rep.Blocks, "no block layer with --pool off")
		assert.Equal(t, truth.Totals.Allocations, rep.Totals.Allocations, "segments still traced")
	})
}
