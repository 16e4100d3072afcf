package units

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    uint64
		want string
	}{
		{"zero", 0, "0 B"},
		{"under a KiB", 1023, "1023 B"},
		{"one KiB", 1024, "1.00 KiB"},
		{"60 MiB", 60 << 20, "60.00 MiB"},
		{"1.5 GiB", 3 << 29, "1.50 GiB"},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, Bytes(tc.n)) })
	}
	assert.Equal(t, "-1.00 MiB", FloatBytes(-1048576.2))
	assert.Equal(t, "1.19 MiB", FloatBytes(1251328))
}

// TestDuration: every magnitude gets its own unit, so a 0.4 ms iteration
// no longer reads "0.000 s".
func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		name string
		ns   uint64
		want string
	}{
		{"ns", 850, "850 ns"},
		{"µs", 412_345, "412 µs"},
		{"ms", 15_334_240, "15.3 ms"},
		{"s", 1_250_000_000, "1.25 s"},
		{"s below 2 min", 119_400_000_000, "119 s"},
		{"min", 210e9, "3.50 min"},
		{"h", 8100e9, "2.25 h"},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, Duration(tc.ns)) })
	}
	assert.Equal(t, "+200 µs", Offset(200_000))
	assert.Equal(t, "15.3 ms", Seconds(0.01533424))
	assert.Equal(t, "unknown", Seconds(-1))
	assert.Equal(t, "1.19 MiB per iteration", Rate(1251328, "iteration"))
}
