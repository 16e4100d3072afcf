package main

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strings"
	"unicode"

	"github.com/vramprof/vramprof/report/units"
)

// sizeForms is what the size flags accept, quoted in every size error.
const sizeForms = "use whole bytes (4096) or a number and a unit with no space: " +
	"KiB MiB GiB TiB PiB (1024-based: 512MiB, 1.5GiB) or kB MB GB TB PB (1000-based: 100MB)"

// sizeUnits maps a unit, lowercased, to its multiplier. Single letters (G,
// M) are left out on purpose: whether 12G means 12*10^9 or 12*2^30 depends
// on who wrote it, and a CI limit must not be off by 7%.
var sizeUnits = map[string]uint64{
	"":    1,
	"b":   1,
	"kb":  1e3,
	"mb":  1e6,
	"gb":  1e9,
	"tb":  1e12,
	"pb":  1e15,
	"kib": 1 << 10,
	"mib": 1 << 20,
	"gib": 1 << 30,
	"tib": 1 << 40,
	"pib": 1 << 50,
}

var sizePattern = regexp.MustCompile(`^([0-9]+)(\.[0-9]+)?([A-Za-z]*)$`)

// parseSize parses a byte count: "4096", "512MiB", "1.5GiB", "100MB". The
// value must come to a whole number of bytes that fits in 64 bits. Its
// errors name the problem and end with the accepted forms.
func parseSize(s string) (uint64, error) {
	bad := func(problem string) (uint64, error) {
		return 0, fmt.Errorf("%s; %s", problem, sizeForms)
	}
	switch {
	case s == "":
		return bad("empty size")
	case strings.IndexFunc(s, unicode.IsSpace) >= 0:
		return bad("a size has no spaces")
	case strings.HasPrefix(s, "-"):
		return bad("a size cannot be negative")
	}
	m := sizePattern.FindStringSubmatch(s)
	if m == nil {
		return bad("not a size")
	}
	mult, ok := sizeUnits[strings.ToLower(m[3])]
	if !ok {
		return bad(fmt.Sprintf("unknown unit %q", m[3]))
	}
	v, ok := new(big.Rat).SetString(m[1] + m[2])
	if !ok {
		return bad("not a size")
	}
	v.Mul(v, new(big.Rat).SetUint64(mult))
	if !v.IsInt() {
		return bad("not a whole number of bytes")
	}
	n := v.Num()
	if !n.IsUint64() {
		return bad(fmt.Sprintf("too large (at most %d bytes)", uint64(math.MaxUint64)))
	}
	return n.Uint64(), nil
}

var percentPattern = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?%?$`)

// parsePercent parses a percentage, "10", "2.5" or "10%", exactly (no
// floating point: the verdict must not depend on rounding).
func parsePercent(s string) (*big.Rat, error) {
	if !percentPattern.MatchString(s) {
		return nil, errors.New("not a percentage; use a non-negative number such as 10, 2.5 or 10%")
	}
	r, ok := new(big.Rat).SetString(strings.TrimSuffix(s, "%"))
	if !ok {
		return nil, errors.New("not a percentage; use a non-negative number such as 10, 2.5 or 10%")
	}
	return r, nil
}

// bytesText renders an exact byte count with its human form beside it:
// "514669634 bytes (490.83 MiB)".
func bytesText(n uint64) string {
	if n == 1 {
		return "1 byte (1 B)"
	}
	return fmt.Sprintf("%d bytes (%s)", n, units.Bytes(n))
}

// signedBytesText renders a change in bytes: "+125132800 bytes (+119.34 MiB)".
func signedBytesText(d int64) string {
	sign, mag := "+", uint64(d)
	if d < 0 {
		sign, mag = "-", uint64(-d)
	}
	if d == 0 {
		sign = "±"
	}
	return fmt.Sprintf("%s%d bytes (%s%s)", sign, mag, sign, units.Bytes(mag))
}

// byteDelta is new - base, saturated at int64's range.
func byteDelta(base, nw uint64) int64 {
	if nw >= base {
		return int64(min(nw-base, math.MaxInt64))
	}
	return -int64(min(base-nw, math.MaxInt64))
}

// percentChange is the change from base to new in percent, rounded to two
// decimals; nil when base is 0 (no percentage of nothing).
func percentChange(base, nw uint64) *float64 {
	if base == 0 {
		return nil
	}
	p := (float64(nw) - float64(base)) / float64(base) * 100
	p = math.Round(p*100) / 100
	return &p
}

// percentText renders percentChange for people: "+24.31%"; "" from 0.
func percentText(base, nw uint64) string {
	if p := percentChange(base, nw); p != nil {
		return fmt.Sprintf("%+.2f%%", *p)
	}
	return ""
}
