package units

import (
	"fmt"
	"math/big"
)

// The exact forms: an integer count of bytes with its human form beside
// it, as check's verdicts, diff and the NVML reconciliation print them.

// BytesExact renders an exact byte count with its human form beside it:
// "514669634 bytes (490.83 MiB)", "1 byte (1 B)".
func BytesExact(n uint64) string {
	if n == 1 {
		return "1 byte (1 B)"
	}
	return fmt.Sprintf("%d bytes (%s)", n, Bytes(n))
}

// BigBytesExact is BytesExact for a count that may exceed 64 bits (a limit
// computed from a huge percentage): beyond 64 bits, the integer alone.
func BigBytesExact(n *big.Int) string {
	if n.IsUint64() {
		return BytesExact(n.Uint64())
	}
	return n.String() + " bytes"
}

// SignedBytes renders a change in bytes in human form with its sign:
// "+119.34 MiB", "-768.00 MiB", "±0 B".
func SignedBytes(d int64) string {
	sign, mag := signed(d)
	return sign + Bytes(mag)
}

// DeltaExact renders a change in bytes, exact and human, each with its
// sign: "+125132800 bytes (+119.34 MiB)", "±0 bytes (±0 B)".
func DeltaExact(d int64) string {
	sign, mag := signed(d)
	return fmt.Sprintf("%s%d bytes (%s%s)", sign, mag, sign, Bytes(mag))
}

// signed splits d into its sign ("+", "-", "±" for 0) and magnitude; the
// magnitude of math.MinInt64 is exact, as a uint64.
func signed(d int64) (string, uint64) {
	switch {
	case d < 0:
		return "-", uint64(-d)
	case d == 0:
		return "±", 0
	}
	return "+", uint64(d)
}
