package compare

import (
	"math/big"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func strp(s string) *string { return &s }

// TestParseLimits: the limits parsed exactly, and the rules that make a
// check, with the words check prints.
func TestParseLimits(t *testing.T) {
	l, err := ParseLimits(LimitFlags{MaxPeak: strp("1.5GiB"), MaxLeak: strp("4096"), AllowLost: strp("0.1%"),
		MaxIncrease: strp("2.5"), Baseline: true})
	require.NoError(t, err)
	require.NotNil(t, l.MaxPeak)
	assert.Equal(t, uint64(3<<29), *l.MaxPeak, "1.5 GiB")
	require.NotNil(t, l.MaxLeak)
	assert.Equal(t, uint64(4096), *l.MaxLeak)
	assert.Equal(t, 0, big.NewRat(1, 10).Cmp(l.AllowLost), "0.1 exactly: %v", l.AllowLost)
	assert.Equal(t, "0.1", l.AllowLostText, "without the percent sign")
	assert.Equal(t, 0, big.NewRat(5, 2).Cmp(l.MaxIncrease), "2.5 exactly: %v", l.MaxIncrease)
	assert.Equal(t, "2.5", l.MaxIncreaseText)

	l, err = ParseLimits(LimitFlags{WriteBaseline: true})
	require.NoError(t, err, "writing a baseline is a check")
	assert.Equal(t, Limits{}, l)

	for _, tc := range []struct {
		name string
		f    LimitFlags
		want string
	}{
		{"bad size", LimitFlags{MaxLeak: strp("big")}, `--max-leak "big": `},
		{"over 100 percent", LimitFlags{MaxPeak: strp("1"), AllowLost: strp("100.5")},
			`--allow-lost "100.5": give a percentage from 0 to 100, such as 0.1`},
		{"bad percentage", LimitFlags{MaxIncrease: strp("-3"), Baseline: true},
			`--max-increase "-3": not a percentage; use a non-negative number such as 10, 2.5 or 10%`},
		{"increase without baseline", LimitFlags{MaxIncrease: strp("10")}, "--max-increase needs --baseline FILE, the run to compare with"},
		{"baseline without increase", LimitFlags{Baseline: true}, "--baseline needs --max-increase PCT, the growth allowed over it"},
		{"nothing", LimitFlags{AllowLost: strp("1")},
			"nothing to check; give --max-peak, --max-leak, --max-peak-per-test, --limits FILE, --baseline with --max-increase, or --write-baseline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseLimits(tc.f)
			require.Error(t, err)
			if tc.name == "bad size" {
				assert.Contains(t, err.Error(), tc.want)
				return
			}
			assert.Equal(t, tc.want, err.Error())
		})
	}
}
