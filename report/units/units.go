package units

import (
	"fmt"
	"math"
	"strconv"
)

// Bytes renders a byte count in binary units with two decimals ("1.50 GiB",
// "512 B").
func Bytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	names := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v := float64(n) / unit
	i := 0
	for v >= unit && i < len(names)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.2f %s", v, names[i])
}

// FloatBytes renders a fractional byte count (a rate, a mean) as Bytes
// does, rounded to a whole byte; negative values get a minus sign.
func FloatBytes(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "unknown"
	}
	if v < 0 {
		return "-" + Bytes(uint64(math.Round(-v)))
	}
	return Bytes(uint64(math.Round(v)))
}

// Duration renders nanoseconds in the unit that fits, with three
// significant digits: "850 ns", "412 µs", "15.3 ms", "1.25 s", "42.0 s",
// "3.50 min", "2.25 h". Up to 2 minutes it stays in seconds, up to 2 hours
// in minutes, so neighbouring figures compare at a glance.
func Duration(ns uint64) string {
	f := float64(ns)
	switch {
	case ns < 1e3:
		return fmt.Sprintf("%d ns", ns)
	case ns < 1e6:
		return sig3(f/1e3) + " µs"
	case ns < 1e9:
		return sig3(f/1e6) + " ms"
	case ns < 120e9:
		return sig3(f/1e9) + " s"
	case ns < 7200e9:
		return sig3(f/60e9) + " min"
	}
	return sig3(f/3600e9) + " h"
}

// Seconds renders a duration given in seconds, as Duration does.
func Seconds(s float64) string {
	if math.IsNaN(s) || s < 0 {
		return "unknown"
	}
	if s >= math.MaxUint64/1e9 {
		return sig3(s/3600) + " h"
	}
	return Duration(uint64(math.Round(s * 1e9)))
}

// Offset renders a time since the start of a run: "+412 µs", "+1.25 s".
func Offset(ns uint64) string {
	if ns == 0 {
		return "+0 s"
	}
	return "+" + Duration(ns)
}

// Rate renders bytes per base, where base names the time base or the
// iteration: "1.19 MiB per iteration", "71.6 MiB per minute".
func Rate(bytes float64, base string) string {
	return FloatBytes(bytes) + " per " + base
}

// sig3 prints v (>= 1) with three significant digits: 1.25, 15.3, 412.
func sig3(v float64) string {
	switch {
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
