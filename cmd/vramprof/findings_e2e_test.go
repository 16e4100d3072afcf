//go:build linux

package main

// End-to-end tests of the findings added for issue 4: pinned host growth,
// device imbalance, and the iterations section. Expected figures come from
// the scenarios' truth (their calls[], devices, by_function), with the
// arithmetic shown here.

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/scenario"
)

// hostLiveByFunction replays a truth's calls[] for pinned host memory: the
// bytes each function pinned (cudaMallocHost, cudaHostAlloc, cuMemHostAlloc,
// cuMemAllocHost_v2) and had not freed (cudaFreeHost, cuMemFreeHost) at the
// end.
func hostLiveByFunction(truth *scenario.Truth) map[string]uint64 {
	type pinned struct {
		fn   string
		size uint64
	}
	live := map[uint64]pinned{}
	for _, c := range truth.Calls {
		if c.Outcome != "ok" {
			continue
		}
		switch c.API {
		case "cudaMallocHost", "cudaHostAlloc", "cuMemHostAlloc", "cuMemAllocHost_v2":
			live[c.Ptr] = pinned{c.Func, c.Size}
		case "cudaFreeHost", "cuMemFreeHost":
			delete(live, c.Ptr)
		}
	}
	out := map[string]uint64{}
	for _, p := range live {
		out[p.fn] += p.size
	}
	return out
}

// hostAllocsByFunction counts each function's successful pinned host
// allocations in calls[].
func hostAllocsByFunction(truth *scenario.Truth) map[string]uint64 {
	out := map[string]uint64{}
	for _, c := range truth.Calls {
		switch c.API {
		case "cudaMallocHost", "cudaHostAlloc", "cuMemHostAlloc", "cuMemAllocHost_v2":
			if c.Outcome == "ok" {
				out[c.Func]++
			}
		}
	}
	return out
}

// TestPinnedHostGrowth: pinned_growth pins a new batch buffer in pin_batch
// every iteration and never frees it; alloc_staging pins once before the
// loop (freed in teardown) and copy_staging pins and frees each iteration.
// The finding names pin_batch with its growth over the loop: all it had
// live at the end, since it pinned nothing before the first iteration.
// Steady scenarios have no such finding.
func TestPinnedHostGrowth(t *testing.T) {
	scenario.RequirePrivilege(t)
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"pinned_growth", true},
		{"managed_pinned", false},
		{"steady", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, truth, r := runScenario(t, tc.name)
			require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
			rep := mustReadReport(t, filepath.Join(dir, "report.json"))
			var got []int
			for i, f := range rep.Findings {
				if f.Kind == "pinned_host_growth" {
					got = append(got, i)
				}
			}
			if !tc.want {
				assert.Empty(t, got, "no pinned host growth in %s", tc.name)
				return
			}
			require.Len(t, got, 1)
			f := rep.Findings[got[0]]
			live := hostLiveByFunction(truth)
			// pinned_growth.c: pin_batch keeps 50 buffers of 2 MiB + 4096.
			require.Equal(t, map[string]uint64{"pin_batch": 50 * (2<<20 + 4096)}, live, "truth: what stayed pinned")
			assert.Equal(t, live["pin_batch"], f.Bytes, "growth = pin_batch's pinned bytes at the end")
			require.Len(t, f.Stacks, 1, "only pin_batch grows")
			assert.Equal(t, "pin_batch", frameFunction(f.Stacks[0].Site))
			assert.Equal(t, live["pin_batch"], f.Stacks[0].Bytes)
			if assert.NotNil(t, f.Leak, "growth evidence") {
				// One buffer per iteration, pinned after the loop's first
				// allocation (forward): the slope at the iteration
				// boundaries is exactly one buffer.
				n := hostAllocsByFunction(truth)["pin_batch"]
				assert.Equal(t, n, f.Leak.Iterations, "iterations: one pin_batch call each")
				assert.InDelta(t, float64(live["pin_batch"])/float64(n), f.Leak.BytesPerIteration, 1e-6, "bytes per iteration")
				assert.Greater(t, f.Leak.BytesPerMinute, 0.0)
			}
			// Host memory never enters device figures: device totals are
			// the truth's device totals, and no leak is reported.
			assert.Equal(t, truth.Totals.LiveBytesAtEnd, val(t, "live_bytes_at_end", rep.Totals.LiveBytesAtEnd))
			for _, f := range rep.Findings {
				assert.NotEqual(t, "leak", f.Kind, "device memory does not leak here")
			}
		})
	}
}
