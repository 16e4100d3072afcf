package compare

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/vramprof/vramprof/report/pytests"
	"github.com/vramprof/vramprof/report/units"
)

// ErrNoTests: per-test limits were given and the recording has no per-test
// figures (no trace to read them from, or no allocation made in a pytest
// test), so the verdict is unknown.
var ErrNoTests = errors.New("verdict unknown")

// limitsExample is a line of a limits file, for the errors.
const limitsExample = `"tests/test_x.py::test_big 2GiB"`

// TestLimit is one line of a limits file (--limits): the tests whose node
// id matches Pattern may peak at Bytes.
type TestLimit struct {
	// Pattern is the glob as written: "*" matches any run of characters
	// ("/" and "::" too), "?" one character, anything else itself.
	Pattern string
	Bytes   uint64
	// Where is "FILE:LINE", for messages.
	Where string
	re    *regexp.Regexp
}

// Match reports whether the test id matches the pattern.
func (l *TestLimit) Match(id string) bool { return l.re.MatchString(id) }

// ParseTestLimits parses a limits file (named name in errors): one
// "TEST-ID-GLOB SIZE" per line ("tests/test_x.py::test_big 2GiB",
// "tests/test_io.py::* 512MiB"); blank lines and lines starting with "#"
// are skipped, and so is a " #" comment at a line's end. The first line
// whose pattern matches a test gives its limit.
func ParseTestLimits(name string, data []byte) ([]TestLimit, error) {
	var out []TestLimit
	for i, line := range strings.Split(string(data), "\n") {
		if j := strings.Index(line, " #"); j >= 0 {
			line = line[:j]
		}
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		where := fmt.Sprintf("%s:%d", name, i+1)
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%s: %q is not a limit; write one test id (a glob) and a size per line, such as %s",
				where, line, limitsExample)
		}
		n, err := units.ParseSize(f[1])
		if err != nil {
			return nil, fmt.Errorf("%s: size %q: %w", where, f[1], err)
		}
		out = append(out, TestLimit{Pattern: f[0], Bytes: n, Where: where, re: globRegexp(f[0])})
	}
	return out, nil
}

// globRegexp compiles a limits file's glob: "*" any run, "?" one
// character, the rest literal.
func globRegexp(glob string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for _, r := range glob {
		switch r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// perTest reports whether l holds a per-test limit.
func (l *Limits) perTest() bool { return l.MaxPeakPerTest != nil || len(l.TestLimits) > 0 }

// TestLimit is the peak test id may reach and where that limit comes
// from: a limits file's "FILE:LINE" (its first line matching id), else
// "--max-peak-per-test"; ok false when none applies.
func (l *Limits) TestLimit(id string) (bytes uint64, from string, ok bool) {
	for i := range l.TestLimits {
		if tl := &l.TestLimits[i]; tl.Match(id) {
			return tl.Bytes, tl.Where, true
		}
	}
	if l.MaxPeakPerTest != nil {
		return *l.MaxPeakPerTest, "--max-peak-per-test", true
	}
	return 0, "", false
}

// testChecks judges each pytest test's peak against its limit (a check per
// test; one without a limit is shown, not judged), or says why no test can
// be judged when limits were given.
func (v *Verdict) testChecks(snap *Figures, l *Limits) {
	switch {
	case !l.perTest() && len(snap.Tests) == 0:
		return
	case l.perTest() && !snap.TestsRead:
		v.Checks = append(v.Checks, unjudgedCheck("per-test limits need the recording's trace, an output directory or a .vpt file, "+
			"and this input is none (a report.json holds no per-test figures; a pipe is read once, for the others)"))
		return
	case l.perTest() && len(snap.Tests) == 0:
		v.Checks = append(v.Checks, unjudgedCheck("no allocation was made in a pytest test: no stack holds a test function's frame "+
			"(test* in test_*.py or *_test.py); were Python stacks recorded (--python auto, CPython 3.10 or newer)?"))
		return
	}
	used := make([]bool, len(l.TestLimits))
	for i := range snap.Tests {
		t := &snap.Tests[i]
		for j := range l.TestLimits {
			if l.TestLimits[j].Match(t.ID) {
				used[j] = true
				break
			}
		}
		measured := fmt.Sprintf("peak %s, leaked %s in %s", units.BytesExact(t.PeakBytes), units.BytesExact(t.LeakedBytes),
			plural(int(t.LeakedAllocations), "allocation"))
		limit, from, ok := l.TestLimit(t.ID)
		if !ok {
			v.Checks = append(v.Checks, Check{Name: t.ID, Pass: true, Unlimited: true, Test: t, Measured: measured, Limit: "none"})
			continue
		}
		c := limitCheck(t.ID, "peak", t.PeakBytes, limit)
		c.Test, c.Measured = t, measured
		c.Limit += " (" + from + ")"
		if !c.Pass {
			c.Message = fmt.Sprintf("%s: its allocations peaked at %s, over its limit %s (%s) by %s",
				t.ID, units.BytesExact(t.PeakBytes), units.BytesExact(limit), from, units.BytesExact(t.PeakBytes-limit))
			if t.PeakSite != "" {
				c.Sites = []Annotation{{Site: t.PeakSite, Message: c.Message + "; the peak was reached here"}}
			}
		}
		v.Checks = append(v.Checks, c)
	}
	for j, u := range used {
		if !u {
			tl := &l.TestLimits[j]
			v.Warnings = append(v.Warnings, fmt.Sprintf("%s: %s matched no test", tl.Where, tl.Pattern))
		}
	}
}

// unjudgedCheck fails: the per-test limits cannot be judged, for why.
func unjudgedCheck(why string) Check {
	return Check{Name: "per-test", Unjudged: true, Tool: true, Measured: "no per-test figures", Limit: "per-test limits",
		Message: why + ", so the verdict is unknown"}
}

// testBasis is how the verdict's tests were told apart: pytests.BasisPhases
// or pytests.BasisFrames when all were alike, "mixed" otherwise, "" with
// no test.
func (v *Verdict) testBasis() string {
	basis := ""
	for _, c := range v.Checks {
		switch {
		case c.Test == nil:
		case basis == "":
			basis = c.Test.Basis
		case basis != c.Test.Basis:
			return basisMixed
		}
	}
	return basis
}

// basisMixed: some tests were told apart by pytest's phases, others by
// their frames.
const basisMixed = "mixed"

// basisText says what a test's figures count under a basis.
func basisText(basis string) string {
	const fig = "peak: the most live at once"
	switch basis {
	case pytests.BasisPhases:
		return "made while pytest ran it (PYTEST_CURRENT_TEST), setup and teardown included; " + fig + "; leaked: live after its teardown"
	case basisMixed:
		return "made while pytest ran it (PYTEST_CURRENT_TEST), setup and teardown included, or where that was not recorded, " +
			"under its frame; " + fig + "; leaked: live after its teardown, or after its last call"
	default:
		return "under its frame in the stack; " + fig + "; leaked: live after its last call"
	}
}
