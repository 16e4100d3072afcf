package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vramprof/vramprof/probes/allocspec"
	"github.com/vramprof/vramprof/report"
)

// Exit codes of `vramprof check`: 0 every check passed, 1 a memory
// regression (some limit was exceeded, whatever else happened), 2 a usage or
// tool error, or the checked command failing on its own (exit code not 0)
// while every memory limit held.
const (
	exitCheckPass       = 0
	exitCheckRegression = 1
)

// baselineSchema names the file `check --write-baseline` writes. Fields are
// only ever added to it.
const baselineSchema = "vramprof/baseline/v1"

// baselineStacks is how many peak stacks a baseline keeps: enough to say
// which stacks grew, small enough to commit next to the code.
const baselineStacks = 20

// verdictStacks is how many stacks the verdict shows as evidence.
const verdictStacks = 5

// errCommandFailed: the command run by `check -- CMD` exited non-zero (or was
// killed) and no memory limit was exceeded.
var errCommandFailed = errors.New("command failed")

// errLostEvents: more events were lost than --allow-lost allows, so the
// figures may be wrong either way and the verdict is unknown.
var errLostEvents = errors.New("verdict unknown")

// checkOptions are the flags of `vramprof check`.
type checkOptions struct {
	maxPeak, maxLeak *uint64
	baseline         string
	maxIncrease      *big.Rat
	maxIncreaseText  string
	// allowLost is --allow-lost: the share of events (percent) that may be
	// lost before the verdict is unknown; nil: none may.
	allowLost     *big.Rat
	allowLostText string
	force         bool // --force: overwrite an earlier recording in -o DIR
	// The recording flags of -- CMD, as run's (-q is accepted for
	// symmetry: check's recording is always quiet, its verdict printed).
	nvml, pool    string
	python        pythonFlags
	capacity      uint64
	allocs        []allocspec.Allocator
	quiet         bool
	writeBaseline string
	junit         string
	out           string
	input         string
	argv          []string
}

func parseCheck(args []string) (*checkOptions, error) {
	const usage = "usage: vramprof check [--max-peak SIZE] [--max-leak SIZE] [--baseline FILE --max-increase PCT] " +
		"[--allow-lost PCT] [--write-baseline FILE] [--junit FILE] [-o DIR] [--force] (-- CMD [ARGS...] | INPUT)"
	o := &checkOptions{}
	// Everything after the first "--" is the command; before it, flags and
	// at most one INPUT in any order.
	flagArgs, hasCmd := args, false
	if i := slices.Index(args, "--"); i >= 0 {
		flagArgs, o.argv, hasCmd = args[:i], args[i+1:], true
	}
	c, err := parseCommand("check", flagArgs)
	if err != nil {
		return nil, err
	}
	f := &c.Check
	positional := f.Input
	o.baseline, o.writeBaseline, o.junit, o.force = f.Baseline, f.WriteBaseline, f.JUnit, f.Force
	if f.Output != nil {
		o.out = *f.Output
	}
	o.pool, o.python, o.quiet = f.Pool, f.Python, f.Quiet
	if o.nvml, o.capacity, o.allocs, err = f.recordFlags.options("check"); err != nil {
		return nil, err
	}
	set := map[string]bool{"o": f.Output != nil, "max-peak": f.MaxPeak != nil, "max-leak": f.MaxLeak != nil,
		"allow-lost": f.AllowLost != nil, "max-increase": f.MaxIncrease != nil}
	var maxPeak, maxLeak string
	for _, s := range []struct {
		p   *string
		dst *string
	}{{f.MaxPeak, &maxPeak}, {f.MaxLeak, &maxLeak}, {f.AllowLost, &o.allowLostText}, {f.MaxIncrease, &o.maxIncreaseText}} {
		if s.p != nil {
			*s.dst = *s.p
		}
	}

	switch {
	case hasCmd && len(positional) > 0:
		return nil, usageError(fmt.Errorf("check: give either -- CMD or INPUT, not both (unexpected %q)", positional[0]))
	case hasCmd && len(o.argv) == 0:
		return nil, usageError(errors.New("check: no command after --; " + usage))
	case !hasCmd && len(positional) == 0:
		return nil, usageError(errors.New("check: give a command (-- CMD [ARGS...]) or an INPUT (an output directory, .vpt trace or report.json)"))
	case len(positional) > 1:
		return nil, usageError(fmt.Errorf("check: give one INPUT, not %d", len(positional)))
	case !hasCmd && set["o"]:
		return nil, usageError(errors.New("check: -o keeps the recording of -- CMD; an INPUT is already a recording"))
	}
	if len(positional) == 1 {
		o.input = positional[0]
	}
	for _, s := range []struct {
		name string
		text string
		dst  **uint64
	}{{"max-peak", maxPeak, &o.maxPeak}, {"max-leak", maxLeak, &o.maxLeak}} {
		if !set[s.name] {
			continue
		}
		n, err := parseSize(s.text)
		if err != nil {
			return nil, usageError(fmt.Errorf("check: --%s %q: %w", s.name, s.text, err))
		}
		*s.dst = &n
	}
	if set["allow-lost"] {
		r, err := parsePercent(o.allowLostText)
		if err != nil || r.Cmp(big.NewRat(100, 1)) > 0 {
			return nil, usageError(fmt.Errorf("check: --allow-lost %q: give a percentage from 0 to 100, such as 0.1", o.allowLostText))
		}
		o.allowLost = r
		o.allowLostText = strings.TrimSuffix(o.allowLostText, "%")
	}
	if set["max-increase"] {
		r, err := parsePercent(o.maxIncreaseText)
		if err != nil {
			return nil, usageError(fmt.Errorf("check: --max-increase %q: %w", o.maxIncreaseText, err))
		}
		o.maxIncrease = r
		o.maxIncreaseText = strings.TrimSuffix(o.maxIncreaseText, "%")
	}
	switch {
	case set["max-increase"] && o.baseline == "":
		return nil, usageError(errors.New("check: --max-increase needs --baseline FILE, the run to compare with"))
	case o.baseline != "" && !set["max-increase"]:
		return nil, usageError(errors.New("check: --baseline needs --max-increase PCT, the growth allowed over it"))
	case o.maxPeak == nil && o.maxLeak == nil && o.baseline == "" && o.writeBaseline == "":
		return nil, usageError(errors.New("check: nothing to check; give --max-peak, --max-leak, --baseline with --max-increase, or --write-baseline"))
	}
	return o, nil
}

// checkResult is one check's outcome.
type checkResult struct {
	// name is the flag it checks ("max-peak") or "command".
	name string
	pass bool
	// measured, limit and margin are rendered for people; line is the
	// whole verdict line after the name.
	measured, limit, margin string
	// message is the one-line explanation of a failure (annotations,
	// JUnit).
	message string
	// tool marks the command's own failure, not a memory check.
	tool bool
	// lost marks the lost-events check: failing, it makes the verdict
	// unknown (exit 2), whatever the other checks say.
	lost bool
}

// verdict is the outcome of a check run, rendered the same way each time
// for the same recording.
type verdict struct {
	snap     *snapshot
	baseline *snapshot
	// recording says where the figures come from, for the header.
	recording string
	checks    []checkResult
	// grown are the peak stacks that grew over the baseline; top the
	// top peak stacks; ends the top stacks live at the end.
	grown []diffStack
	// showPeak, showLeak: a peak or leak check failed, so its stacks are
	// the evidence.
	showPeak, showLeak bool
}

func (v *verdict) failed() (memory, command bool) {
	for _, c := range v.checks {
		switch {
		case c.pass || c.lost:
		case c.tool:
			command = true
		default:
			memory = true
		}
	}
	return memory, command
}

// unknown reports whether more events were lost than --allow-lost allows:
// the figures may then be wrong either way, and no verdict holds.
func (v *verdict) unknown() bool {
	for _, c := range v.checks {
		if c.lost && !c.pass {
			return true
		}
	}
	return false
}

// checkCmd records `-- CMD` (as `vramprof run` does) or reads INPUT, judges
// it against the limits, prints the verdict to stdout and writes the
// requested files. It returns the exit code, or an error for exit 2.
func checkCmd(ctx context.Context, o *checkOptions, stdout io.Writer) (int, error) {
	var base *snapshot
	if o.baseline != "" {
		// Before the run: a bad baseline should not cost an hour of training.
		var err error
		if base, err = loadBaseline(o.baseline); err != nil {
			return 0, fmt.Errorf("check: --baseline %s: %w", o.baseline, err)
		}
	}
	var (
		snap      *snapshot
		recording string
		exitCode  int
	)
	if o.argv != nil {
		dir := o.out
		if dir == "" {
			tmp, err := os.MkdirTemp("", "vramprof-check-")
			if err != nil {
				return 0, fmt.Errorf("%w: %w", errOutputDir, err)
			}
			defer os.RemoveAll(tmp)
			dir = tmp
			recording = "recording: temporary, removed (keep it with -o DIR)"
		} else {
			recording = "recording: " + dir
		}
		code, err := run(ctx, &runOptions{out: dir, force: o.force, nvml: o.nvml, pool: o.pool, python: o.python,
			capacity: o.capacity, allocs: o.allocs, argv: o.argv, quiet: true, momentInterval: defaultMomentInterval})
		if err != nil {
			return 0, err
		}
		exitCode = code
		// run wrote report.json from the trace it recorded: the same
		// analysis a later `vramprof check DIR` makes.
		if snap, err = loadSnapshot(filepath.Join(dir, jsonFile)); err != nil {
			return 0, fmt.Errorf("check: %w", err)
		}
		snap.source = commandText(o.argv)
	} else {
		var err error
		if snap, err = loadSnapshot(o.input); err != nil {
			return 0, fmt.Errorf("check: %s: %w", o.input, err)
		}
		recording = "recording: " + o.input
	}

	v := judge(o, snap, base, exitCode)
	v.recording = recording
	memFailed, cmdFailed := v.failed()

	var text bytes.Buffer
	v.writeText(&text)
	if os.Getenv("GITHUB_ACTIONS") == "true" {
		v.writeAnnotations(&text)
	}
	if _, err := stdout.Write(text.Bytes()); err != nil {
		return 0, fmt.Errorf("check: write verdict: %w", err)
	}
	if o.junit != "" {
		if err := writeFileAtomic(o.junit, v.writeJUnit); err != nil {
			return 0, fmt.Errorf("check: --junit: %w", err)
		}
	}
	if path := os.Getenv("GITHUB_STEP_SUMMARY"); path != "" {
		if err := appendFile(path, v.writeMarkdown); err != nil {
			return 0, fmt.Errorf("check: GITHUB_STEP_SUMMARY: %w", err)
		}
	}
	// A failed command's recording is no baseline for the next run, nor
	// one whose figures lost events may have skewed.
	if o.writeBaseline != "" && !cmdFailed && !v.unknown() {
		if err := writeFileAtomic(o.writeBaseline, func(w io.Writer) error { return writeBaselineJSON(w, snap) }); err != nil {
			return 0, fmt.Errorf("check: --write-baseline: %w", err)
		}
	}
	switch {
	case v.unknown():
		for _, c := range v.checks {
			if c.lost {
				return 0, fmt.Errorf("check: %w: %s, limit %s: the figures may be wrong either way", errLostEvents, c.measured, c.limit)
			}
		}
	case memFailed:
		return exitCheckRegression, nil
	case cmdFailed:
		return 0, fmt.Errorf("check: %w with exit code %d; no memory limit was exceeded", errCommandFailed, exitCode)
	}
	return exitCheckPass, nil
}

// judge applies the limits to snap.
func judge(o *checkOptions, snap, base *snapshot, exitCode int) *verdict {
	v := &verdict{snap: snap, baseline: base}
	if o.argv != nil {
		c := checkResult{name: "command", pass: exitCode == 0, tool: true,
			measured: fmt.Sprintf("exit code %d", exitCode), limit: "exit code 0"}
		if !c.pass {
			c.message = fmt.Sprintf("command failed with exit code %d (its own failure, not a memory regression)", exitCode)
		}
		v.checks = append(v.checks, c)
	}
	if snap.lost > 0 {
		v.checks = append(v.checks, lostCheck(snap.lost, snap.events, o.allowLost, o.allowLostText))
	}
	if o.maxPeak != nil {
		c := limitCheck("max-peak", "peak", snap.peak, *o.maxPeak)
		v.showPeak = v.showPeak || !c.pass
		v.checks = append(v.checks, c)
	}
	if o.maxLeak != nil {
		c := limitCheck("max-leak", "live at end", snap.liveEnd, *o.maxLeak)
		v.showLeak = !c.pass
		v.checks = append(v.checks, c)
	}
	if base != nil {
		c := increaseCheck(snap.peak, base.peak, o.maxIncrease, o.maxIncreaseText)
		v.showPeak = v.showPeak || !c.pass
		v.checks = append(v.checks, c)
		for _, s := range diffStacks(base.peakStacks, snap.peakStacks) {
			if s.Delta > 0 {
				v.grown = append(v.grown, s)
			}
		}
	}
	return v
}

// lostText says what lost events do to the figures: a missed free leaves
// memory live that was not (too high), a missed allocation the reverse.
const lostText = "the figures may be wrong either way (a missed free reads high, a missed allocation low)"

// lostCheck passes when lost/(lost+recorded) is at most allow percent
// (exact arithmetic); with no --allow-lost, any lost event fails it.
func lostCheck(lost, recorded uint64, allow *big.Rat, allowText string) checkResult {
	total := new(big.Int).Add(new(big.Int).SetUint64(lost), new(big.Int).SetUint64(recorded))
	share := new(big.Rat).SetFrac(new(big.Int).SetUint64(lost), total)
	pct := new(big.Rat).Mul(share, big.NewRat(100, 1))
	c := checkResult{name: "lost-events", lost: true, tool: true,
		measured: fmt.Sprintf("%d of %d events lost (%s%%)", lost, total, pct.FloatString(2)),
		limit:    "none (no --allow-lost)"}
	if allow != nil {
		c.limit = allowText + "% (--allow-lost)"
		c.pass = pct.Cmp(allow) <= 0
	}
	if !c.pass {
		c.message = fmt.Sprintf("%s, more than allowed (%s): %s, so the verdict is unknown", c.measured, c.limit, lostText)
	}
	return c
}

// limitCheck is measured <= limit.
func limitCheck(name, what string, measured, limit uint64) checkResult {
	c := checkResult{name: name, pass: measured <= limit,
		measured: what + " " + bytesText(measured), limit: bytesText(limit)}
	if c.pass {
		c.margin = "margin " + bytesText(limit-measured)
	} else {
		c.margin = "over by " + bytesText(measured-limit)
		c.message = fmt.Sprintf("%s %s exceeds the limit %s by %s", what, bytesText(measured), bytesText(limit), bytesText(measured-limit))
	}
	return c
}

// increaseCheck passes when the peak grew at most pct percent over the
// baseline's: peak*100 <= base*(100+pct), in exact arithmetic.
func increaseCheck(peak, base uint64, pct *big.Rat, pctText string) checkResult {
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
	c := checkResult{name: "max-increase", pass: pass,
		measured: fmt.Sprintf("peak %s, %s over the baseline's %s", bytesText(peak), change, bytesText(base)),
		limit:    fmt.Sprintf("+%s%%, at most %s", pctText, bigBytesText(allowed))}
	over := new(big.Int).Sub(peakInt, allowed)
	if pass {
		c.margin = "margin " + bigBytesText(new(big.Int).Neg(over))
	} else {
		c.margin = "over by " + bigBytesText(over)
		c.message = fmt.Sprintf("peak %s grew %s over the baseline's %s; at most +%s%% (%s) allowed, over by %s",
			bytesText(peak), change, bytesText(base), pctText, bigBytesText(allowed), bigBytesText(over))
	}
	return c
}

// bigBytesText is bytesText for a count that may exceed 64 bits (a limit
// computed from a huge percentage).
func bigBytesText(n *big.Int) string {
	if n.IsUint64() {
		return bytesText(n.Uint64())
	}
	return n.String() + " bytes"
}

func (v *verdict) header() string {
	memFailed, cmdFailed := v.failed()
	n, failed := 0, 0
	for _, c := range v.checks {
		if !c.tool {
			n++
			if !c.pass {
				failed++
			}
		}
	}
	exit, lost := "", ""
	for _, c := range v.checks {
		switch {
		case c.lost:
			lost = c.measured
		case c.tool:
			exit = c.measured
		}
	}
	switch {
	case v.unknown():
		return fmt.Sprintf("UNKNOWN: %s; %s, so no verdict (accept up to PCT%% lost with --allow-lost PCT)", lost, lostText)
	case memFailed && cmdFailed:
		return fmt.Sprintf("FAIL: memory regression (%d of %s failed), and the command failed with %s", failed, plural(n, "check"), exit)
	case memFailed:
		return fmt.Sprintf("FAIL: memory regression (%d of %s failed)", failed, plural(n, "check"))
	case cmdFailed:
		return fmt.Sprintf("ERROR: command failed with %s (not a memory regression: %s passed)", exit, plural(n, "memory check"))
	}
	return fmt.Sprintf("PASS (%s)", plural(n, "check"))
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// commandText joins argv for display, quoting the arguments a shell would
// split or expand.
func commandText(argv []string) string {
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

// writeText writes the verdict for people.
func (v *verdict) writeText(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	s := v.snap
	p("vramprof check: %s\n", v.header())
	if len(s.command) > 0 {
		p("command: %s\n", commandText(s.command))
	}
	p("%s\n", v.recording)
	p("peak %s, live at end %s, %d allocations\n", bytesText(s.peak), bytesText(s.liveEnd), s.allocations)
	if s.lost > 0 {
		p("WARNING: %d events lost (ring buffer full): %s\n", s.lost, lostText)
	}
	if s.late > 0 {
		p("WARNING: %s\n", lateWarning(s.late))
	}
	if s.truncated {
		p("WARNING: the trace was cut short: the figures cover the records before the cut\n")
	}
	for _, c := range v.checks {
		if c.lost {
			p("%s  %-13s %s; limit %s\n", lostPassText(c.pass), c.name, c.measured, c.limit)
			continue
		}
		if c.tool {
			p("%s  %-13s %s\n", passText(c.pass), c.name, c.measured)
			continue
		}
		p("%s  %-13s %s; limit %s; %s\n", passText(c.pass), c.name, c.measured, c.limit, c.margin)
	}
	v.writeStacks(w)
}

// lostPassText: too many lost events make the verdict unknown, not failed.
func lostPassText(pass bool) string {
	if pass {
		return "PASS"
	}
	return "UNKNOWN"
}

// writeStacks writes the evidence of the failed checks: the stacks that
// grew over the baseline when there is one, else the top stacks.
func (v *verdict) writeStacks(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	s := v.snap
	if v.baseline != nil && v.showPeak {
		p("\nstacks that grew at the peak (vs baseline %s):\n", v.baseline.source)
		writeGrown(w, v.grown, v.baseline.stacksComplete)
	} else if v.showPeak {
		p("\ntop stacks at the peak:\n")
		writeTop(w, s.peakStacks, s.peak)
	}
	if v.showLeak {
		p("\ntop stacks live at the end:\n")
		writeTop(w, s.endStacks, s.liveEnd)
		for _, f := range s.leaks {
			p("  leak finding: %s\n", f.Summary)
		}
	}
}

func writeTop(w io.Writer, stacks []stackFigure, whole uint64) {
	if len(stacks) == 0 {
		fmt.Fprintf(w, "  none\n")
	}
	for i, st := range stacks {
		if i == verdictStacks {
			fmt.Fprintf(w, "  ... %d more\n", len(stacks)-i)
			break
		}
		share := 0.0
		if whole > 0 {
			share = float64(st.bytes) / float64(whole) * 100
		}
		fmt.Fprintf(w, "  %d. %s, %.1f%%, in %d allocations at %s\n", i+1, bytesText(st.bytes), share, st.count, st.site)
		for _, f := range st.frames {
			fmt.Fprintf(w, "       %s\n", f)
		}
	}
}

func grownLabel(s diffStack, complete bool) string {
	if s.Status == statusNew && !complete {
		return "new (or below the baseline's top stacks)"
	}
	return s.Status
}

func writeGrown(w io.Writer, grown []diffStack, complete bool) {
	if len(grown) == 0 {
		fmt.Fprintf(w, "  none\n")
	}
	for i, s := range grown {
		if i == verdictStacks {
			fmt.Fprintf(w, "  ... %d more\n", len(grown)-i)
			break
		}
		fmt.Fprintf(w, "  %d. [%s] %s at %s\n", i+1, grownLabel(s, complete), deltaText(s.diffDelta), s.Site)
		for _, f := range s.Frames {
			fmt.Fprintf(w, "       %s\n", f)
		}
	}
}

// writeAnnotations writes GitHub Actions workflow commands: an error per
// failed check, a warning for lost events.
func (v *verdict) writeAnnotations(w io.Writer) {
	for _, c := range v.checks {
		if !c.pass {
			fmt.Fprintf(w, "::error title=%s::%s\n", ghProperty("vramprof check: "+c.name), ghData(c.message))
		}
	}
	if v.snap.lost > 0 && !v.unknown() {
		fmt.Fprintf(w, "::warning title=%s::%s\n", ghProperty("vramprof check: lost events"),
			ghData(fmt.Sprintf("%d events lost (ring buffer full): %s", v.snap.lost, lostText)))
	}
	if v.snap.late > 0 {
		fmt.Fprintf(w, "::warning title=%s::%s\n", ghProperty("vramprof check: late events"), ghData(lateWarning(v.snap.late)))
	}
}

// ghData escapes a workflow command's message.
func ghData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

// ghProperty escapes a workflow command's property value.
func ghProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}

// mdCell escapes a Markdown table cell.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// writeMarkdown writes the verdict as a GitHub step summary.
func (v *verdict) writeMarkdown(w io.Writer) error {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	s := v.snap
	p("## vramprof check: %s\n\n", mdCell(v.header()))
	if len(s.command) > 0 {
		p("Command: `%s`. ", strings.ReplaceAll(commandText(s.command), "`", "'"))
	}
	p("Peak %s, live at end %s.\n\n", bytesText(s.peak), bytesText(s.liveEnd))
	if s.lost > 0 {
		p("> **Warning:** %d events lost (ring buffer full): %s.\n\n", s.lost, lostText)
	}
	if s.late > 0 {
		p("> **Warning:** %s.\n\n", lateWarning(s.late))
	}
	p("| check | result | measured | limit | margin |\n| --- | --- | --- | --- | --- |\n")
	for _, c := range v.checks {
		p("| %s | **%s** | %s | %s | %s |\n", c.name, passText(c.pass), mdCell(c.measured), mdCell(c.limit), mdCell(c.margin))
	}
	if v.showPeak || v.showLeak {
		p("\n<details><summary>Stacks</summary>\n\n```\n")
		var buf bytes.Buffer
		v.writeStacks(&buf)
		p("%s```\n\n</details>\n", strings.ReplaceAll(strings.TrimLeft(buf.String(), "\n"), "```", "'''"))
	}
	p("\n")
	return nil
}

// appendFile appends what write writes to path, creating it if needed.
func appendFile(path string, write func(io.Writer) error) error {
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// JUnit XML, the subset CI systems read.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Errors    int         `xml:"errors,attr"`
	Cases     []junitCase `xml:"testcase"`
	SystemOut *junitText  `xml:"system-out,omitempty"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *junitProblem `xml:"failure,omitempty"`
	Error     *junitProblem `xml:"error,omitempty"`
	SystemOut *junitText    `xml:"system-out,omitempty"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",cdata"`
}

// junitText is an element's text, as CDATA: the verdict stays readable in
// the file.
type junitText struct {
	Text string `xml:",cdata"`
}

// writeJUnit writes one testcase per check: a memory check that failed is a
// <failure>, the command's own failure an <error>. The whole verdict is the
// suite's system-out.
func (v *verdict) writeJUnit(w io.Writer) error {
	var full bytes.Buffer
	v.writeText(&full)
	suite := junitSuite{Name: "vramprof check", SystemOut: &junitText{full.String()}}
	for _, c := range v.checks {
		jc := junitCase{Name: c.name, Classname: "vramprof.check"}
		detail := c.measured
		if !c.tool {
			detail = fmt.Sprintf("%s; limit %s; %s", c.measured, c.limit, c.margin)
		}
		switch {
		case !c.pass && c.lost:
			jc.Error = &junitProblem{Message: c.message, Type: "lost events", Text: detail}
			suite.Errors++
		case !c.pass && c.tool:
			jc.Error = &junitProblem{Message: c.message, Type: "command", Text: detail}
			suite.Errors++
		case !c.pass:
			jc.Failure = &junitProblem{Message: c.message, Type: "memory regression", Text: detail}
			suite.Failures++
		default:
			jc.SystemOut = &junitText{detail}
		}
		suite.Cases = append(suite.Cases, jc)
	}
	suite.Tests = len(suite.Cases)
	doc := junitSuites{Name: "vramprof check", Tests: suite.Tests, Failures: suite.Failures, Errors: suite.Errors,
		Suites: []junitSuite{suite}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// baselineJSON is a baseline, schema vramprof/baseline/v1: what a later
// `check --baseline FILE --max-increase PCT` compares with. Stacks' frames
// are normalized (unsymbolized addresses blanked, see normalizeFrame).
type baselineJSON struct {
	Schema         string           `json:"schema"`
	Tool           string           `json:"tool"`
	Command        []string         `json:"command"`
	PeakBytes      uint64           `json:"peak_bytes"`
	LiveBytesAtEnd uint64           `json:"live_bytes_at_end"`
	LostEvents     uint64           `json:"lost_events"`
	Devices        []baselineFigure `json:"devices"`
	Processes      []baselineFigure `json:"processes"`
	PeakStacks     []baselineStack  `json:"peak_stacks"`
	// PeakStacksTotal is how many stacks the recording held at its peaks;
	// PeakStacks keeps the largest baselineStacks of them.
	PeakStacksTotal int `json:"peak_stacks_total"`
}

// baselineFigure is a device ("device": "0") or a command ("command", and
// "processes" running it) with its peak and live-at-end bytes.
type baselineFigure struct {
	Device         string `json:"device,omitempty"`
	Command        string `json:"command,omitempty"`
	Processes      int    `json:"processes,omitempty"`
	PeakBytes      uint64 `json:"peak_bytes"`
	LiveBytesAtEnd uint64 `json:"live_bytes_at_end"`
}

type baselineStack struct {
	Frames []string `json:"frames"`
	Site   string   `json:"site"`
	Bytes  uint64   `json:"bytes"`
	Count  uint64   `json:"count"`
}

func writeBaselineJSON(w io.Writer, s *snapshot) error {
	b := baselineJSON{Schema: baselineSchema, Tool: "vramprof " + version, Command: s.command,
		PeakBytes: s.peak, LiveBytesAtEnd: s.liveEnd, LostEvents: s.lost,
		Devices: []baselineFigure{}, Processes: []baselineFigure{}, PeakStacks: []baselineStack{},
		PeakStacksTotal: len(s.peakStacks)}
	if b.Command == nil {
		b.Command = []string{}
	}
	for _, d := range s.devices {
		b.Devices = append(b.Devices, baselineFigure{Device: d.name, PeakBytes: d.peak, LiveBytesAtEnd: d.end})
	}
	for _, p := range s.processes {
		b.Processes = append(b.Processes, baselineFigure{Command: p.name, Processes: p.count, PeakBytes: p.peak, LiveBytesAtEnd: p.end})
	}
	for i, st := range s.peakStacks {
		if i == baselineStacks {
			break
		}
		b.PeakStacks = append(b.PeakStacks, baselineStack{Frames: st.frames, Site: st.site, Bytes: st.bytes, Count: st.count})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(b)
}

// loadBaseline reads a baseline written by --write-baseline, or a
// report.json (whose figures are a baseline's and more).
func loadBaseline(path string) (*snapshot, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errRecording, err)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%w: %s is a directory; give the baseline file (or a report.json)", errRecording, path)
	}
	data, schema, err := readSchema(path)
	if err != nil {
		return nil, err
	}
	switch schema {
	case report.Schema:
		return snapshotFromReport(path, path, data)
	case baselineSchema:
	default:
		return nil, fmt.Errorf("%w: %s has schema %q, not %s (nor a report.json's %s)", errSchema, path, schema, baselineSchema, report.Schema)
	}
	var b baselineJSON
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errRecording, path, err)
	}
	s := &snapshot{source: path, command: b.Command, peak: b.PeakBytes, liveEnd: b.LiveBytesAtEnd, lost: b.LostEvents,
		stacksComplete: b.PeakStacksTotal <= len(b.PeakStacks), endedCleanly: true}
	for _, d := range b.Devices {
		s.devices = append(s.devices, figure{name: d.Device, count: 1, peak: d.PeakBytes, end: d.LiveBytesAtEnd})
	}
	for _, p := range b.Processes {
		s.processes = append(s.processes, figure{name: p.Command, count: p.Processes, peak: p.PeakBytes, end: p.LiveBytesAtEnd})
	}
	ss := stackSet{}
	for _, st := range b.PeakStacks {
		ss.add(st.Frames, st.Site, st.Bytes, st.Count)
	}
	s.peakStacks = ss.sorted()
	slices.SortFunc(s.processes, func(a, b figure) int { return cmp.Compare(a.name, b.name) })
	return s, nil
}

// lateWarning says what n events out of effect order mean for the figures.
func lateWarning(n uint64) string {
	return fmt.Sprintf("%d events late (a free that took longer than the reorder window): they may be misordered against calls on the same address", n)
}
