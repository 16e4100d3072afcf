package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMaxTraceFlag parses --max-trace as check parses sizes, for run and
// attach, and refuses a budget too small for four segments.
func TestMaxTraceFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want uint64
		err  string
	}{
		{name: "unset", args: []string{"--", "true"}, want: 0},
		{name: "MiB", args: []string{"--max-trace", "512MiB", "--", "true"}, want: 512 << 20},
		{name: "least", args: []string{"--max-trace", "64KiB", "--", "true"}, want: 64 << 10},
		{name: "bytes", args: []string{"--max-trace=1000000", "--", "true"}, want: 1000000},
		{name: "too small", args: []string{"--max-trace", "1KiB", "--", "true"}, err: "below the least --max-trace"},
		{name: "zero", args: []string{"--max-trace", "0", "--", "true"}, err: "below the least --max-trace"},
		{name: "not a size", args: []string{"--max-trace", "big", "--", "true"}, err: "not a size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parse[*runFlags]("run", tc.args)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, o.maxTrace)
		})
	}
	a, err := parse[*attachFlags]("attach", []string{"-p", "1", "--max-trace", "1GiB"})
	require.NoError(t, err)
	assert.Equal(t, uint64(1<<30), a.maxTrace)
}
