//go:build linux

package main

// End-to-end tests of the findings added for issue 4: pinned host growth,
// device imbalance, and the iterations section. Expected figures come from
// the scenarios' truth (their calls[], devices, by_function), with the
// arithmetic shown here.

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// hostLiveByFunction replays a truth's calls[] for pinned host memory: the
// bytes each function pinned (cudaMallocHost, cudaHostAlloc, cuMemHostAlloc,
// cuMemAllocHost_v2) and had not freed (cudaFreeHost, cuMemFreeHost) at the
// end.
func hostLiveByFunction(truth *probetest.Truth) map[string]uint64 {
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
func hostAllocsByFunction(truth *probetest.Truth) map[string]uint64 {
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
	probetest.RequirePrivilege(t)
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

// rankTruth is what a process of a tree says about its devices and
// functions.
type rankTruth struct {
	PID        uint32                        `json:"pid"`
	Children   []uint32                      `json:"children"`
	Devices    map[string]covTruthDev        `json:"devices"`
	ByFunction map[string]probetest.Function `json:"by_function"`
}

// TestDeviceImbalance: imbalance's rank 0 gathers a checkpoint on device 0
// that rank 1 never holds. The finding's bytes are the heaviest device's
// peak minus the lightest's, both from the ranks' truth files, and its
// stacks are the functions whose bytes at the heavy device's peak exceed
// the light one's (live_bytes_at_peak of the rank on each: each rank is
// alone on its device, so its peak is its device's). Balanced or small
// differences (four_devices: 53 MiB, launcher: 21 MiB, steady: one device)
// make none.
func TestDeviceImbalance(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"imbalance", true},
		{"four_devices", false},
		{"launcher", false},
		{"steady", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, _, r := runScenario(t, tc.name)
			require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
			rep := mustReadReport(t, filepath.Join(dir, "report.json"))
			var got []int
			for i, f := range rep.Findings {
				if f.Kind == "device_imbalance" {
					got = append(got, i)
				}
			}
			if !tc.want {
				assert.Empty(t, got, "no device imbalance in %s", tc.name)
				return
			}
			require.Len(t, got, 1)
			f := rep.Findings[got[0]]

			base := filepath.Join(filepath.Dir(dir), "truth.json")
			root := mustReadJSON[rankTruth](t, base)
			require.Len(t, root.Children, 2, "truth: two ranks")
			var heavy, light *rankTruth
			var heavyPeak, lightPeak uint64
			for _, pid := range root.Children {
				rk := mustReadJSON[rankTruth](t, fmt.Sprintf("%s.%d", base, pid))
				require.Len(t, rk.Devices, 1, "truth: a rank uses one device")
				for _, d := range rk.Devices {
					if heavy == nil || d.PeakBytes > heavyPeak {
						heavy, heavyPeak = rk, d.PeakBytes
					}
					if light == nil || d.PeakBytes < lightPeak {
						light, lightPeak = rk, d.PeakBytes
					}
				}
			}
			require.NotSame(t, heavy, light)
			assert.Equal(t, heavyPeak-lightPeak, f.Bytes, "max peak - min peak")
			want := map[string]uint64{}
			for fn, h := range heavy.ByFunction {
				if l := light.ByFunction[fn].LiveBytesAtPeak; h.LiveBytesAtPeak > l {
					want[fn] = h.LiveBytesAtPeak - l
				}
			}
			// imbalance.c: only gather_checkpoint, 768 MiB + 123 bytes.
			require.Equal(t, map[string]uint64{"gather_checkpoint": 768<<20 + 123}, want, "truth: the difference")
			gotStacks := map[string]uint64{}
			for _, s := range f.Stacks {
				gotStacks[frameFunction(s.Site)] += s.Bytes
			}
			assert.Equal(t, want, gotStacks, "stacks that make the difference")
			assert.Contains(t, f.Summary, "none at device")
		})
	}
}

// TestIterationsSection: report.json's iterations for the leak scenario
// (scenarios/leak.c: ITERATIONS = 100, forward's 4 allocations first in
// each). Its truth's calls[] give the rest: the period is the median time
// between the first forward call of consecutive iterations, and a
// complete iteration allocates, on average, every byte allocated from the
// first iteration's first call to the last iteration's first call, over 99.
func TestIterationsSection(t *testing.T) {
	probetest.RequirePrivilege(t)
	dir, truth, r := runScenario(t, "leak")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	type iterations struct {
		PID                         uint32   `json:"pid"`
		Count                       uint64   `json:"count"`
		PeriodNs                    uint64   `json:"period_ns"`
		Site                        string   `json:"site"`
		AllocatedBytesPerIteration  *float64 `json:"allocated_bytes_per_iteration"`
		LiveGrowthBytesPerIteration *float64 `json:"live_growth_bytes_per_iteration"`
	}
	rep := mustReadJSON[struct {
		Iterations []iterations `json:"iterations"`
	}](t, filepath.Join(dir, "report.json"))
	require.Len(t, rep.Iterations, 1)
	it := rep.Iterations[0]
	assert.Equal(t, truth.PID, it.PID)
	assert.Equal(t, uint64(100), it.Count, "leak.c's ITERATIONS")
	assert.Equal(t, "forward", frameFunction(it.Site), "forward allocates first in each iteration")

	// Truth: the index of each iteration's first forward call.
	var starts []int
	n := 0
	for i, c := range truth.Calls {
		if c.Func == "forward" && c.API == "cudaMalloc" {
			if n%4 == 0 {
				starts = append(starts, i)
			}
			n++
		}
	}
	require.Len(t, starts, 100, "truth: 4 forward allocations per iteration")
	var gaps []uint64
	for k := 1; k < len(starts); k++ {
		gaps = append(gaps, truth.Calls[starts[k]].TimeNs-truth.Calls[starts[k-1]].TimeNs)
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	period := gaps[len(gaps)/2]
	// The truth stamps each call just after it returned, the probes at its
	// return too: the same clock, a few µs apart.
	assert.InEpsilon(t, float64(period), float64(it.PeriodNs), 0.10, "period: truth's median %d ns", period)

	var allocated uint64
	for _, c := range truth.Calls[starts[0]:starts[99]] {
		if c.API == "cudaMalloc" && c.Outcome == "ok" {
			allocated += c.Size
		}
	}
	if assert.NotNil(t, it.AllocatedBytesPerIteration) {
		assert.InDelta(t, float64(allocated)/99, *it.AllocatedBytesPerIteration, 1e-6, "allocated per iteration")
	}
	// The loop's live bytes grow by what cache_activations keeps: its live
	// bytes at the end over 100 iterations, within 1% (a least-squares
	// slope of 1 MiB + 4096 i).
	if assert.NotNil(t, it.LiveGrowthBytesPerIteration) {
		assert.InEpsilon(t, float64(truth.ByFunction["cache_activations"].LiveBytesAtEnd)/100, *it.LiveGrowthBytesPerIteration, 0.01)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "100 iterations of")
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	require.NoError(t, err)
	assert.Contains(t, string(html), "100 iterations of")
}
