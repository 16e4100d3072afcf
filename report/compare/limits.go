package compare

import (
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"

	"github.com/vramprof/vramprof/report/units"
)

// LimitFlags are check's limits as the command line gives them, each nil
// when not given.
type LimitFlags struct {
	MaxPeak, MaxLeak       *string // sizes: "512MiB", "1.5GiB", "4096"
	AllowLost, MaxIncrease *string // percentages: "0.1", "10%"
	// Baseline and WriteBaseline say whether --baseline and
	// --write-baseline were given.
	Baseline, WriteBaseline bool
	// MaxPeakPerTest is --max-peak-per-test's size; LimitsFile --limits'
	// path ("" when not given), read here (see ParseTestLimits).
	MaxPeakPerTest *string
	LimitsFile     string
}

// ParseLimits parses f into Limits and checks that they make a check:
// --allow-lost is at most 100 percent, --max-increase and --baseline come
// together, and something is checked. Errors name the flag, in check's
// words; the caller reports them as usage errors.
func ParseLimits(f LimitFlags) (Limits, error) {
	var l Limits
	for _, s := range []struct {
		name string
		text *string
		dst  **uint64
	}{{"max-peak", f.MaxPeak, &l.MaxPeak}, {"max-leak", f.MaxLeak, &l.MaxLeak}, {"max-peak-per-test", f.MaxPeakPerTest, &l.MaxPeakPerTest}} {
		if s.text == nil {
			continue
		}
		n, err := units.ParseSize(*s.text)
		if err != nil {
			return Limits{}, fmt.Errorf("--%s %q: %w", s.name, *s.text, err)
		}
		*s.dst = &n
	}
	if v := f.AllowLost; v != nil {
		r, err := ParsePercent(*v)
		if err != nil || r.Cmp(big.NewRat(100, 1)) > 0 {
			return Limits{}, fmt.Errorf("--allow-lost %q: give a percentage from 0 to 100, such as 0.1", *v)
		}
		l.AllowLost, l.AllowLostText = r, strings.TrimSuffix(*v, "%")
	}
	if v := f.MaxIncrease; v != nil {
		r, err := ParsePercent(*v)
		if err != nil {
			return Limits{}, fmt.Errorf("--max-increase %q: %w", *v, err)
		}
		l.MaxIncrease, l.MaxIncreaseText = r, strings.TrimSuffix(*v, "%")
	}
	if f.LimitsFile != "" {
		data, err := os.ReadFile(f.LimitsFile)
		if err != nil {
			return Limits{}, fmt.Errorf("--limits: %w", err)
		}
		if l.TestLimits, err = ParseTestLimits(f.LimitsFile, data); err != nil {
			return Limits{}, fmt.Errorf("--limits %w", err)
		}
		if len(l.TestLimits) == 0 {
			return Limits{}, fmt.Errorf("--limits %s holds no limit; write one test id (a glob) and a size per line, such as %s", f.LimitsFile, limitsExample)
		}
	}
	switch {
	case f.MaxIncrease != nil && !f.Baseline:
		return Limits{}, errors.New("--max-increase needs --baseline FILE, the run to compare with")
	case f.Baseline && f.MaxIncrease == nil:
		return Limits{}, errors.New("--baseline needs --max-increase PCT, the growth allowed over it")
	case l.MaxPeak == nil && l.MaxLeak == nil && !f.Baseline && !f.WriteBaseline && !l.perTest():
		return Limits{}, errors.New("nothing to check; give --max-peak, --max-leak, --max-peak-per-test, --limits FILE, --baseline with --max-increase, or --write-baseline")
	}
	return l, nil
}
