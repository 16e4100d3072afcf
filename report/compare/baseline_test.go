package compare

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBaselineRoundTrip writes base's baseline and reads it back: the same
// figures, the stacks as they were (already blanked), complete.
func TestBaselineRoundTrip(t *testing.T) {
	s := mustLoad(t, "base")
	path := filepath.Join(t.TempDir(), "b.json")
	var buf bytes.Buffer
	require.NoError(t, WriteBaseline(&buf, s, "vramprof 9.9"))
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))

	var raw map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &raw))
	assert.Equal(t, "vramprof/baseline/v1", raw["schema"])
	assert.Equal(t, "vramprof 9.9", raw["tool"])
	assert.Equal(t, float64(basePeak), raw["peak_bytes"])
	assert.Equal(t, float64(3), raw["peak_stacks_total"])

	b, err := LoadBaseline(path)
	require.NoError(t, err)
	assert.Equal(t, path, b.Source)
	assert.Equal(t, s.Command, b.Command)
	assert.Equal(t, uint64(basePeak), b.Peak)
	assert.Equal(t, s.LiveEnd, b.LiveEnd)
	assert.Equal(t, s.Devices, b.Devices)
	assert.Equal(t, s.Processes, b.Processes)
	assert.Equal(t, s.PeakStacks, b.PeakStacks)
	assert.True(t, b.StacksComplete, "3 stacks, all kept")
	assert.Empty(t, b.EndStacks, "a baseline keeps no stacks live at the end")
}

// TestBaselineKeepsTopStacks: of 25 stacks a baseline keeps the largest
// BaselineStacks, and knows it is incomplete.
func TestBaselineKeepsTopStacks(t *testing.T) {
	s := &Figures{Peak: 25 * 26 / 2}
	ss := stackSet{}
	for i := 1; i <= 25; i++ {
		ss.add([]string{fmt.Sprintf("f%02d", i)}, "site", uint64(i), 1)
	}
	s.PeakStacks = ss.sorted()
	b := NewBaseline(s, "t")
	require.Len(t, b.PeakStacks, BaselineStacks)
	assert.Equal(t, 25, b.PeakStacksTotal)
	assert.Equal(t, uint64(25), b.PeakStacks[0].Bytes, "largest first")
	assert.Equal(t, uint64(25-BaselineStacks+1), b.PeakStacks[BaselineStacks-1].Bytes)
	assert.Equal(t, []string{}, b.Command, "never null")
	assert.False(t, b.Figures("b").StacksComplete)
}

// TestLoadBaselineFixture reads a hand-written baseline that kept 1 of 3
// stacks, and a report.json given as a baseline.
func TestLoadBaselineFixture(t *testing.T) {
	b, err := LoadBaseline("testdata/baseline.json")
	require.NoError(t, err)
	assert.Equal(t, uint64(basePeak), b.Peak)
	assert.False(t, b.StacksComplete, "1 of 3 stacks kept")
	assert.Equal(t, []Figure{{Name: "python train.py", Count: 2, Peak: basePeak}}, b.Processes)
	require.Len(t, b.PeakStacks, 1)
	assert.Equal(t, uint64(modelBytes), b.PeakStacks[0].Bytes)

	r, err := LoadBaseline(fixture("base"))
	require.NoError(t, err)
	assert.Equal(t, fixture("base"), r.Source)
	assert.Equal(t, uint64(basePeak), r.Peak)
	assert.True(t, r.StacksComplete)
}
