//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// poolStateJSON is report.json's geometry of a pool at one moment.
type poolStateJSON struct {
	ReservedBytes    uint64 `json:"reserved_bytes"`
	AllocatedBytes   uint64 `json:"allocated_bytes"`
	CachedFreeBytes  uint64 `json:"cached_free_bytes"`
	LargestFreeRange uint64 `json:"largest_free_range"`
	Segments         int    `json:"segments"`
	UnplacedBytes    uint64 `json:"unplaced_bytes"`
}

// oomJSON is report.json's failed segment allocation (a pool's ooms[], a
// finding's oom).
type oomJSON struct {
	RequestBytes     uint64        `json:"request_bytes"`
	Kind             string        `json:"oom_kind"`
	Outcome          string        `json:"outcome"`
	Expandable       bool          `json:"expandable_segments"`
	ReleasedBytes    uint64        `json:"released_bytes"`
	ReleasedSegments int           `json:"released_segments"`
	State            poolStateJSON `json:"state"`
}

// fragReport is the part of report.json these tests read.
type fragReport struct {
	Fragmentation []struct {
		Expandable bool           `json:"expandable_segments"`
		Worst      *poolStateJSON `json:"worst"`
		AtEnd      poolStateJSON  `json:"at_end"`
		OOMs       []oomJSON      `json:"ooms"`
	} `json:"fragmentation"`
	Findings []struct {
		Kind        string   `json:"kind"`
		Severity    string   `json:"severity"`
		Bytes       uint64   `json:"bytes"`
		Summary     string   `json:"summary"`
		Remediation []string `json:"remediation"`
		OOM         *oomJSON `json:"oom"`
	} `json:"findings"`
}

// allocatorStats is what pool_write_stats wrote: the allocator's own
// c10_memory_stats at the scenario's end.
type allocatorStats struct {
	ReservedBytes    uint64 `json:"reserved_bytes"`
	AllocatedBytes   uint64 `json:"allocated_bytes"`
	CachedFreeBytes  uint64 `json:"cached_free_bytes"`
	LargestFreeRange uint64 `json:"largest_free_range"`
	Segments         int    `json:"segments"`
	ActiveBlocks     uint64 `json:"active_blocks"`
	CudaMallocCalls  uint64 `json:"cuda_malloc_calls"`
}

// runFrag runs a pool scenario and reads its truth (forensics records), its
// report and, when it wrote them, the allocator's stats at its end.
func runFrag(t *testing.T, name string, exit int) (*truthForensics, *fragReport, *allocatorStats) {
	t.Helper()
	dir, truth, _ := runForensics(t, name, exit)
	var rep fragReport
	readJSON(t, filepath.Join(dir, "report.json"), &rep)
	var st *allocatorStats
	if path := filepath.Join(filepath.Dir(dir), "truth.json-allocator.json"); fileExists(path) {
		st = new(allocatorStats)
		readJSON(t, path, st)
	}
	return truth, &rep, st
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestFragmentationWorstFailure: pool_frag_worst fails twice, first with 20
// MiB (10%) cached free in 2 MiB ranges, then, two tensors of three freed,
// with 140 MiB (70%) in 14 MiB ranges. The fragmentation finding quotes the
// failure with the most cached free bytes, as the allocator recorded it
// (truth's fragmentation[], taken before its free-all).
func TestFragmentationWorstFailure(t *testing.T) {
	probetest.RequirePrivilege(t)
	truth, rep, _ := runFrag(t, "pool_frag_worst", 1)
	require.Len(t, truth.Fragmentation, 2, "two failing requests")
	worst := truth.Fragmentation[0]
	for _, f := range truth.Fragmentation[1:] {
		if f.CachedFreeBytes > worst.CachedFreeBytes {
			worst = f
		}
	}
	first := truth.Fragmentation[0]
	require.Greater(t, worst.CachedFreeBytes, first.CachedFreeBytes, "the scenario's second failure is the worse")
	assert.Equal(t, "fragmentation", first.OOMKind)
	assert.Equal(t, "fragmentation", worst.OOMKind)

	require.Len(t, rep.Fragmentation, 1)
	require.Len(t, rep.Fragmentation[0].OOMs, 2, "every failing request judged")
	var frag []int
	for i, f := range rep.Findings {
		if f.Kind == "fragmentation" {
			frag = append(frag, i)
		}
	}
	require.Len(t, frag, 1)
	f := rep.Findings[frag[0]]
	assert.Equal(t, "high", f.Severity)
	assert.Equal(t, worst.CachedFreeBytes, f.Bytes, "bytes: cached free at the worst failing request")
	require.NotNil(t, f.OOM)
	// The cudaMalloc that failed: the segment asked for (16 MiB, >= 10 MiB:
	// the tensor's size rounded to 2 MiB).
	assert.Equal(t, worst.SegmentSize, f.OOM.RequestBytes, "request")
	assert.Equal(t, worst.ReservedBytes, f.OOM.State.ReservedBytes, "reserved")
	assert.Equal(t, worst.AllocatedBytes, f.OOM.State.AllocatedBytes, "allocated")
	assert.Equal(t, worst.CachedFreeBytes, f.OOM.State.CachedFreeBytes, "cached free")
	assert.Equal(t, worst.LargestFreeRange, f.OOM.State.LargestFreeRange, "largest free range")
	assert.Equal(t, worst.Segments, f.OOM.State.Segments, "segments")
	assert.Contains(t, f.Summary, "the worst of 2 failing requests")
}

// TestFragmentationHealthyInfo: the healthy pool scenarios never fail a
// request; no fragmentation finding above info.
func TestFragmentationHealthyInfo(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, name := range []string{"pool_steady", "pool_empty_cache", "pool_expandable"} {
		t.Run(name, func(t *testing.T) {
			truth, rep, _ := runFrag(t, name, 0)
			require.Empty(t, truth.Fragmentation, "no failing request")
			for _, f := range rep.Findings {
				if f.Kind == "fragmentation" {
					assert.Equal(t, "info", f.Severity, "%s", f.Summary)
				}
			}
		})
	}
}

// TestExpandableSegments: pool_expandable's allocator maps 2 and 20 MiB
// pages into two reserved ranges and unmaps some at empty_cache. The runs
// of mapped pages are its segments: every block lies in one, and the
// geometry at the end equals the allocator's own stats.
func TestExpandableSegments(t *testing.T) {
	probetest.RequirePrivilege(t)
	dir, truth, r := runScenario(t, "pool_expandable")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	var st allocatorStats
	readJSON(t, filepath.Join(filepath.Dir(dir), "truth.json-allocator.json"), &st)
	require.Zero(t, st.CudaMallocCalls, "expandable segments: no cudaMalloc")

	var rep fragReport
	readJSON(t, filepath.Join(dir, "report.json"), &rep)
	require.Len(t, rep.Fragmentation, 1)
	pl := rep.Fragmentation[0]
	assert.True(t, pl.Expandable)
	end := pl.AtEnd
	assert.Zero(t, end.UnplacedBytes, "every block placed in a mapped range")
	require.NotNil(t, pl.Worst)
	assert.Zero(t, pl.Worst.UnplacedBytes)
	assert.Equal(t, st.ReservedBytes, end.ReservedBytes, "reserved = mapped bytes")
	assert.Equal(t, st.AllocatedBytes, end.AllocatedBytes, "allocated")
	assert.Equal(t, st.CachedFreeBytes, end.CachedFreeBytes, "cached free")
	assert.Equal(t, st.LargestFreeRange, end.LargestFreeRange, "largest free range")
	assert.Equal(t, st.Segments, end.Segments, "segments: runs of mapped pages")

	// The block layer and the device memory (physical pages) as the
	// scenario counted them.
	prep := readPoolReport(t, dir)
	require.NotNil(t, prep.Blocks)
	want := *truth.Blocks
	assert.Equal(t, want, probetest.Blocks(*prep.Blocks), "blocks")
	assert.Equal(t, truth.Totals.Allocations, prep.Totals.Allocations, "physical allocations (cuMemCreate)")
	assert.Equal(t, truth.Totals.PeakBytes, prep.Totals.PeakBytes, "peak")
	assert.Equal(t, truth.Totals.LiveBytesAtEnd, prep.Totals.LiveBytesAtEnd, "live at end")
	assert.Equal(t, st.ReservedBytes, prep.Totals.LiveBytesAtEnd, "what is mapped is what is live")
	for _, f := range rep.Findings {
		for _, rem := range f.Remediation {
			assert.NotContains(t, rem, "expandable_segments:True", "%s finding: already on", f.Kind)
		}
	}
	checkReplay(t, dir)
}

// TestExpandableOOM: pool_expandable_oom asks for 80 MiB under expandable
// segments with 46 MiB reserved but unallocated; the pages fail, the
// free-all unmaps the one wholly free page, the retry fails. The OOM's
// figures equal the allocator's record (truth's retries[], taken before the
// free-all), and no advice proposes the setting already on.
func TestExpandableOOM(t *testing.T) {
	probetest.RequirePrivilege(t)
	truth, rep, st := runFrag(t, "pool_expandable_oom", 1)
	require.Len(t, truth.Retries, 1)
	want := truth.Retries[0]
	require.Len(t, truth.Fragmentation, 1)

	require.Len(t, rep.Fragmentation, 1)
	pl := rep.Fragmentation[0]
	assert.True(t, pl.Expandable)
	require.Len(t, pl.OOMs, 1, "the retry belongs to its failure")
	o := pl.OOMs[0]
	assert.True(t, o.Expandable)
	// The pages the allocator asked the driver for: those created for
	// the request and the one that failed.
	assert.Equal(t, want.SegmentSize, o.RequestBytes, "request")
	assert.Equal(t, want.ReservedBytes, o.State.ReservedBytes, "reserved = mapped")
	assert.Equal(t, want.AllocatedBytes, o.State.AllocatedBytes, "allocated")
	assert.Equal(t, want.CachedFreeBytes, o.State.CachedFreeBytes, "reserved but unallocated")
	assert.Equal(t, want.LargestFreeRange, o.State.LargestFreeRange, "largest free range")
	assert.Equal(t, want.Segments, o.State.Segments, "segments")
	assert.Equal(t, want.ReleasedBytes, o.ReleasedBytes, "unmapped by the free-all")
	assert.Equal(t, want.ReleasedSegments, o.ReleasedSegments, "pages unmapped")
	assert.Equal(t, "final", o.Outcome)
	assert.Equal(t, truth.Fragmentation[0].OOMKind, o.Kind)
	assert.Zero(t, pl.AtEnd.UnplacedBytes)
	require.NotNil(t, st)
	assert.Equal(t, st.ReservedBytes, pl.AtEnd.ReservedBytes, "reserved at the end")
	assert.Equal(t, st.AllocatedBytes, pl.AtEnd.AllocatedBytes, "allocated at the end")

	var verdicts int
	for _, f := range rep.Findings {
		for _, rem := range f.Remediation {
			assert.NotContains(t, rem, "expandable_segments:True", "%s finding: already on", f.Kind)
		}
		if f.Kind != "oom" {
			continue
		}
		verdicts++
		assert.Equal(t, "critical", f.Severity)
		assert.Equal(t, want.SegmentSize, f.Bytes)
		require.NotNil(t, f.OOM)
		assert.Equal(t, want.CachedFreeBytes, f.OOM.State.CachedFreeBytes)
		// The verdict: reserved but unallocated, what the flush gave back,
		// what was live; then what would help.
		assert.Contains(t, f.Summary, fmt.Sprintf(
			"expandable segments were on: %d bytes were reserved but unallocated, the allocator unmapped %d of them (%d wholly free page) before it gave up, and tensors held %d bytes",
			want.CachedFreeBytes, want.ReleasedBytes, want.ReleasedSegments, want.AllocatedBytes))
		require.NotEmpty(t, f.Remediation)
		joined := strings.Join(f.Remediation, "\n")
		assert.Contains(t, joined, "load_weights", "the live blocks to reduce")
		assert.Contains(t, joined, "expandable segments are already on")
	}
	assert.Equal(t, 1, verdicts, "one oom verdict")
}
