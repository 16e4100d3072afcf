package units

import (
	"math"
	"math/big"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBytesExact(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    uint64
		want string
	}{
		{"zero", 0, "0 bytes (0 B)"},
		{"one byte is singular", 1, "1 byte (1 B)"},
		{"two", 2, "2 bytes (2 B)"},
		// 514669634 / 2^20 = 490.829...
		{"MiB", 514669634, "514669634 bytes (490.83 MiB)"},
		{"max", math.MaxUint64, "18446744073709551615 bytes (16.00 EiB)"},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, BytesExact(tc.n)) })
	}
}

func TestBigBytesExact(t *testing.T) {
	assert.Equal(t, "1 byte (1 B)", BigBytesExact(big.NewInt(1)))
	assert.Equal(t, "3072 bytes (3.00 KiB)", BigBytesExact(big.NewInt(3<<10)))
	// 2^64 does not fit a uint64: the integer alone.
	two64 := new(big.Int).Lsh(big.NewInt(1), 64)
	assert.Equal(t, "18446744073709551616 bytes", BigBytesExact(two64))
	assert.Equal(t, "-5 bytes", BigBytesExact(big.NewInt(-5)))
}

func TestSignedBytes(t *testing.T) {
	for _, tc := range []struct {
		name        string
		d           int64
		human, full string
	}{
		{"zero", 0, "±0 B", "±0 bytes (±0 B)"},
		{"grow", 125132800, "+119.34 MiB", "+125132800 bytes (+119.34 MiB)"},
		{"shrink", -805306368, "-768.00 MiB", "-805306368 bytes (-768.00 MiB)"},
		{"one", 1, "+1 B", "+1 bytes (+1 B)"},
		// -2^63 has no int64 magnitude; as a uint64 it is exact: 8 EiB.
		{"min", math.MinInt64, "-8.00 EiB", "-9223372036854775808 bytes (-8.00 EiB)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.human, SignedBytes(tc.d))
			assert.Equal(t, tc.full, DeltaExact(tc.d))
		})
	}
}
