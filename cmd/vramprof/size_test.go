package main

import (
	"math/big"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"0", 0},
		{"4096", 4096},
		{"4096B", 4096},
		{"12GiB", 12 << 30},
		{"512MiB", 512 << 20},
		{"1.5GiB", 3 << 29},
		{"0.5KiB", 512},
		{"100MB", 100_000_000},
		{"1kB", 1000},
		{"1KB", 1000},
		{"2TiB", 2 << 40},
		{"3PB", 3_000_000_000_000_000},
		{"12gib", 12 << 30},
		{"18446744073709551615", 1<<64 - 1},
		{"16383PiB", 16383 << 50},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseSize(tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	for _, tc := range []struct {
		name, in, problem string
	}{
		{"space", "12 GB", "no spaces"},
		{"trailing_space", "12GB ", "no spaces"},
		{"negative", "-3", "negative"},
		{"fractional_bytes", "1.5", "whole number of bytes"},
		{"fractional_kib", "0.1KiB", "whole number of bytes"},
		{"empty", "", "empty"},
		{"overflow", "18446744073709551616", "too large"},
		{"overflow_unit", "16384PiB", "too large"},
		{"ambiguous_unit", "12G", `unknown unit "G"`},
		{"unknown_unit", "12parsecs", `unknown unit "parsecs"`},
		{"unit_only", "GiB", "not a size"},
		{"exponent", "1e9", "not a size"},
		{"plus", "+5", "not a size"},
		{"comma", "1,000", "not a size"},
		{"trailing_dot", "1.GiB", "not a size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseSize(tc.in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.problem)
			assert.Contains(t, err.Error(), sizeForms, "the error names the accepted forms")
			assert.NotContains(t, err.Error(), "\n")
		})
	}
}

func TestSizePercent(t *testing.T) {
	for in, want := range map[string]*big.Rat{"10": big.NewRat(10, 1), "2.5": big.NewRat(5, 2), "10%": big.NewRat(10, 1), "0": new(big.Rat)} {
		got, err := parsePercent(in)
		require.NoError(t, err, in)
		assert.Zero(t, want.Cmp(got), "%s: got %s", in, got)
	}
	for _, in := range []string{"", "-1", "1/3", "1e2", "ten", "10 %"} {
		_, err := parsePercent(in)
		assert.Error(t, err, in)
	}
}

func TestSizeIncreaseCheck(t *testing.T) {
	// 100 -> 110 is exactly +10%: passes at 10, fails at 9.99.
	pass := increaseCheck(110, 100, big.NewRat(10, 1), "10")
	assert.True(t, pass.pass, pass.margin)
	assert.Equal(t, "margin 0 bytes (0 B)", pass.margin)
	fail := increaseCheck(110, 100, big.NewRat(999, 100), "9.99")
	assert.False(t, fail.pass)
	assert.Equal(t, "over by 1 byte (1 B)", fail.margin)
	// From a zero baseline any growth fails, none passes.
	assert.False(t, increaseCheck(1, 0, big.NewRat(1000, 1), "1000").pass)
	assert.True(t, increaseCheck(0, 0, new(big.Rat), "0").pass)
}
