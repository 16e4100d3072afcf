//go:build linux

package main

import (
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// blockTruth is the block-layer part of a pool scenario's truth (see
// testdata/README.md, "The block layer").
type blockTruth struct {
	Blocks struct {
		LiveBytesAtEnd uint64 `json:"live_bytes_at_end"`
	} `json:"blocks"`
	ByFunctionBlocks map[string]struct {
		Allocations    uint64 `json:"allocations"`
		LiveBytesAtEnd uint64 `json:"live_bytes_at_end"`
	} `json:"by_function_blocks"`
	Calls []struct {
		API    string `json:"api"`
		TimeNs uint64 `json:"t_ns"`
	} `json:"calls"`
	BlockCalls []struct {
		API     string `json:"api"`
		Func    string `json:"func"`
		TimeNs  uint64 `json:"t_ns"`
		Outcome string `json:"outcome"`
	} `json:"block_calls"`
}

// steps returns the truth's steps paced by fn: the times of every per-th
// successful c10_alloc fn made (its first in each step).
func (b *blockTruth) steps(fn string, per int) []uint64 {
	var out []uint64
	n := 0
	for _, c := range b.BlockCalls {
		if c.Func == fn && c.API == "c10_alloc" && c.Outcome == "ok" {
			if n%per == 0 {
				out = append(out, c.TimeNs)
			}
			n++
		}
	}
	return out
}

// medianGap is the median time between consecutive starts.
func medianGap(starts []uint64) uint64 {
	var gaps []uint64
	for i := 1; i < len(starts); i++ {
		gaps = append(gaps, starts[i]-starts[i-1])
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	return gaps[len(gaps)/2]
}

// leakRuleReport is the part of report.json the leak rule's tests read.
type leakRuleReport struct {
	Iterations []struct {
		Count    uint64 `json:"count"`
		PeriodNs uint64 `json:"period_ns"`
		Site     string `json:"site"`
	} `json:"iterations"`
	Findings []struct {
		Kind     string `json:"kind"`
		Severity string `json:"severity"`
		Summary  string `json:"summary"`
		Bytes    uint64 `json:"bytes"`
		Stacks   []struct {
			Site  string `json:"site"`
			Bytes uint64 `json:"bytes"`
			Count uint64 `json:"count"`
		} `json:"stacks"`
	} `json:"findings"`
}

// runPoolScenario profiles a pool scenario with `vramprof run` and extra
// flags; it returns report.json and the truth.
func runPoolScenario(t *testing.T, name string, flags []string, env ...string) (*leakRuleReport, *blockTruth) {
	t.Helper()
	tmp := t.TempDir()
	truthPath, out := filepath.Join(tmp, "truth.json"), filepath.Join(tmp, "out")
	args := append(append([]string{"run"}, flags...), "-o", out, "--", probetest.Bin(t, name))
	r := vramprof(t, execOpts{env: append(env, "VRAMPROF_TRUTH="+truthPath), dir: tmp}, args...)
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	return mustReadJSON[leakRuleReport](t, filepath.Join(out, "report.json")), mustReadJSON[blockTruth](t, truthPath)
}

// TestRunLeakInCache: pool_leak_cached leaks one 1 MiB tensor per step at
// leak_step into cached segments that backward's allocations grow. The
// tensors decide: one leak, at leak_step, of exactly the leaked blocks'
// bytes (the truth's by_function_blocks), none at backward or at the
// allocator's alloc_block; the loop is the truth's steps (40 of about
// 20 ms), read from the blocks, not from the segments (one every other
// step). The same with empty_cache() at the end (the leaked blocks keep
// their segments).
func TestRunLeakInCache(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"cached", nil},
		{"empty_cache at the end", []string{"POOL_LEAK_EMPTY_CACHE=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, truth := runPoolScenario(t, "pool_leak_cached", nil, tc.env...)
			leaked := truth.ByFunctionBlocks["leak_step"]
			require.Equal(t, uint64(40), leaked.Allocations, "truth: one block per step at leak_step")
			require.Equal(t, uint64(40<<20), leaked.LiveBytesAtEnd, "truth: 40 blocks of 1 MiB kept")
			require.Equal(t, leaked.LiveBytesAtEnd, truth.Blocks.LiveBytesAtEnd, "truth: nothing else live")

			var leaks []int
			for i, f := range rep.Findings {
				if f.Kind == "leak" {
					leaks = append(leaks, i)
				}
			}
			require.Len(t, leaks, 1, "one leak: %+v", rep.Findings)
			f := rep.Findings[leaks[0]]
			require.NotEmpty(t, f.Stacks)
			assert.Equal(t, "leak_step", frameFunction(f.Stacks[0].Site), "the leak is at the tensors' site")
			assert.Equal(t, leaked.LiveBytesAtEnd, f.Bytes, "the leaked blocks' bytes")
			assert.Equal(t, leaked.LiveBytesAtEnd, f.Stacks[0].Bytes)
			assert.Equal(t, leaked.Allocations, f.Stacks[0].Count)
			for _, g := range rep.Findings {
				if g.Kind == "cache_growth" {
					assert.Equal(t, "info", g.Severity, "the cache is said as such, never above info")
				}
			}

			// The steps: forward allocates 3 tensors first in each.
			starts := truth.steps("forward", 3)
			require.Len(t, starts, 40)
			require.Len(t, rep.Iterations, 1)
			it := rep.Iterations[0]
			assert.Equal(t, uint64(len(starts)), it.Count, "iterations")
			assert.InEpsilon(t, float64(medianGap(starts)), float64(it.PeriodNs), 0.10, "period")
		})
	}
}

// TestRunWarmHealthy: pool_warm_healthy makes its weights and optimizer
// state once, then 400 steps whose activations come and go, sizes growing
// until step 40 and repeating after; its cache grows in the first 40
// steps (the truth's last cudaMalloc) and stays flat for the other 360,
// kept to the exit. Nothing leaks (truth: no block live at the end): no
// leak and no finding above info, with the block layer and with --pool
// off (the segments' growth stopped in the first tenth of the run). With
// the block layer, the loop is the truth's 400 steps, at their period;
// the cache is said once, as a cache_growth finding.
func TestRunWarmHealthy(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"blocks", nil},
		{"pool off", []string{"--pool", "off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, truth := runPoolScenario(t, "pool_warm_healthy", tc.flags)
			require.Zero(t, truth.Blocks.LiveBytesAtEnd, "truth: every tensor freed")
			starts := truth.steps("forward", 3)
			require.Len(t, starts, 400, "truth: 3 activations per step")
			var lastSegment uint64
			for _, c := range truth.Calls {
				if c.API == "cudaMalloc" {
					lastSegment = c.TimeNs
				}
			}
			require.Less(t, lastSegment, starts[40], "truth: the cache grows in the first 40 steps only")
			cache := 0
			for _, f := range rep.Findings {
				assert.NotEqual(t, "leak", f.Kind, "no leak: %s", f.Summary)
				assert.Equal(t, "info", f.Severity, "%s: %s", f.Kind, f.Summary)
				if f.Kind == "cache_growth" {
					cache++
				}
			}
			if tc.flags != nil {
				assert.Zero(t, cache, "no cache finding without the block layer")
				return
			}
			assert.Equal(t, 1, cache, "the cache is said once")
			require.Len(t, rep.Iterations, 1)
			it := rep.Iterations[0]
			assert.Equal(t, uint64(400), it.Count, "iterations")
			assert.InEpsilon(t, float64(medianGap(starts)), float64(it.PeriodNs), 0.10, "period")
		})
	}
}
