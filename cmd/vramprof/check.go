package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vramprof/vramprof/probes/allocspec"
	"github.com/vramprof/vramprof/report/compare"
	"github.com/vramprof/vramprof/report/recorder"
	"github.com/vramprof/vramprof/report/units"
)

// Exit codes of `vramprof check`: 0 every check passed, 1 a memory
// regression (some limit was exceeded, whatever else happened), 2 a usage or
// tool error, or the checked command failing on its own (exit code not 0)
// while every memory limit held.
const (
	exitCheckPass       = 0
	exitCheckRegression = 1
)

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
		n, err := units.ParseSize(s.text)
		if err != nil {
			return nil, usageError(fmt.Errorf("check: --%s %q: %w", s.name, s.text, err))
		}
		*s.dst = &n
	}
	if set["allow-lost"] {
		r, err := compare.ParsePercent(o.allowLostText)
		if err != nil || r.Cmp(big.NewRat(100, 1)) > 0 {
			return nil, usageError(fmt.Errorf("check: --allow-lost %q: give a percentage from 0 to 100, such as 0.1", o.allowLostText))
		}
		o.allowLost = r
		o.allowLostText = strings.TrimSuffix(o.allowLostText, "%")
	}
	if set["max-increase"] {
		r, err := compare.ParsePercent(o.maxIncreaseText)
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

// checkCmd records `-- CMD` (as `vramprof run` does) or reads INPUT, judges
// it against the limits (package compare), prints the verdict to stdout and
// writes the requested files. It returns the exit code, or an error for
// exit 2.
func checkCmd(ctx context.Context, o *checkOptions, stdout io.Writer) (int, error) {
	var base *compare.Snapshot
	if o.baseline != "" {
		// Before the run: a bad baseline should not cost an hour of training.
		var err error
		if base, err = compare.LoadBaseline(o.baseline); err != nil {
			return 0, fmt.Errorf("check: --baseline %s: %w", o.baseline, err)
		}
	}
	var (
		snap      *compare.Snapshot
		recording string
		exitCode  *int
	)
	if o.argv != nil {
		dir := o.out
		if dir == "" {
			tmp, err := os.MkdirTemp("", "vramprof-check-")
			if err != nil {
				return 0, fmt.Errorf("%w: %w", recorder.ErrOutputDir, err)
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
		exitCode = &code
		// run wrote report.json from the trace it recorded: the same
		// analysis a later `vramprof check DIR` makes.
		if snap, err = recorder.LoadSnapshot(filepath.Join(dir, recorder.JSONFile)); err != nil {
			return 0, fmt.Errorf("check: %w", err)
		}
		snap.Source = compare.CommandText(o.argv)
	} else {
		var err error
		if snap, err = recorder.LoadSnapshot(o.input); err != nil {
			return 0, fmt.Errorf("check: %s: %w", o.input, err)
		}
		recording = "recording: " + o.input
	}

	v := compare.Judge(snap, base, compare.Limits{
		MaxPeak: o.maxPeak, MaxLeak: o.maxLeak,
		MaxIncrease: o.maxIncrease, MaxIncreaseText: o.maxIncreaseText,
		AllowLost: o.allowLost, AllowLostText: o.allowLostText,
	}, exitCode)
	v.Recording = recording

	var text bytes.Buffer
	v.WriteText(&text)
	if os.Getenv("GITHUB_ACTIONS") == "true" {
		v.WriteAnnotations(&text)
	}
	if _, err := stdout.Write(text.Bytes()); err != nil {
		return 0, fmt.Errorf("check: write verdict: %w", err)
	}
	if o.junit != "" {
		if err := recorder.WriteFileAtomic(o.junit, v.WriteJUnit); err != nil {
			return 0, fmt.Errorf("check: --junit: %w", err)
		}
	}
	if path := os.Getenv("GITHUB_STEP_SUMMARY"); path != "" {
		if err := appendFile(path, v.WriteMarkdown); err != nil {
			return 0, fmt.Errorf("check: GITHUB_STEP_SUMMARY: %w", err)
		}
	}
	// A failed command's recording is no baseline for the next run, nor
	// one whose figures lost events may have skewed.
	if _, cmdFailed := v.Failed(); o.writeBaseline != "" && !cmdFailed && !v.Unknown() {
		write := func(w io.Writer) error { return compare.WriteBaseline(w, snap, "vramprof "+version) }
		if err := recorder.WriteFileAtomic(o.writeBaseline, write); err != nil {
			return 0, fmt.Errorf("check: --write-baseline: %w", err)
		}
	}
	regression, err := v.Outcome()
	switch {
	case err != nil:
		return 0, fmt.Errorf("check: %w", err)
	case regression:
		return exitCheckRegression, nil
	}
	return exitCheckPass, nil
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
