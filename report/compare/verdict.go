package compare

import (
	"errors"
	"fmt"
	"io"
	"math/big"
	"regexp"
	"strings"

	"github.com/vramprof/vramprof/report/pytests"
	"github.com/vramprof/vramprof/report/units"
)

// VerdictStacks is how many stacks a verdict shows as evidence.
const VerdictStacks = 5

var (
	// ErrCommandFailed: the command run by `check -- CMD` exited non-zero
	// (or was killed) and no memory limit was exceeded.
	ErrCommandFailed = errors.New("command failed")
	// ErrLostEvents: more events were lost than --allow-lost allows, so
	// the figures may be wrong either way and the verdict is unknown.
	ErrLostEvents = errors.New("verdict unknown")
	// ErrIncomplete: the recording (or the baseline) does not cover a
	// whole run (cut short, a moment report, segments that do not follow
	// each other), so the verdict is unknown.
	ErrIncomplete = errors.New("verdict unknown")
)

// Limits are what a recording is judged against; a nil limit is not
// checked.
type Limits struct {
	// MaxPeak and MaxLeak bound the peak and the bytes live at the end.
	MaxPeak, MaxLeak *uint64
	// MaxIncrease is the growth of the peak allowed over the baseline's,
	// in percent; MaxIncreaseText is how it was written ("10", "2.5"), for
	// the verdict. Judged only with a baseline.
	MaxIncrease     *big.Rat
	MaxIncreaseText string
	// AllowLost is the share of events (percent) that may be lost before
	// the verdict is unknown; nil: none may. AllowLostText is how it was
	// written.
	AllowLost     *big.Rat
	AllowLostText string
	// MaxPeakPerTest bounds each pytest test's peak (its own
	// allocations, see package pytests); TestLimits (a limits file) set
	// the tests they match apart, the first matching line winning.
	MaxPeakPerTest *uint64
	TestLimits     []TestLimit
}

// Check is one check's outcome.
type Check struct {
	// Name is the flag it checks ("max-peak"), "lost-events" or "command".
	Name string
	Pass bool
	// Measured, Limit and Margin are rendered for people.
	Measured, Limit, Margin string
	// Message is the one-line explanation of a failure (annotations,
	// JUnit).
	Message string
	// Tool marks a check that is no memory limit: the command's own
	// failure, or lost events.
	Tool bool
	// Lost marks the lost-events check: failing, it makes the verdict
	// unknown, whatever the other checks say.
	Lost bool
	// Whole marks the checks that the recording and the baseline are
	// whole runs ("complete", "baseline-complete"): failing, they make the
	// verdict unknown, whatever the other checks say.
	Whole bool
	// Test is the pytest test a per-test check is about; Unlimited marks
	// one shown with no limit to judge (not counted as a check).
	Test      *pytests.Test
	Unlimited bool
	// Unjudged marks the check that per-test limits could be judged:
	// failing, it makes the verdict unknown.
	Unjudged bool
	// Sites are where a failed check's evidence points in the source, one
	// annotation each (GitHub annotations carry their file and line);
	// none: one annotation with Message, at no line.
	Sites []Annotation
}

// Annotation is one place in the source a failed check points to: Site
// is a rendered frame ("func (file:line)", or "caller (file:line) ->
// helper (file:line)": the caller's line), Message what to say there.
type Annotation struct {
	Site, Message string
}

// Verdict is the outcome of a check run, rendered the same way each time
// for the same recording.
type Verdict struct {
	Figures *Figures
	// Baseline is what --max-increase compared with; nil when none.
	Baseline *Figures
	// Recording says where the figures come from, for the header:
	// "recording: DIR".
	Recording string
	// SourceRoot is the directory GitHub annotations name files relative
	// to (the repository's checkout: GITHUB_WORKSPACE, or the working
	// directory); "" leaves file and line out.
	SourceRoot string
	Checks     []Check
	// Grown are the peak stacks that grew over the baseline.
	Grown []StackChange
	// ShowPeak, ShowLeak: a peak or leak check failed, so its stacks are
	// the evidence.
	ShowPeak, ShowLeak bool
	// Warnings are said with the verdict (a limits file's line that
	// matched no test).
	Warnings []string

	// exitCode is the command's, when one ran.
	exitCode int
}

// Judge applies the limits to snap, and to its growth over base when base
// is not nil. exitCode is the exit code of the command that was recorded
// (check -- CMD), nil when judging a recording made before.
func Judge(snap, base *Figures, l Limits, exitCode *int) *Verdict {
	v := &Verdict{Figures: snap, Baseline: base}
	if exitCode != nil {
		code := *exitCode
		v.exitCode = code
		c := Check{Name: "command", Pass: code == 0, Tool: true,
			Measured: fmt.Sprintf("exit code %d", code), Limit: "exit code 0"}
		if !c.Pass {
			c.Message = fmt.Sprintf("command failed with exit code %d (its own failure, not a memory regression)", code)
		}
		v.Checks = append(v.Checks, c)
	}
	if len(snap.Incomplete) > 0 {
		v.Checks = append(v.Checks, wholeCheck("complete", "the recording", snap.Incomplete))
	}
	if base != nil && len(base.Incomplete) > 0 {
		v.Checks = append(v.Checks, wholeCheck("baseline-complete", "the baseline", base.Incomplete))
	}
	if snap.NoFigures {
		return v // nothing to judge: the complete check says why
	}
	if snap.Lost > 0 {
		v.Checks = append(v.Checks, lostCheck(snap.Lost, snap.Events, l.AllowLost, l.AllowLostText))
	}
	if len(snap.OOMs) > 0 {
		// Running out of memory is the failure a memory gate exists for,
		// whatever the limits say.
		v.Checks = append(v.Checks, oomCheck(snap.OOMs))
		if exitCode != nil && *exitCode != 0 {
			v.Checks[0].Message = fmt.Sprintf("command failed with exit code %d after running out of memory", *exitCode)
		}
	}
	if l.MaxPeak != nil {
		c := limitCheck("max-peak", "peak", snap.Peak, *l.MaxPeak)
		v.ShowPeak = v.ShowPeak || !c.Pass
		c.Sites = topSite(&c, snap.PeakStacks, "the most at the peak")
		v.Checks = append(v.Checks, c)
	}
	if l.MaxLeak != nil {
		c := limitCheck("max-leak", "live at end", snap.LiveEnd, *l.MaxLeak)
		v.ShowLeak = !c.Pass
		c.Sites = topSite(&c, snap.EndStacks, "the most live at the end")
		v.Checks = append(v.Checks, c)
	}
	if base != nil {
		pct := l.MaxIncrease
		if pct == nil {
			pct = new(big.Rat)
		}
		c := increaseCheck(snap.Peak, base.Peak, pct, l.MaxIncreaseText)
		v.ShowPeak = v.ShowPeak || !c.Pass
		v.Checks = append(v.Checks, c)
		for _, s := range DiffStacks(base.PeakStacks, snap.PeakStacks) {
			if s.Delta > 0 {
				v.Grown = append(v.Grown, s)
			}
		}
		if !c.Pass && len(v.Grown) > 0 {
			g := v.Grown[0]
			v.Checks[len(v.Checks)-1].Sites = []Annotation{{Site: g.Site,
				Message: fmt.Sprintf("%s; grew the most: %s at %s", c.Message, g.Text(), g.Site)}}
		}
	}
	v.testChecks(snap, &l)
	return v
}

// topSite is where a failed limit check points: the site of the largest
// of stacks (what it holds, said as what); none when c passed or no
// stack is known.
func topSite(c *Check, stacks []Stack, what string) []Annotation {
	if c.Pass || len(stacks) == 0 {
		return nil
	}
	top := stacks[0]
	return []Annotation{{Site: top.Site, Message: fmt.Sprintf("%s; %s: %s in %d allocations at %s",
		c.Message, what, units.BytesExact(top.Bytes), top.Count, top.Site)}}
}

// Failed says whether a memory check failed, and whether the command did.
func (v *Verdict) Failed() (memory, command bool) {
	for _, c := range v.Checks {
		switch {
		case c.Pass || c.Lost || c.Whole || c.Unjudged:
		case c.Tool:
			command = true
		default:
			memory = true
		}
	}
	return memory, command
}

// Unknown reports whether the recording or the baseline is no whole run,
// or more events were lost than --allow-lost allows: the figures may then
// be wrong either way, and no verdict holds.
func (v *Verdict) Unknown() bool {
	for _, c := range v.Checks {
		if (c.Lost || c.Whole || c.Unjudged) && !c.Pass {
			return true
		}
	}
	return false
}

// Outcome is what the verdict means for the caller: regression when a
// memory limit was exceeded (and the verdict is known); an error wrapping
// ErrLostEvents when the verdict is unknown, or ErrCommandFailed when only
// the command failed; neither when every check passed.
func (v *Verdict) Outcome() (regression bool, err error) {
	memFailed, cmdFailed := v.Failed()
	switch {
	case v.Unknown():
		for _, c := range v.Checks {
			if c.Whole && !c.Pass {
				return false, fmt.Errorf("%w: %s", ErrIncomplete, c.Message)
			}
		}
		for _, c := range v.Checks {
			if c.Unjudged && !c.Pass {
				return false, fmt.Errorf("%w: %s", ErrNoTests, c.Message)
			}
		}
		for _, c := range v.Checks {
			if c.Lost {
				return false, fmt.Errorf("%w: %s, limit %s: the figures may be wrong either way", ErrLostEvents, c.Measured, c.Limit)
			}
		}
	case memFailed:
		return true, nil
	case cmdFailed:
		return false, fmt.Errorf("%w with exit code %d; no memory limit was exceeded", ErrCommandFailed, v.exitCode)
	}
	return false, nil
}

// lostText says what lost events do to the figures: a missed free leaves
// memory live that was not (too high), a missed allocation the reverse.
const lostText = "the figures may be wrong either way (a missed free reads high, a missed allocation low)"

// lostCheck passes when lost/(lost+recorded) is at most allow percent
// (exact arithmetic); with no --allow-lost, any lost event fails it.
func lostCheck(lost, recorded uint64, allow *big.Rat, allowText string) Check {
	total := new(big.Int).Add(new(big.Int).SetUint64(lost), new(big.Int).SetUint64(recorded))
	share := new(big.Rat).SetFrac(new(big.Int).SetUint64(lost), total)
	pct := new(big.Rat).Mul(share, big.NewRat(100, 1))
	c := Check{Name: "lost-events", Lost: true, Tool: true,
		Measured: fmt.Sprintf("%d of %d events lost (%s%%)", lost, total, pct.FloatString(2)),
		Limit:    "none (no --allow-lost)"}
	if allow != nil {
		c.Limit = allowText + "% (--allow-lost)"
		c.Pass = pct.Cmp(allow) <= 0
	}
	if !c.Pass {
		c.Message = fmt.Sprintf("%s, more than allowed (%s): %s, so the verdict is unknown", c.Measured, c.Limit, lostText)
	}
	return c
}

// wholeCheck fails: what (the recording, the baseline) is no whole run,
// for reasons.
func wholeCheck(name, what string, reasons []string) Check {
	return Check{Name: name, Whole: true, Tool: true, Measured: "incomplete: " + strings.Join(reasons, "; "),
		Limit: "a whole recording",
		Message: fmt.Sprintf("%s is incomplete (%s): its figures may be wrong either way, so the verdict is unknown",
			what, strings.Join(reasons, "; "))}
}

// wholeHint is what to do about an incomplete recording.
const wholeHint = "check a whole recording: the output directory (or report.json) of a run that ended, not a moment's or a cut one"

// limitCheck is measured <= limit.
func limitCheck(name, what string, measured, limit uint64) Check {
	c := Check{Name: name, Pass: measured <= limit,
		Measured: what + " " + units.BytesExact(measured), Limit: units.BytesExact(limit)}
	if c.Pass {
		c.Margin = "margin " + units.BytesExact(limit-measured)
	} else {
		c.Margin = "over by " + units.BytesExact(measured-limit)
		c.Message = fmt.Sprintf("%s %s exceeds the limit %s by %s", what, units.BytesExact(measured), units.BytesExact(limit), units.BytesExact(measured-limit))
	}
	return c
}

// increaseCheck passes when the peak grew at most pct percent over the
// baseline's: peak*100 <= base*(100+pct), in exact arithmetic.
func increaseCheck(peak, base uint64, pct *big.Rat, pctText string) Check {
	hundred := big.NewRat(100, 1)
	allowedRat := new(big.Rat).Add(hundred, pct)
	allowedRat.Mul(allowedRat, new(big.Rat).SetUint64(base))
	allowedRat.Quo(allowedRat, hundred)
	// The largest whole peak allowed.
	allowed := new(big.Int).Quo(allowedRat.Num(), allowedRat.Denom())
	peakInt := new(big.Int).SetUint64(peak)
	pass := peakInt.Cmp(allowed) <= 0

	change := percentText(base, peak)
	if change == "" {
		change = "+0.00%"
	}
	c := Check{Name: "max-increase", Pass: pass,
		Measured: fmt.Sprintf("peak %s, %s over the baseline's %s", units.BytesExact(peak), change, units.BytesExact(base)),
		Limit:    fmt.Sprintf("+%s%%, at most %s", pctText, units.BigBytesExact(allowed))}
	over := new(big.Int).Sub(peakInt, allowed)
	if pass {
		c.Margin = "margin " + units.BigBytesExact(new(big.Int).Neg(over))
	} else {
		c.Margin = "over by " + units.BigBytesExact(over)
		c.Message = fmt.Sprintf("peak %s grew %s over the baseline's %s; at most +%s%% (%s) allowed, over by %s",
			units.BytesExact(peak), change, units.BytesExact(base), pctText, units.BigBytesExact(allowed), units.BigBytesExact(over))
	}
	return c
}

var percentPattern = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?%?$`)

// ParsePercent parses a percentage, "10", "2.5" or "10%", exactly (no
// floating point: the verdict must not depend on rounding).
func ParsePercent(s string) (*big.Rat, error) {
	if !percentPattern.MatchString(s) {
		return nil, errors.New("not a percentage; use a non-negative number such as 10, 2.5 or 10%")
	}
	r, ok := new(big.Rat).SetString(strings.TrimSuffix(s, "%"))
	if !ok {
		return nil, errors.New("not a percentage; use a non-negative number such as 10, 2.5 or 10%")
	}
	return r, nil
}

// Header is the verdict's first line after "vramprof check: ": "PASS (2
// checks)", "FAIL: memory regression (1 of 2 checks failed)", "ERROR: ...",
// "UNKNOWN: ...".
func (v *Verdict) Header() string {
	memFailed, cmdFailed := v.Failed()
	n, failed := 0, 0
	for _, c := range v.Checks {
		if !c.Tool && !c.Unlimited {
			n++
			if !c.Pass {
				failed++
			}
		}
	}
	exit, lost, whole, unjudged := "", "", "", ""
	for _, c := range v.Checks {
		switch {
		case c.Whole && !c.Pass:
			if whole == "" {
				whole = c.Message
			}
		case c.Unjudged && !c.Pass:
			unjudged = c.Message
		case c.Whole, c.Unjudged:
		case c.Lost:
			lost = c.Measured
		case c.Tool:
			exit = c.Measured
		}
	}
	switch {
	case whole != "":
		return fmt.Sprintf("UNKNOWN: %s (%s)", whole, wholeHint)
	case unjudged != "" && lost == "":
		return "UNKNOWN: " + unjudged
	case v.Unknown():
		return fmt.Sprintf("UNKNOWN: %s; %s, so no verdict (accept up to PCT%% lost with --allow-lost PCT)", lost, lostText)
	case v.oomFailed() && cmdFailed:
		return fmt.Sprintf("FAIL: out of memory (%d of %s failed), and the command failed with %s", failed, plural(n, "check"), exit)
	case v.oomFailed():
		return fmt.Sprintf("FAIL: out of memory (%d of %s failed)", failed, plural(n, "check"))
	case memFailed && cmdFailed:
		return fmt.Sprintf("FAIL: memory regression (%d of %s failed), and the command failed with %s", failed, plural(n, "check"), exit)
	case memFailed:
		return fmt.Sprintf("FAIL: memory regression (%d of %s failed)", failed, plural(n, "check"))
	case cmdFailed:
		return fmt.Sprintf("ERROR: command failed with %s (not a memory regression: %s passed)", exit, plural(n, "memory check"))
	}
	return fmt.Sprintf("PASS (%s)", plural(n, "check"))
}

// oomFailed reports whether the recording ran out of memory.
func (v *Verdict) oomFailed() bool {
	for _, c := range v.Checks {
		if c.Name == "oom" && !c.Pass {
			return true
		}
	}
	return false
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// CommandText joins argv for display, quoting the arguments a shell would
// split or expand.
func CommandText(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

func passText(pass bool) string {
	if pass {
		return "PASS"
	}
	return "FAIL"
}

// lostPassText: too many lost events make the verdict unknown, not failed.
func lostPassText(pass bool) string {
	if pass {
		return "PASS"
	}
	return "UNKNOWN"
}

// lateWarning says what n events out of effect order mean for the figures.
func lateWarning(n uint64) string {
	return fmt.Sprintf("%d events late (a free that took longer than the reorder window): they may be misordered against calls on the same address", n)
}

// WriteText writes the verdict for people: the header, the figures, one
// line per check, and the stacks that are the evidence of a failure.
func (v *Verdict) WriteText(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	s := v.Figures
	p("vramprof check: %s\n", v.Header())
	if len(s.Command) > 0 {
		p("command: %s\n", CommandText(s.Command))
	}
	p("%s\n", v.Recording)
	if s.NoFigures {
		p("figures: none (the recording could not be read into figures)\n")
	} else {
		p("peak %s, live at end %s, %d allocations\n", units.BytesExact(s.Peak), units.BytesExact(s.LiveEnd), s.Allocations)
	}
	for _, r := range s.Incomplete {
		p("WARNING: incomplete recording: %s\n", r)
	}
	if b := v.Baseline; b != nil {
		for _, r := range b.Incomplete {
			p("WARNING: incomplete baseline %s: %s\n", b.Source, r)
		}
	}
	if s.Lost > 0 {
		p("WARNING: %d events lost (%s): %s\n", s.Lost, s.lostCause(), lostText)
	}
	if s.Late > 0 {
		p("WARNING: %s\n", lateWarning(s.Late))
	}
	if s.Truncated {
		p("WARNING: the trace was cut short: the figures cover the records before the cut\n")
	}
	for _, w := range v.Warnings {
		p("WARNING: %s\n", w)
	}
	tests := false
	for _, c := range v.Checks {
		if c.Test != nil {
			if !tests {
				tests = true
				p("per pytest test (its own allocations at the %s layer; %s):\n", c.Test.Layer, basisText(v.testBasis()))
			}
			switch {
			case c.Unlimited:
				p("INFO  %s: %s; no limit\n", c.Name, c.Measured)
			default:
				p("%s  %s: %s; limit %s; %s\n", passText(c.Pass), c.Name, c.Measured, c.Limit, c.Margin)
			}
			continue
		}
		if c.Lost || c.Whole || c.Unjudged {
			p("%s  %-13s %s; limit %s\n", lostPassText(c.Pass), c.Name, c.Measured, c.Limit)
			continue
		}
		if c.Tool {
			p("%s  %-13s %s\n", passText(c.Pass), c.Name, c.Measured)
			continue
		}
		if c.Margin == "" {
			p("%s  %-13s %s; limit: %s\n", passText(c.Pass), c.Name, c.Measured, c.Limit)
			continue
		}
		p("%s  %-13s %s; limit %s; %s\n", passText(c.Pass), c.Name, c.Measured, c.Limit, c.Margin)
	}
	v.writeStacks(w)
}

// writeStacks writes the evidence of the failed checks: the stacks that
// grew over the baseline when there is one, else the top stacks.
func (v *Verdict) writeStacks(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	s := v.Figures
	if v.oomFailed() {
		writeOOMs(w, s.OOMs)
	}
	if v.Baseline != nil && v.ShowPeak {
		p("\nstacks that grew at the peak (vs baseline %s):\n", v.Baseline.Source)
		writeGrown(w, v.Grown, v.Baseline.StacksComplete)
	} else if v.ShowPeak {
		p("\ntop stacks at the peak:\n")
		writeTop(w, s.PeakStacks, s.Peak)
	}
	if v.ShowLeak {
		p("\ntop stacks live at the end:\n")
		writeTop(w, s.EndStacks, s.LiveEnd)
		for _, f := range s.Leaks {
			p("  leak finding: %s\n", f.Summary)
		}
	}
}

func writeTop(w io.Writer, stacks []Stack, whole uint64) {
	writeTopIndent(w, stacks, whole, "  ")
}

// writeTopIndent writes the top VerdictStacks stacks, each line indented.
func writeTopIndent(w io.Writer, stacks []Stack, whole uint64, indent string) {
	if len(stacks) == 0 {
		fmt.Fprintf(w, "%snone\n", indent)
	}
	for i, st := range stacks {
		if i == VerdictStacks {
			fmt.Fprintf(w, "%s... %d more\n", indent, len(stacks)-i)
			break
		}
		share := 0.0
		if whole > 0 {
			share = float64(st.Bytes) / float64(whole) * 100
		}
		fmt.Fprintf(w, "%s%d. %s, %.1f%%, in %d allocations at %s\n", indent, i+1, units.BytesExact(st.Bytes), share, st.Count, st.Site)
		for _, f := range st.Frames {
			fmt.Fprintf(w, "%s     %s\n", indent, f)
		}
	}
}

func grownLabel(s StackChange, complete bool) string {
	if s.Status == StatusNew && !complete {
		return "new (or below the baseline's top stacks)"
	}
	return s.Status
}

func writeGrown(w io.Writer, grown []StackChange, complete bool) {
	if len(grown) == 0 {
		fmt.Fprintf(w, "  none\n")
	}
	for i, s := range grown {
		if i == VerdictStacks {
			fmt.Fprintf(w, "  ... %d more\n", len(grown)-i)
			break
		}
		fmt.Fprintf(w, "  %d. [%s] %s at %s\n", i+1, grownLabel(s, complete), s.Text(), s.Site)
		for _, f := range s.Frames {
			fmt.Fprintf(w, "       %s\n", f)
		}
	}
}
