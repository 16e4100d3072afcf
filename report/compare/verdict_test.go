package compare

import (
	"fmt"
	"math/big"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/report/units"
)

// rat is a percentage as --max-increase or --allow-lost parses it.
func rat(tb testing.TB, s string) *big.Rat {
	tb.Helper()
	r, err := ParsePercent(s)
	require.NoError(tb, err)
	return r
}

// TestJudge judges the fixtures against limits set from their own
// numbers: at the figure passes with no margin, a byte below fails by one.
func TestJudge(t *testing.T) {
	bx := units.BytesExact
	base, nw := mustLoad(t, "base"), mustLoad(t, "new")
	// The largest whole peak within +10% and +9.99% of base's, and the
	// percentage new grew by.
	allowed10 := uint64(basePeak) * 110 / 100
	allowed999 := uint64(basePeak) * 10999 / 10000
	require.Equal(t, uint64(newPeak), allowed10, "the fixture's peak is exactly at +10%")
	grew := fmt.Sprintf("%+.2f%%", pct(basePeak, newPeak))

	for _, tc := range []struct {
		name       string
		base       *Figures
		limits     Limits
		pass       bool
		header     string
		lines      []string
		notInText  []string
		regression bool
	}{
		{
			name: "peak_at_limit", limits: Limits{MaxPeak: u64(newPeak)}, pass: true,
			header: "PASS (1 check)",
			lines:  []string{fmt.Sprintf("PASS  max-peak      peak %s; limit %s; margin 0 bytes (0 B)\n", bx(newPeak), bx(newPeak))},
			// No failure, no evidence.
			notInText: []string{"top stacks"},
		},
		{
			name: "peak_one_byte_over", limits: Limits{MaxPeak: u64(newPeak - 1)}, regression: true,
			header: "FAIL: memory regression (1 of 1 check failed)",
			lines: []string{
				fmt.Sprintf("FAIL  max-peak      peak %s; limit %s; over by 1 byte (1 B)\n", bx(newPeak), bx(newPeak-1)),
				fmt.Sprintf("\ntop stacks at the peak:\n  1. %s, %.1f%%, in 4 allocations at load_model (train.py:10)\n       cudaMalloc (libcudart.so.12)\n",
					bx(modelBytes), float64(modelBytes)/float64(newPeak)*100),
				fmt.Sprintf("  2. %s, %.1f%%, in 3 allocations at forward (train.py:20)\n", bx(newForward), float64(newForward)/float64(newPeak)*100),
				fmt.Sprintf("  3. %s, %.1f%%, in 1 allocations at evaluate (eval.py:5)\n", bx(evalBytes), float64(evalBytes)/float64(newPeak)*100),
			},
			notInText: []string{"live at the end:"},
		},
		{
			name: "leak", limits: Limits{MaxLeak: u64(0), MaxPeak: u64(newPeak)}, regression: true,
			header: "FAIL: memory regression (1 of 2 checks failed)",
			lines: []string{
				fmt.Sprintf("FAIL  max-leak      live at end %s; limit 0 bytes (0 B); over by %s\n", bx(newLive), bx(newLive)),
				fmt.Sprintf("\ntop stacks live at the end:\n  1. %s, 100.0%%, in 1 allocations at cache (train.py:30)\n", bx(newLive)),
				"  leak finding: 65536 bytes live at the end from cache (train.py:30)\n",
			},
			notInText: []string{"top stacks at the peak"},
		},
		{
			name: "leak_within", limits: Limits{MaxLeak: u64(newLive)}, pass: true, header: "PASS (1 check)",
			lines: []string{fmt.Sprintf("PASS  max-leak      live at end %s; limit %s; margin 0 bytes (0 B)\n", bx(newLive), bx(newLive))},
		},
		{
			name: "increase_within", base: base, limits: Limits{MaxIncrease: rat(t, "10"), MaxIncreaseText: "10"}, pass: true,
			header: "PASS (1 check)",
			lines: []string{fmt.Sprintf("PASS  max-increase  peak %s, %s over the baseline's %s; limit +10%%, at most %s; margin 0 bytes (0 B)\n",
				bx(newPeak), grew, bx(basePeak), bx(allowed10))},
		},
		{
			name: "increase_over", base: base, limits: Limits{MaxIncrease: rat(t, "9.99%"), MaxIncreaseText: "9.99"}, regression: true,
			header: "FAIL: memory regression (1 of 1 check failed)",
			lines: []string{
				fmt.Sprintf("FAIL  max-increase  peak %s, %s over the baseline's %s; limit +9.99%%, at most %s; over by %s\n",
					bx(newPeak), grew, bx(basePeak), bx(allowed999), bx(newPeak-allowed999)),
				// Grown stacks only: forward grew, evaluate is new;
				// load_model is the same and warmup shrank.
				"\nstacks that grew at the peak (vs baseline base):\n  1. [changed] " + NewChange(baseForward, newForward).Text() + " at forward (train.py:20)\n",
				"  2. [new] " + NewChange(0, evalBytes).Text() + " at evaluate (eval.py:5)\n",
			},
			notInText: []string{"  3. ", "warmup", "top stacks"},
		},
		{
			// The hand-written baseline kept 1 of 3 stacks: a stack
			// missing from it may be below its cut.
			name: "increase_over_incomplete_baseline", base: mustLoadBaseline(t), limits: Limits{MaxIncrease: new(big.Rat), MaxIncreaseText: "0"},
			regression: true, header: "FAIL: memory regression (1 of 1 check failed)",
			lines: []string{
				fmt.Sprintf("limit +0%%, at most %s; over by %s\n", bx(basePeak), bx(newPeak-basePeak)),
				"  1. [new (or below the baseline's top stacks)] " + NewChange(0, newForward).Text() + " at forward (train.py:20)\n",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Judge(nw, tc.base, tc.limits, nil)
			v.Recording = "recording: new"
			memory, command := v.Failed()
			assert.Equal(t, !tc.pass, memory)
			assert.False(t, command)
			assert.False(t, v.Unknown())
			regression, err := v.Outcome()
			require.NoError(t, err)
			assert.Equal(t, tc.regression, regression)
			assert.Equal(t, tc.header, v.Header())

			out := textOf(v)
			assert.True(t, strings.HasPrefix(out, "vramprof check: "+tc.header+"\ncommand: python train.py --lr 0.1\nrecording: new\n"+
				fmt.Sprintf("peak %s, live at end %s, 45 allocations\n", bx(newPeak), bx(newLive))+
				"WARNING: 2 events late (a free that took longer than the reorder window): they may be misordered against calls on the same address\n"), out)
			for _, l := range tc.lines {
				assert.Contains(t, out, l)
			}
			for _, l := range tc.notInText {
				assert.NotContains(t, out, l)
			}
			assert.Equal(t, out, textOf(v), "the same verdict, the same text")
		})
	}
}

func mustLoadBaseline(tb testing.TB) *Figures {
	tb.Helper()
	b, err := LoadBaseline("testdata/baseline.json")
	require.NoError(tb, err)
	return b
}

// TestJudgeLostEvents: lossy lost 3 events of 1000 (0.30%).
func TestJudgeLostEvents(t *testing.T) {
	s := mustLoad(t, "lossy")
	const share = "3 of 1000 events lost (0.30%)"
	for _, tc := range []struct {
		name    string
		allow   string
		unknown bool
		line    string
	}{
		{"none_allowed", "", true, "UNKNOWN  lost-events   " + share + "; limit none (no --allow-lost)\n"},
		{"at_share", "0.3", false, "PASS  lost-events   " + share + "; limit 0.3% (--allow-lost)\n"},
		{"below_share", "0.29", true, "UNKNOWN  lost-events   " + share + "; limit 0.29% (--allow-lost)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Limits{MaxPeak: u64(1000)}
			if tc.allow != "" {
				l.AllowLost, l.AllowLostText = rat(t, tc.allow), tc.allow
			}
			v := Judge(s, nil, l, nil)
			assert.Equal(t, tc.unknown, v.Unknown())
			memory, command := v.Failed()
			assert.False(t, memory, "lost events are no memory failure")
			assert.False(t, command)
			out := textOf(v)
			assert.Contains(t, out, tc.line)
			assert.Contains(t, out, "command: ./bench --size '1 KB'\n")
			assert.Contains(t, out, "WARNING: 3 events lost (ring buffer full): the figures may be wrong either way (a missed free reads high, a missed allocation low)\n")
			regression, err := v.Outcome()
			assert.False(t, regression)
			if !tc.unknown {
				require.NoError(t, err)
				assert.Equal(t, "PASS (1 check)", v.Header())
				return
			}
			require.ErrorIs(t, err, ErrLostEvents)
			assert.Contains(t, err.Error(), "verdict unknown: "+share+", limit ")
			assert.True(t, strings.HasPrefix(v.Header(), "UNKNOWN: "+share+"; the figures may be wrong either way"), v.Header())
		})
	}
}

// TestJudgeCommand: a command's own failure is no memory regression.
func TestJudgeCommand(t *testing.T) {
	base := mustLoad(t, "base")
	t.Run("own_failure", func(t *testing.T) {
		v := Judge(base, nil, Limits{MaxPeak: u64(basePeak)}, intp(3))
		memory, command := v.Failed()
		assert.False(t, memory)
		assert.True(t, command)
		assert.Equal(t, "ERROR: command failed with exit code 3 (not a memory regression: 1 memory check passed)", v.Header())
		assert.Contains(t, textOf(v), "FAIL  command       exit code 3\n")
		regression, err := v.Outcome()
		assert.False(t, regression)
		require.ErrorIs(t, err, ErrCommandFailed)
		assert.Equal(t, "command failed with exit code 3; no memory limit was exceeded", err.Error())
	})
	t.Run("failure_and_regression", func(t *testing.T) {
		v := Judge(base, nil, Limits{MaxPeak: u64(basePeak - 1)}, intp(1))
		assert.Equal(t, "FAIL: memory regression (1 of 1 check failed), and the command failed with exit code 1", v.Header())
		regression, err := v.Outcome()
		assert.True(t, regression)
		assert.NoError(t, err)
	})
	t.Run("passes", func(t *testing.T) {
		v := Judge(base, nil, Limits{}, intp(0))
		assert.Equal(t, "PASS (0 checks)", v.Header())
		assert.Contains(t, textOf(v), "PASS  command       exit code 0\n")
		regression, err := v.Outcome()
		assert.False(t, regression)
		assert.NoError(t, err)
	})
}

func TestJudgeTruncated(t *testing.T) {
	s := mustLoad(t, "base")
	s.Truncated = true
	assert.Contains(t, textOf(Judge(s, nil, Limits{}, nil)), "WARNING: the trace was cut short: the figures cover the records before the cut\n")
}

func TestIncreaseCheck(t *testing.T) {
	// 100 -> 110 is exactly +10%: passes at 10, fails at 9.99.
	pass := increaseCheck(110, 100, big.NewRat(10, 1), "10")
	assert.True(t, pass.Pass, pass.Margin)
	assert.Equal(t, "margin 0 bytes (0 B)", pass.Margin)
	fail := increaseCheck(110, 100, big.NewRat(999, 100), "9.99")
	assert.False(t, fail.Pass)
	assert.Equal(t, "over by 1 byte (1 B)", fail.Margin)
	// From a zero baseline any growth fails, none passes.
	zero := increaseCheck(1, 0, big.NewRat(1000, 1), "1000")
	assert.False(t, zero.Pass)
	assert.Contains(t, zero.Measured, "+0.00% over the baseline's 0 bytes (0 B)")
	assert.True(t, increaseCheck(0, 0, new(big.Rat), "0").Pass)
	// A limit beyond 64 bits: (2^64-1) * 3 = 55340232221128654845.
	huge := increaseCheck(1, 1<<64-1, big.NewRat(200, 1), "200")
	assert.True(t, huge.Pass)
	assert.Equal(t, "+200%, at most 55340232221128654845 bytes", huge.Limit)
}

func TestParsePercent(t *testing.T) {
	for in, want := range map[string]*big.Rat{"10": big.NewRat(10, 1), "2.5": big.NewRat(5, 2), "10%": big.NewRat(10, 1), "0": new(big.Rat)} {
		got, err := ParsePercent(in)
		require.NoError(t, err, in)
		assert.Zero(t, want.Cmp(got), "%s: got %s", in, got)
	}
	for _, in := range []string{"", "-1", "1/3", "1e2", "ten", "10 %"} {
		_, err := ParsePercent(in)
		assert.Error(t, err, in)
	}
}

func TestCommandText(t *testing.T) {
	assert.Equal(t, `python train.py 'a b' '' 'it'\''s' '$HOME' x=1`,
		CommandText([]string{"python", "train.py", "a b", "", "it's", "$HOME", "x=1"}))
}
