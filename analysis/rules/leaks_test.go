package rules

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestIsLeak(t *testing.T) {
	tests := []struct {
		name string
		live []uint64
		want bool
	}{
		{"linear", []uint64{1, 2, 3, 4, 5, 6}, true},
		{"rises in 3 of 5 steps", []uint64{1, 1, 2, 2, 3, 4}, true},
		{"rises in 2 of 5 steps", []uint64{1, 1, 1, 2, 2, 3}, false},
		{"one step up", []uint64{0, 0, 0, 1}, false},
		{"falls once", []uint64{1, 2, 3, 2, 4, 5}, false},
		{"flat", []uint64{5, 5, 5, 5}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, isLeak(tt.live))
		})
	}
}

func TestSlope(t *testing.T) {
	assert.InDelta(t, 2.0, slope([]float64{0, 2, 4, 6}), 1e-12)
	assert.InDelta(t, 2.0, SlopeAt([]uint64{0, 1, 2, 3}, []float64{0, 2, 4, 6}), 1e-12)
	assert.InDelta(t, 1.0, SlopeAt([]uint64{0, 2, 4, 6}, []float64{0, 2, 4, 6}), 1e-12)
	assert.Zero(t, SlopeAt([]uint64{3, 3}, []float64{0, 2}), "one x: no slope")
}
