package units

import (
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
			got, err := ParseSize(tc.in)
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
			_, err := ParseSize(tc.in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.problem)
			assert.Contains(t, err.Error(), SizeForms, "the error names the accepted forms")
			assert.NotContains(t, err.Error(), "\n")
		})
	}
}
