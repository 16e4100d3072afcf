package analysis

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// TestStampSizes pins the stamps' entry sizes: 8 bytes a pair, 16 with a
// uint64 payload (they are most of the analyser's memory after the live
// allocations).
func TestStampSizes(t *testing.T) {
	assert.Equal(t, uintptr(8), unsafe.Sizeof(stampOff[struct{}]{}))
	assert.Equal(t, uintptr(16), unsafe.Sizeof(stampOff[uint64]{}))
}
