package compare

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/report/units"
)

// pct is the change from a to b in percent, rounded to two decimals.
func pct(a, b uint64) float64 {
	return math.Round((float64(b)-float64(a))/float64(a)*100*100) / 100
}

func TestNewChange(t *testing.T) {
	c := NewChange(200, 150)
	assert.Equal(t, int64(-50), c.Delta)
	require.NotNil(t, c.Percent)
	assert.Equal(t, -25.0, *c.Percent)
	assert.Nil(t, NewChange(0, 5).Percent, "no percentage of nothing")
	assert.Equal(t, int64(math.MaxInt64), NewChange(0, math.MaxUint64).Delta, "saturated")
	assert.Equal(t, int64(-math.MaxInt64), NewChange(math.MaxUint64, 0).Delta, "saturated")
	// 1/3 of a percent: rounded to two decimals.
	third := NewChange(300, 301)
	assert.Equal(t, 0.33, *third.Percent)
	assert.Equal(t, "+1 bytes (+1 B), +0.33%: 300 -> 301 bytes (300 B -> 301 B)", third.Text())
	assert.Equal(t, "±0 bytes (±0 B): 0 -> 0 bytes (0 B -> 0 B)", NewChange(0, 0).Text())
}

// TestDiff diffs base against new: every figure is new minus base of the
// fixtures' numbers.
func TestDiff(t *testing.T) {
	base, nw := mustLoad(t, "base"), mustLoad(t, "new")
	d := NewDiff(base, nw)
	assert.Equal(t, "vramprof/diff/v1", d.Schema)
	assert.Equal(t, "base", d.Base)
	assert.Equal(t, "new", d.New)

	assert.Equal(t, uint64(basePeak), d.PeakBytes.Base)
	assert.Equal(t, uint64(newPeak), d.PeakBytes.New)
	assert.Equal(t, int64(newPeak-basePeak), d.PeakBytes.Delta)
	require.NotNil(t, d.PeakBytes.Percent)
	assert.Equal(t, pct(basePeak, newPeak), *d.PeakBytes.Percent)
	assert.Equal(t, int64(newLive), d.LiveBytesAtEnd.Delta)
	assert.Nil(t, d.LiveBytesAtEnd.Percent)

	// Devices, largest change first: 0 grew (peak and end), 2 is new, 1
	// is the same.
	type row struct {
		name, status string
		peak, end    int64
	}
	var devs []row
	for _, r := range d.Devices {
		devs = append(devs, row{r.Name, r.Status, r.PeakBytes.Delta, r.LiveBytesAtEnd.Delta})
	}
	assert.Equal(t, []row{
		{"0", StatusChanged, 2695987 - 2359296, newLive},
		{"2", StatusNew, 4096, 0},
		{"1", StatusUnchanged, 0, 0},
	}, devs)

	require.Len(t, d.Processes, 2)
	train, eval := d.Processes[0], d.Processes[1]
	assert.Equal(t, "python train.py", train.Name)
	assert.Equal(t, StatusChanged, train.Status)
	assert.Equal(t, [2]int{2, 2}, [2]int{train.BaseCount, train.NewCount})
	assert.Equal(t, int64(2695987+1048576-basePeak), train.PeakBytes.Delta)
	assert.Equal(t, "python eval.py", eval.Name)
	assert.Equal(t, StatusNew, eval.Status)
	assert.Equal(t, [2]int{0, 1}, [2]int{eval.BaseCount, eval.NewCount})

	// Stacks at the peak, by absolute change: forward grew, warmup
	// vanished, evaluate is new, load_model is the same.
	type stack struct {
		site, status string
		delta        int64
	}
	var stacks []stack
	for _, s := range d.PeakStacks {
		stacks = append(stacks, stack{s.Site, s.Status, s.Delta})
	}
	assert.Equal(t, []stack{
		{"forward (train.py:20)", StatusChanged, newForward - baseForward},
		{"warmup (train.py:5)", StatusVanished, -warmupBytes},
		{"evaluate (eval.py:5)", StatusNew, evalBytes},
		{"load_model (train.py:10)", StatusUnchanged, 0},
	}, stacks)
	require.Len(t, d.LiveAtEndStacks, 1)
	assert.Equal(t, StatusNew, d.LiveAtEndStacks[0].Status)
	assert.Equal(t, uint64(newLive), d.LiveAtEndStacks[0].New)
}

func TestDiffJSON(t *testing.T) {
	d := NewDiff(mustLoad(t, "base"), mustLoad(t, "new"))
	var buf bytes.Buffer
	require.NoError(t, d.WriteJSON(&buf))
	var raw struct {
		Schema     string           `json:"schema"`
		LiveBytes  map[string]any   `json:"live_bytes_at_end"`
		PeakStacks []map[string]any `json:"peak_stacks"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &raw))
	assert.Equal(t, DiffSchema, raw.Schema)
	assert.Contains(t, raw.LiveBytes, "percent")
	assert.Nil(t, raw.LiveBytes["percent"], "null from 0")
	require.NotEmpty(t, raw.PeakStacks)
	// A stack's change is flat beside its frames, not nested.
	for _, k := range []string{"frames", "site", "status", "base", "new", "delta", "percent"} {
		assert.Contains(t, raw.PeakStacks[0], k)
	}
	var back Diff
	require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
	assert.Equal(t, d.PeakStacks, back.PeakStacks)
	assert.Equal(t, d.Processes, back.Processes)
	assert.True(t, strings.HasSuffix(buf.String(), "}\n"))
}

func TestDiffText(t *testing.T) {
	base, nw := mustLoad(t, "base"), mustLoad(t, "new")
	nw.Truncated = true
	var buf bytes.Buffer
	NewDiff(base, nw).WriteText(&buf)
	out := buf.String()

	change := func(a, b uint64) string {
		s := units.DeltaExact(int64(b) - int64(a))
		if a > 0 {
			s += fmt.Sprintf(", %+.2f%%", pct(a, b))
		}
		return fmt.Sprintf("%s: %d -> %d bytes (%s -> %s)", s, a, b, units.Bytes(a), units.Bytes(b))
	}
	for _, want := range []string{
		"vramprof diff: BASE base -> NEW new\n",
		"peak:         " + change(basePeak, newPeak) + "\n",
		"live at end:  " + change(0, newLive) + "\n",
		"note:         new was cut short; its figures cover the records before the cut\n",
		"\ndevices (largest change first):\n  [changed] 0\n      peak:        " + change(2359296, 2695987) + "\n",
		"  [new] python eval.py\n",
		// Two processes ran it on each side: the counts are shown.
		"  [changed] python train.py (2 -> 2 processes)\n      peak:        " + change(basePeak, 2695987+1048576) + "\n",
		"\nstacks at the peak (largest change first):\n  [changed] " + change(baseForward, newForward) +
			" at forward (train.py:20)\n        cudaMalloc (libcudart.so.12)\n        forward (train.py:20)\n        ? (libc.so.6)\n",
		"  [vanished] " + change(warmupBytes, 0) + " at warmup (train.py:5)\n",
		"  1 stacks unchanged\n",
		"\nstacks live at the end (largest change first):\n  [new] " + change(0, newLive) + " at cache (train.py:30)\n",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "lost events:", "none lost")
	assert.NotContains(t, out, "note:         base", "base ended cleanly")
	assert.NotContains(t, out, "eval.py (", "one process at most: no count shown")
	assert.NotContains(t, out, "[unchanged] load_model", "unchanged stacks are only counted")

	// Lost events are shown when either side lost some.
	buf.Reset()
	NewDiff(base, mustLoad(t, "lossy")).WriteText(&buf)
	assert.Contains(t, buf.String(), "lost events:  0 -> 3 (")
}

// TestDiffTextLimit: the text shows DiffTextStacks changed stacks per
// section and counts the rest.
func TestDiffTextLimit(t *testing.T) {
	ss := stackSet{}
	for i := 1; i <= DiffTextStacks+2; i++ {
		ss.add([]string{fmt.Sprintf("f%02d", i)}, fmt.Sprintf("f%02d", i), uint64(i), 1)
	}
	d := NewDiff(&Figures{Source: "a"}, &Figures{Source: "b", PeakStacks: ss.sorted()})
	var buf bytes.Buffer
	d.WriteText(&buf)
	out := buf.String()
	assert.Equal(t, DiffTextStacks, strings.Count(out, "  [new] +"))
	assert.Contains(t, out, "  ... 2 more changed stacks (--format json lists them all)\n")
	assert.Contains(t, out, "\nstacks live at the end (largest change first):\n  no stack changed\n")
	assert.Contains(t, out, "\ndevices (largest change first):\n  none\n")
	// Largest first: f12 (12 bytes) shown, f01 and f02 not.
	assert.Contains(t, out, "at f12\n")
	assert.NotContains(t, out, "at f02\n")
}

// failWriter fails every write.
type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

// TestDiffWrite: Write gives WriteJSON's or WriteText's bytes, whole, and
// says which step failed.
func TestDiffWrite(t *testing.T) {
	d := NewDiff(mustLoad(t, "base"), mustLoad(t, "new"))
	for _, format := range []string{"json", "text"} {
		var want, got bytes.Buffer
		if format == "json" {
			require.NoError(t, d.WriteJSON(&want))
		} else {
			d.WriteText(&want)
		}
		require.NoError(t, d.Write(&got, format))
		assert.Equal(t, want.String(), got.String(), format)
	}
	full := errors.New("disk full")
	err := d.Write(failWriter{full}, "text")
	require.ErrorIs(t, err, full)
	assert.Equal(t, "write: disk full", err.Error())
}

// TestDiffIncomplete: a side that is no whole run (a moment report, a
// process attached mid-run: Figures.Incomplete) is said first, with its
// reason, in the text and in the JSON; a complete side says nothing.
func TestDiffIncomplete(t *testing.T) {
	base, nw := mustLoad(t, "base"), mustLoad(t, "new")
	const reason = "attached mid-run: process 7 was running before tracing began"
	nw.Incomplete = []string{reason}
	nw.Truncated = true // said by Incomplete in its own words: no second note
	d := NewDiff(base, nw)
	var buf bytes.Buffer
	d.WriteText(&buf)
	out := buf.String()
	assert.Contains(t, out, "warning:      new is incomplete: "+reason+"; a change may be that alone\n")
	assert.NotContains(t, out, "note:         new was cut short")
	assert.NotContains(t, out, "base is incomplete")
	assert.Less(t, strings.Index(out, "warning:"), strings.Index(out, "devices (largest change first)"), "before the rows")

	buf.Reset()
	require.NoError(t, d.WriteJSON(&buf))
	var raw map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &raw))
	assert.Equal(t, []any{reason}, raw["new_incomplete"])
	assert.NotContains(t, raw, "base_incomplete", "complete: absent")
}
