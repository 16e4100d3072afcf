package compare

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/report"
)

func TestLoadReport(t *testing.T) {
	s := mustLoad(t, "base")
	assert.Equal(t, "base", s.Source)
	assert.Equal(t, []string{"python", "train.py", "--lr", "0.1"}, s.Command)
	assert.Equal(t, uint64(basePeak), s.Peak)
	assert.Equal(t, uint64(0), s.LiveEnd)
	assert.Equal(t, uint64(40), s.Allocations)
	assert.Equal(t, uint64(2000), s.Events)
	assert.True(t, s.EndedCleanly)
	assert.True(t, s.StacksComplete, "a report has every stack")
	// Device 1 has no name in the report: its index names it.
	assert.Equal(t, []Figure{{Name: "0", Count: 1, Peak: 2359296}, {Name: "1", Count: 1, Peak: 1048576}}, s.Devices)
	// Two processes ran the same command: one figure, summed.
	assert.Equal(t, []Figure{{Name: "python train.py", Count: 2, Peak: 2359296 + 1048576}}, s.Processes)

	// The libc frames differ by address only (ASLR): blanked, the two
	// processes' load_model stacks are one, their bytes and counts summed.
	require.Len(t, s.PeakStacks, 3)
	want := []struct {
		frames []string
		bytes  uint64
		count  uint64
	}{
		{[]string{"cudaMalloc (libcudart.so.12)", "load_model (train.py:10)", "? (libc.so.6)"}, modelBytes, 3 + 1},
		{[]string{"cudaMalloc (libcudart.so.12)", "forward (train.py:20)", "? (libc.so.6)"}, baseForward, 2},
		{[]string{"cudaMalloc (libcudart.so.12)", "warmup (train.py:5)", "?"}, warmupBytes, 1},
	}
	for i, w := range want {
		assert.Equal(t, w.frames, s.PeakStacks[i].Frames, "stack %d", i)
		assert.Equal(t, w.bytes, s.PeakStacks[i].Bytes, "stack %d", i)
		assert.Equal(t, w.count, s.PeakStacks[i].Count, "stack %d", i)
	}
	assert.Empty(t, s.EndStacks)
	assert.Empty(t, s.Leaks)

	n := mustLoad(t, "new")
	require.Len(t, n.Leaks, 1, "leak findings only")
	assert.Equal(t, "leak", n.Leaks[0].Kind)
	assert.Equal(t, uint64(2), n.Late)
	require.Len(t, n.EndStacks, 1)
	assert.Equal(t, uint64(newLive), n.EndStacks[0].Bytes)
	assert.Equal(t, "cache (train.py:30)", n.EndStacks[0].Site)
}

func TestFromReport(t *testing.T) {
	// A process with no command, and stacks of 0 bytes, which are left out.
	j := &report.JSON{Processes: []report.JSONProcess{
		{PID: 1, PeakBytes: 10, PeakStacks: []report.JSONStack{
			{Frames: []string{"a"}, Site: "0x10", Bytes: 10, Count: 1},
			{Frames: []string{"b"}, Site: "b", Bytes: 0, Count: 1},
		}},
		{PID: 2, Command: "x", PeakBytes: 5},
	}}
	s := FromReport(j, "src")
	assert.Equal(t, []Figure{{Name: "[unknown command]", Count: 1, Peak: 10}, {Name: "x", Count: 1, Peak: 5}}, s.Processes)
	require.Len(t, s.PeakStacks, 1)
	assert.Equal(t, "?", s.PeakStacks[0].Site, "the site is normalized too")
}

func TestNormalizeFrame(t *testing.T) {
	for in, want := range map[string]string{
		"0x7fce9717324a (libc.so.6)": "? (libc.so.6)",
		"0x7fce9717324a":             "?",
		"main (a.c:3)":               "main (a.c:3)",
		"0xZZ (libc.so.6)":           "0xZZ (libc.so.6)",
		"0x12 libc":                  "0x12 libc",
	} {
		assert.Equal(t, want, NormalizeFrame(in), in)
	}
}

func TestIsJSONFile(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		data string
		want bool
	}{
		"json":    {" \n\t{\"schema\": 1}", true},
		"trace":   {"VPT\x00\x01", false},
		"empty":   {"", false},
		"a-list":  {"[1]", false},
		"blanks":  {"   ", false},
		"no-file": {"", false},
	} {
		path := filepath.Join(dir, name)
		if name != "no-file" {
			require.NoError(t, os.WriteFile(path, []byte(tc.data), 0o644))
		}
		assert.Equal(t, tc.want, IsJSONFile(path), name)
	}
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		load  func() error
		is    error
		words []string
	}{
		{"report_missing", func() error { _, err := LoadReport("x", "testdata/nope.json"); return err },
			ErrRecording, []string{"nope.json", "no such file"}},
		{"report_is_baseline", func() error { _, err := LoadReport("x", "testdata/baseline.json"); return err },
			ErrSchema, []string{`"vramprof/baseline/v1"`, "not vramprof/report/v1"}},
		{"report_corrupt", func() error { _, err := LoadReport("x", "testdata/corrupt.json"); return err },
			ErrRecording, []string{"not valid JSON"}},
		{"baseline_missing", func() error { _, err := LoadBaseline("testdata/nope.json"); return err },
			ErrRecording, []string{"nope.json", "no such file"}},
		{"baseline_dir", func() error { _, err := LoadBaseline("testdata"); return err },
			ErrRecording, []string{"is a directory"}},
		{"baseline_schema", func() error { _, err := LoadBaseline("testdata/wrong-schema.json"); return err },
			ErrSchema, []string{"vramprof/baseline/v9", "not vramprof/baseline/v1", "vramprof/report/v1"}},
		{"baseline_no_schema", func() error { _, err := LoadBaseline("testdata/no-schema.json"); return err },
			ErrSchema, []string{`no "schema" field`}},
		{"baseline_corrupt", func() error { _, err := LoadBaseline("testdata/corrupt.json"); return err },
			ErrRecording, []string{"not valid JSON"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.load()
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.is)
			for _, w := range tc.words {
				assert.Contains(t, err.Error(), w)
			}
			assert.NotContains(t, err.Error(), "\n")
		})
	}
}

// TestLostCauseOfReport: the check's lost-events warning names the causes
// report.json recorded (totals.lost_causes), else the one cause older
// reports and baselines imply.
func TestLostCauseOfReport(t *testing.T) {
	j := &report.JSON{}
	j.Totals.LostEvents = 3
	j.Totals.LostCauses = &report.JSONLostCauses{RingFull: 1, Unpaired: 2}
	j.Run.Events = 997
	j.Run.EndedCleanly, j.Run.Complete = true, true
	// 3 of 1000 lost, allowed: a verdict, with the warning beside it.
	v := Judge(FromReport(j, "src"), nil, Limits{AllowLost: rat(t, "1"), AllowLostText: "1"}, nil)
	assert.Contains(t, textOf(v), "WARNING: 3 events lost (1 refused by the full ring buffer, 2 returns without their call (a call in flight at attach)): ")
	var ann bytes.Buffer
	v.WriteAnnotations(&ann)
	assert.Contains(t, ann.String(), "3 events lost (1 refused by the full ring buffer, 2 returns without their call (a call in flight at attach)): ")

	j.Totals.LostCauses = nil
	assert.Contains(t, textOf(Judge(FromReport(j, "src"), nil, Limits{}, nil)), "WARNING: 3 events lost (ring buffer full): ")
	b := mustLoadBaseline(t)
	b.Lost = 2
	assert.Equal(t, "ring buffer full", b.lostCause(), "a baseline keeps no causes")
}
