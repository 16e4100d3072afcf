//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/cmd/vramprof/internal/recorder"
	"github.com/vramprof/vramprof/probes/probetest"
	pysnapshot "github.com/vramprof/vramprof/profile/snapshot"
)

// segTruth is a segment as a truth file states it: the pointer and size of
// a successful cudaMalloc.
type segTruth struct{ addr, size uint64 }

type segEvent struct {
	action     string
	addr, size uint64
}

// truthSegments replays one process's calls[] in order: its segment
// allocations and frees, and the segments live at its end. Every call of
// the workers scenario is a cudaMalloc or cudaFree on device 0.
func truthSegments(t *testing.T, tr *probetest.Truth) ([]segEvent, []segTruth) {
	t.Helper()
	var events []segEvent
	live := map[uint64]uint64{}
	for _, c := range tr.Calls {
		require.Equal(t, "ok", c.Outcome, "truth of pid %d: %s", tr.PID, c.API)
		switch c.API {
		case "cudaMalloc":
			events = append(events, segEvent{pysnapshot.ActionSegmentAlloc, c.Ptr, c.Size})
			live[c.Ptr] = c.Size
		case "cudaFree":
			events = append(events, segEvent{pysnapshot.ActionSegmentFree, c.Ptr, live[c.Ptr]})
			require.Equal(t, c.Size, live[c.Ptr], "truth of pid %d: a free's size is its allocation's", tr.PID)
			delete(live, c.Ptr)
		default:
			t.Fatalf("truth of pid %d: unexpected call %s", tr.PID, c.API)
		}
	}
	var segs []segTruth
	for a, s := range live {
		segs = append(segs, segTruth{a, s})
	}
	return events, segs
}

// checkProcessSnapshot checks an exported snapshot against one process's
// truth: its segment events in order, its final segments, each one block
// (no block layer was traced), all on device 0.
func checkProcessSnapshot(t *testing.T, data []byte, tr *probetest.Truth) {
	t.Helper()
	checkMemoryViz(t, data)
	s, err := pysnapshot.Decode(bytes.NewReader(data))
	require.NoError(t, err)
	wantEvents, wantSegs := truthSegments(t, tr)
	require.Len(t, s.DeviceTraces, 1, "device 0 only")
	var gotEvents []segEvent
	for _, e := range s.DeviceTraces[0] {
		if e.Action == pysnapshot.ActionSegmentAlloc || e.Action == pysnapshot.ActionSegmentFree {
			gotEvents = append(gotEvents, segEvent{e.Action, e.Addr, e.Size})
		}
	}
	assert.Equal(t, wantEvents, gotEvents, "pid %d: segment events", tr.PID)
	var gotSegs []segTruth
	for _, g := range s.Segments {
		gotSegs = append(gotSegs, segTruth{g.Address, g.TotalSize})
		if assert.Len(t, g.Blocks, 1, "pid %d: segment %#x is one block", tr.PID, g.Address) {
			b := g.Blocks[0]
			assert.Equal(t, [3]any{g.Address, g.TotalSize, pysnapshot.StateActiveAllocated},
				[3]any{b.Address, b.Size, b.State}, "pid %d: segment %#x's block", tr.PID, g.Address)
		}
	}
	assert.ElementsMatch(t, wantSegs, gotSegs, "pid %d: segments at the end", tr.PID)
}

// TestSnapshotPerProcess records the workers scenario (a parent and four
// forked workers, which allocate at the same addresses as each other) and
// exports it as snapshots: by default the parent's, with --pid a worker's;
// each is that process's own truth and replays in MemoryViz.
func TestSnapshotPerProcess(t *testing.T) {
	probetest.RequirePrivilege(t)
	dir, root, r := runScenario(t, "workers")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	truthPath := filepath.Join(filepath.Dir(dir), "truth.json")
	tree := mustReadCovTruth(t, truthPath)
	require.Len(t, tree.Children, 4, "truth: four workers")
	truths := map[uint32]*probetest.Truth{root.PID: root}
	for _, pid := range tree.Children {
		truths[pid] = probetest.MustReadTruth(t, fmt.Sprintf("%s.%d", truthPath, pid))
		require.Equal(t, pid, truths[pid].PID)
	}
	// What this guards against: a worker allocates at an address the
	// parent still has live (each has its own CUDA context).
	parent, _ := truthSegments(t, root)
	worker, _ := truthSegments(t, truths[tree.Children[0]])
	require.Equal(t, parent[0].addr, worker[0].addr, "truth: a worker's batch at the parent's weights' address")

	pidsBut := func(skip uint32) []string {
		var out []string
		for pid := range truths {
			if pid != skip {
				out = append(out, strconv.FormatUint(uint64(pid), 10))
			}
		}
		return out
	}

	t.Run("default", func(t *testing.T) {
		r := vramprof(t, execOpts{}, "report", dir, "--format", "snapshot")
		require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
		checkProcessSnapshot(t, []byte(r.stdout), root)
		lines := r.stderrLines()
		require.Len(t, lines, 1, "one line says which process")
		assert.Contains(t, lines[0], fmt.Sprintf("snapshot of pid %d ", root.PID))
		assert.Contains(t, lines[0], "--pid")
		for _, pid := range pidsBut(root.PID) {
			assert.Contains(t, lines[0], pid, "the line names the other processes")
		}
	})

	for i, pid := range tree.Children {
		t.Run(fmt.Sprintf("worker_%d", i), func(t *testing.T) {
			out := t.TempDir()
			r := vramprof(t, execOpts{}, "report", dir, "--format", "snapshot", "--pid", strconv.Itoa(int(pid)), "-o", out)
			require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
			checkProcessSnapshot(t, mustReadFile(t, filepath.Join(out, recorder.SnapshotFile)), truths[pid])
			lines := r.stderrLines()
			require.Len(t, lines, 1)
			assert.Contains(t, lines[0], fmt.Sprintf("snapshot of pid %d ", pid))
		})
	}

	t.Run("pid without events", func(t *testing.T) {
		out := t.TempDir()
		r := vramprof(t, execOpts{}, "report", dir, "--format", "snapshot", "--pid", "999999999", "-o", out)
		assert.Equal(t, exitToolError, r.code)
		lines := r.stderrLines()
		require.Len(t, lines, 1, "one line")
		assert.True(t, strings.HasPrefix(lines[0], "vramprof: report: --pid 999999999 "), lines[0])
		for _, pid := range pidsBut(0) {
			assert.Contains(t, lines[0], pid, "names the pids that have events")
		}
		assertDirHolds(t, out, nil)
	})
}

// TestSnapshotPIDUsage: --pid chooses a recording's process for --format
// snapshot, and nothing else.
func TestSnapshotPIDUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"imported snapshot", []string{"report", snapshotFixture, "--format", "snapshot", "--pid", "1"}, "holds one"},
		{"other format", []string{"report", snapshotFixture, "--format", "json", "--pid", "1"}, "--format snapshot"},
		{"not a pid", []string{"report", snapshotFixture, "--format", "snapshot", "--pid", "x"}, "process ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := vramprof(t, execOpts{}, tc.args...)
			assert.Equal(t, exitToolError, r.code)
			assert.Empty(t, r.stdout)
			lines := r.stderrLines()
			require.Len(t, lines, 1)
			assert.Contains(t, lines[0], tc.want)
		})
	}
	// Without --pid an imported snapshot exports as before, with no note.
	r := vramprof(t, execOpts{}, "report", snapshotFixture, "--format", "snapshot")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Empty(t, r.stderr)
}

func mustReadFile(tb testing.TB, path string) []byte {
	tb.Helper()
	data, err := os.ReadFile(path)
	require.NoError(tb, err)
	return data
}
