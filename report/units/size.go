package units

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strings"
	"unicode"
)

// SizeForms is what ParseSize accepts, quoted in every one of its errors.
const SizeForms = "use whole bytes (4096) or a number and a unit with no space: " +
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

// ParseSize parses a byte count a person typed: "4096", "512MiB",
// "1.5GiB", "100MB". The value must come to a whole number of bytes that
// fits in 64 bits; it is computed exactly (no floating point). Its errors
// are one line that names the problem and ends with SizeForms.
func ParseSize(s string) (uint64, error) {
	bad := func(problem string) (uint64, error) {
		return 0, fmt.Errorf("%s; %s", problem, SizeForms)
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
