//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gprofile "github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// truthPoolRecord is the allocator state the scenarios record at a failed
// cudaMalloc (truth's fragmentation[] and retries[]) and report.json's
// fragmentation[].ooms[].state, under their own names.
type truthPoolRecord struct {
	Func             string `json:"func"`
	Requested        uint64 `json:"requested"`
	SegmentSize      uint64 `json:"segment_size"`
	ReservedBytes    uint64 `json:"reserved_bytes"`
	AllocatedBytes   uint64 `json:"allocated_bytes"`
	CachedFreeBytes  uint64 `json:"cached_free_bytes"`
	LargestFreeRange uint64 `json:"largest_free_range"`
	Segments         int    `json:"segments"`
	ReleasedBytes    uint64 `json:"released_bytes"`
	ReleasedSegments int    `json:"released_segments"`
	Outcome          string `json:"outcome"`
	OOMKind          string `json:"oom_kind"`
}

type truthForensics struct {
	Fragmentation []truthPoolRecord `json:"fragmentation"`
	Retries       []truthPoolRecord `json:"retries"`
	Blocks        struct {
		EmptyCacheCalls uint64 `json:"empty_cache_calls"`
	} `json:"blocks"`
	Calls []struct {
		API     string `json:"api"`
		Func    string `json:"func"`
		Size    uint64 `json:"size"`
		Outcome string `json:"outcome"`
		Retry   bool   `json:"retry"`
	} `json:"calls"`
}

type reportForensics struct {
	Fragmentation []struct {
		Device string `json:"device"`
		OOMs   []struct {
			Index            int    `json:"index"`
			RequestBytes     uint64 `json:"request_bytes"`
			Kind             string `json:"oom_kind"`
			Outcome          string `json:"outcome"`
			ReleasedBytes    uint64 `json:"released_bytes"`
			ReleasedSegments int    `json:"released_segments"`
			Site             string `json:"site"`
			Profile          string `json:"profile"`
			State            struct {
				ReservedBytes    uint64 `json:"reserved_bytes"`
				AllocatedBytes   uint64 `json:"allocated_bytes"`
				CachedFreeBytes  uint64 `json:"cached_free_bytes"`
				LargestFreeRange uint64 `json:"largest_free_range"`
				Segments         int    `json:"segments"`
			} `json:"state"`
		} `json:"ooms"`
	} `json:"fragmentation"`
	Findings []struct {
		Kind        string        `json:"kind"`
		Severity    string        `json:"severity"`
		Bytes       uint64        `json:"bytes"`
		Summary     string        `json:"summary"`
		Remediation []string      `json:"remediation"`
		Stacks      []ReportStack `json:"stacks"`
		Churn       *struct {
			Allocs     uint64 `json:"allocs"`
			Frees      uint64 `json:"frees"`
			Cycles     uint64 `json:"cycles"`
			CycleBytes uint64 `json:"cycle_bytes"`
		} `json:"churn"`
	} `json:"findings"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, v))
}

// runForensics runs a pool scenario and reads both sides.
func runForensics(t *testing.T, name string, exit int) (string, *truthForensics, *reportForensics) {
	t.Helper()
	tmp := t.TempDir()
	truthPath := filepath.Join(tmp, "truth.json")
	dir := filepath.Join(tmp, "out")
	r := vramprof(t, execOpts{env: []string{"VRAMPROF_TRUTH=" + truthPath}, dir: tmp}, "run", "-o", dir, "--", probetest.Bin(t, name))
	require.Equal(t, exit, r.code, "stderr:\n%s", r.stderr)
	var truth truthForensics
	readJSON(t, truthPath, &truth)
	var rep reportForensics
	readJSON(t, filepath.Join(dir, "report.json"), &rep)
	return dir, &truth, &rep
}

func findingsOf(rep *reportForensics, kind string) []int {
	var out []int
	for i, f := range rep.Findings {
		if f.Kind == kind {
			out = append(out, i)
		}
	}
	return out
}

// TestOOMForensics compares the allocator geometry at each failed
// cudaMalloc with the allocator's own record (the truth's fragmentation[]
// for a final OOM, retries[] for every failure, both taken before the
// free-all), and checks the findings and oom-<n>.pb.gz.
func TestOOMForensics(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tc := range []struct {
		name    string
		exit    int
		kind    string // truth's oom_kind; "" for a retry that succeeded
		outcome string
	}{
		{"pool_frag_oom", 1, "fragmentation", "final"},
		{"pool_capacity_oom", 1, "capacity", "final"},
		{"pool_retry", 0, "", "retry_succeeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, truth, rep := runForensics(t, tc.name, tc.exit)
			require.Len(t, truth.Retries, 1)
			want := truth.Retries[0]
			require.Len(t, rep.Fragmentation, 1)
			require.Len(t, rep.Fragmentation[0].OOMs, 1, "the retry belongs to its failure")
			got := rep.Fragmentation[0].OOMs[0]
			// The analysis sees the failing cudaMalloc's size: the
			// segment, not the tensor's request (equal here, >= 10 MiB).
			assert.Equal(t, want.SegmentSize, got.RequestBytes, "request = segment size")
			assert.Equal(t, want.ReservedBytes, got.State.ReservedBytes, "reserved")
			assert.Equal(t, want.AllocatedBytes, got.State.AllocatedBytes, "allocated")
			assert.Equal(t, want.CachedFreeBytes, got.State.CachedFreeBytes, "cached free")
			assert.Equal(t, want.LargestFreeRange, got.State.LargestFreeRange, "largest free range")
			assert.Equal(t, want.Segments, got.State.Segments, "segments")
			assert.Equal(t, want.ReleasedBytes, got.ReleasedBytes, "released by the free-all")
			assert.Equal(t, want.ReleasedSegments, got.ReleasedSegments, "segments released")
			assert.Equal(t, tc.outcome, got.Outcome)
			assert.Contains(t, got.Site, want.Func, "the site skips the allocator's frames")
			if tc.kind != "" {
				require.Len(t, truth.Fragmentation, 1)
				assert.Equal(t, tc.kind, truth.Fragmentation[0].OOMKind)
				assert.Equal(t, tc.kind, got.Kind)
			}

			ooms := findingsOf(rep, "oom")
			require.Len(t, ooms, 1)
			f := rep.Findings[ooms[0]]
			assert.Equal(t, want.SegmentSize, f.Bytes)
			frag := findingsOf(rep, "fragmentation")
			switch tc.kind {
			case "fragmentation":
				assert.Equal(t, "critical", f.Severity)
				assert.Contains(t, f.Remediation[0], "expandable_segments:True")
				assert.Contains(t, f.Remediation[1], "max_split_size_mb:21")
				require.Len(t, frag, 1)
				assert.Equal(t, want.CachedFreeBytes, rep.Findings[frag[0]].Bytes)
			case "capacity":
				assert.Equal(t, "critical", f.Severity)
				assert.Contains(t, f.Remediation[0], "reduce the batch size")
				assert.Contains(t, f.Remediation[0], "load_weights")
				assert.Empty(t, frag)
			default:
				assert.Equal(t, "medium", f.Severity)
				assert.Contains(t, f.Summary, "retry succeeded")
				// The flushed cache: a fragmentation finding with its
				// cached free bytes at the failure (TestGCThreshold
				// checks its remediation).
				require.Len(t, frag, 1)
				assert.Equal(t, want.CachedFreeBytes, rep.Findings[frag[0]].Bytes)
			}

			// oom-1.pb.gz: what was live, segments and blocks.
			assert.Equal(t, "oom-1.pb.gz", got.Profile)
			data, err := os.ReadFile(filepath.Join(dir, got.Profile))
			require.NoError(t, err)
			p, err := gprofile.Parse(bytes.NewReader(data))
			require.NoError(t, err)
			var seg, blk int64
			for _, s := range p.Sample {
				switch s.Label["layer"][0] {
				case "segment":
					seg += s.Value[3]
				case "block":
					blk += s.Value[3]
				}
			}
			assert.Equal(t, int64(want.ReservedBytes), seg, "segments live at the failure")
			assert.Equal(t, int64(want.AllocatedBytes), blk, "blocks live at the failure")

			// The replay writes the same file.
			dir2 := filepath.Join(t.TempDir(), "replay")
			r := vramprof(t, execOpts{}, "report", filepath.Join(dir, "trace.vpt"), "-o", dir2)
			require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
			again, err := os.ReadFile(filepath.Join(dir2, got.Profile))
			require.NoError(t, err)
			assert.True(t, bytes.Equal(data, again), "oom-1.pb.gz differs in the replay")
		})
	}
}

// gcThresholds returns the garbage_collection_threshold:T values the
// findings suggest.
func gcThresholds(rep *reportForensics) []string {
	var out []string
	for _, f := range rep.Findings {
		for _, r := range f.Remediation {
			if i := strings.Index(r, "garbage_collection_threshold:"); i >= 0 {
				v := r[i+len("garbage_collection_threshold:"):]
				out = append(out, f.Kind+" "+strings.Fields(v)[0])
			}
		}
	}
	return out
}

// TestGCThreshold: pool_retry's allocator grew instead of reclaiming the
// 12 and 14 MiB segments it held free, failed, flushed them and retried;
// garbage_collection_threshold:T with T from the truth's own figures:
//   - capacity unknown: the retry proved reserved - released + request
//     available, T = floor(100 * (reserved - released) / that) / 100;
//   - with --capacity (the device's total, truth's device_total_bytes):
//     T = floor(100 * (total - request) / total) / 100.
//
// The other pool scenarios get no such advice: a final OOM (the flush did
// not save the run), a capacity OOM, no failure at all.
func TestGCThreshold(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tc := range []struct {
		name string
		exit int
	}{
		{"pool_retry", 0},
		{"pool_frag_oom", 1},
		{"pool_capacity_oom", 1},
		{"pool_empty_cache", 0},
		{"pool_steady", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, truth, rep := runForensics(t, tc.name, tc.exit)
			got := gcThresholds(rep)
			if tc.name != "pool_retry" {
				assert.Empty(t, got, "no garbage_collection_threshold in %s", tc.name)
				return
			}
			var full struct {
				Retries []struct {
					ReservedBytes    uint64 `json:"reserved_bytes"`
					SegmentSize      uint64 `json:"segment_size"`
					ReleasedBytes    uint64 `json:"released_bytes"`
					DeviceTotalBytes uint64 `json:"device_total_bytes"`
				} `json:"retries"`
			}
			readJSON(t, filepath.Join(filepath.Dir(dir), "truth.json"), &full)
			require.Len(t, full.Retries, 1)
			rt := full.Retries[0]
			proved := rt.ReservedBytes - rt.ReleasedBytes + rt.SegmentSize
			want := 100 * (proved - rt.SegmentSize) / proved // 20 MiB / 48 MiB: 41
			assert.Equal(t, []string{fmt.Sprintf("fragmentation 0.%02d", want)}, got)
			require.Len(t, truth.Retries, 1)

			r := vramprof(t, execOpts{}, "report", dir, "--capacity", fmt.Sprint(rt.DeviceTotalBytes), "--format", "json")
			require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
			var known reportForensics
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &known))
			want = 100 * (rt.DeviceTotalBytes - rt.SegmentSize) / rt.DeviceTotalBytes // 36 MiB / 64 MiB: 56
			assert.Equal(t, []string{fmt.Sprintf("fragmentation 0.%02d", want)}, gcThresholds(&known))
		})
	}
}

// TestChurnFinding: pool_empty_cache releases its 3 step segments with
// empty_cache every step and gets them again the next: 61 cudaMalloc, 61
// cudaFree, 19 x 3 = 57 cycles of 20 + 2 + 12 MiB = 677380096 bytes.
func TestChurnFinding(t *testing.T) {
	probetest.RequirePrivilege(t)
	_, truth, rep := runForensics(t, "pool_empty_cache", 0)
	assert.Equal(t, uint64(21), truth.Blocks.EmptyCacheCalls)
	var mallocs, frees uint64
	for _, c := range truth.Calls {
		switch c.API {
		case "cudaMalloc":
			mallocs++
		case "cudaFree":
			frees++
		}
	}
	ch := findingsOf(rep, "churn")
	require.Len(t, ch, 1)
	f := rep.Findings[ch[0]]
	require.NotNil(t, f.Churn)
	assert.Equal(t, mallocs, f.Churn.Allocs)
	assert.Equal(t, frees, f.Churn.Frees)
	assert.Equal(t, uint64(57), f.Churn.Cycles)
	assert.Equal(t, uint64(19*(20+2+12))<<20, f.Bytes)
	assert.Contains(t, f.Remediation[0], "empty_cache()")
	assert.Empty(t, rep.Fragmentation[0].OOMs)

	// Frees carry stacks: the finding names where the segments were
	// released, the allocator function that called cudaFree (the truth's
	// caller of every cudaFree) and, in the remediation, the scenario's
	// release_cache that called empty_cache.
	freer := ""
	for _, c := range truth.Calls {
		if c.API == "cudaFree" {
			require.True(t, freer == "" || freer == c.Func, "one caller of cudaFree")
			freer = c.Func
		}
	}
	require.NotEmpty(t, freer)
	var freeStack []string
	for _, st := range f.Stacks {
		if len(st.Frames) > 1 && frameFunction(st.Frames[0]) == "cudaFree" {
			freeStack = st.Frames
		}
	}
	require.NotNil(t, freeStack, "a release stack in the churn finding")
	assert.Equal(t, freer, frameFunction(freeStack[1]))
	assert.True(t, slices.ContainsFunc(freeStack, func(fr string) bool { return frameFunction(fr) == "release_cache" }), "the scenario's release_cache in %v", freeStack)
	assert.Contains(t, f.Remediation[0], "release_cache")
}
