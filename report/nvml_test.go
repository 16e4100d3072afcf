package report

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/vramprof/vramprof/analysis"
)

// TestGapText: the gap keeps its sign in the exact figure; a negative one
// (NVML behind the trace) says so. 3 GiB - 2 GiB = 1 GiB; 2 GiB - 2.75 GiB
// = -768 MiB.
func TestGapText(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    analysis.Reconciliation
		want string
	}{
		{"ahead", analysis.Reconciliation{NVMLBytes: 3 << 30, TracedBytes: 2 << 30, GapBytes: 1 << 30},
			"NVML 3221225472 bytes (3.00 GiB) vs 2147483648 traced (2.00 GiB), gap +1073741824 bytes (1.00 GiB)"},
		{"behind", analysis.Reconciliation{NVMLBytes: 2 << 30, TracedBytes: 11 << 28, GapBytes: -(3 << 28)},
			"NVML 2147483648 bytes (2.00 GiB) vs 2952790016 traced (2.75 GiB), gap -805306368 bytes (-768.00 MiB, NVML lags the trace)"},
		{"equal", analysis.Reconciliation{NVMLBytes: 812, TracedBytes: 812},
			"NVML 812 bytes (812 B) vs 812 traced (812 B), gap +0 bytes (0 B)"},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, gapText(tc.r)) })
	}
}
