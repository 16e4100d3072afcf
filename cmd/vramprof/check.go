package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/vramprof/vramprof/cmd/vramprof/internal/recorder"
	"github.com/vramprof/vramprof/report/compare"
)

// Exit codes of `vramprof check`: 0 every check passed, 1 a memory
// regression (some limit was exceeded, whatever else happened), 2 a usage or
// tool error, or the checked command failing on its own (exit code not 0)
// while every memory limit held.
const (
	exitCheckPass       = 0
	exitCheckRegression = 1
)

// split splits check's arguments at the first "--": after it, the command
// (argv), given to kong as nothing; before it, flags and at most one INPUT
// in any order, which it returns.
func (o *checkFlags) split(args []string) []string {
	i := slices.Index(args, "--")
	if i < 0 {
		return args
	}
	o.argv, o.hasCmd = args[i+1:], true
	return args[:i]
}

func (o *checkFlags) check() error {
	const usage = "usage: vramprof check [--max-peak SIZE] [--max-leak SIZE] [--max-peak-per-test SIZE] [--limits FILE] [--baseline FILE --max-increase PCT] " +
		"[--allow-lost PCT] [--write-baseline FILE] [--junit FILE] [-o DIR] [--force] (-- CMD [ARGS...] | INPUT)"
	if err := o.recordFlags.check("check"); err != nil {
		return err
	}
	switch positional, hasCmd := o.Input, o.hasCmd; {
	case hasCmd && len(positional) > 0:
		return usageError(fmt.Errorf("check: give either -- CMD or INPUT, not both (unexpected %q)", positional[0]))
	case hasCmd && len(o.argv) == 0:
		return usageError(errors.New("check: no command after --; " + usage))
	case !hasCmd && len(positional) == 0:
		return usageError(errors.New("check: give a command (-- CMD [ARGS...]) or an INPUT (an output directory, .vpt trace or report.json)"))
	case len(positional) > 1:
		return usageError(fmt.Errorf("check: give one INPUT, not %d", len(positional)))
	case !hasCmd && o.Output != nil:
		return usageError(errors.New("check: -o keeps the recording of -- CMD; an INPUT is already a recording"))
	}
	var err error
	o.limits, err = compare.ParseLimits(compare.LimitFlags{MaxPeak: o.MaxPeak, MaxLeak: o.MaxLeak, AllowLost: o.AllowLost,
		MaxIncrease: o.MaxIncrease, Baseline: o.Baseline != "", WriteBaseline: o.WriteBaseline != "",
		MaxPeakPerTest: o.MaxPeakPerTest, LimitsFile: o.Limits})
	if err != nil {
		return usageError(fmt.Errorf("check: %w", err))
	}
	return nil
}

// exec records `-- CMD` (as `vramprof run` does) or reads INPUT, judges
// it against the limits (package compare), prints the verdict to stdout and
// writes the requested files. It returns the exit code, or an error for
// exit 2.
func (o *checkFlags) exec(ctx context.Context) (int, error) {
	var base *compare.Figures
	if o.Baseline != "" {
		// Before the run: a bad baseline should not cost an hour of training.
		var err error
		if base, err = compare.LoadBaseline(o.Baseline); err != nil {
			return 0, fmt.Errorf("check: --baseline %s: %w", o.Baseline, err)
		}
	}
	var (
		snap      *compare.Figures
		recording string
		exitCode  *int
		trace     string // the recording's trace, for the per-test figures
	)
	if o.hasCmd {
		dir := ""
		if o.Output != nil {
			dir = *o.Output
		}
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
		rf := o.recordFlags
		rf.Quiet = true // the verdict is check's output
		// The outputs show each test's limit and verdict too.
		rf.testLimit = o.limits.TestLimit
		code, err := (&runFlags{liveFlags: liveFlags{Output: dir, Force: o.Force, MomentInterval: defaultMomentInterval},
			recordFlags: rf, Command: o.argv}).exec(ctx)
		if err != nil {
			return 0, err
		}
		exitCode = &code
		// run wrote report.json from the trace it recorded: the same
		// analysis a later `vramprof check DIR` makes.
		if snap, err = recorder.LoadFigures(filepath.Join(dir, recorder.JSONFile)); err != nil {
			return 0, fmt.Errorf("check: %w", err)
		}
		snap.Source = compare.CommandText(o.argv)
		trace = recorder.TracePath(dir)
	} else {
		var err error
		if snap, err = recorder.LoadFigures(o.Input[0]); err != nil {
			if !errors.Is(err, recorder.ErrSegments) {
				return 0, fmt.Errorf("check: %s: %w", o.Input[0], err)
			}
			// Segments that do not follow each other give no figures to
			// trust: an unknown verdict that says why, in every output.
			snap = &compare.Figures{Source: o.Input[0], NoFigures: true, Incomplete: []string{err.Error()}}
		}
		recording = "recording: " + o.Input[0]
		if !snap.NoFigures {
			trace = recorder.TracePath(o.Input[0])
		}
	}
	// Test ids and annotations name files relative to where check runs
	// (pytest's rootdir, run from the project's top) or, for annotations
	// under GitHub Actions, to the checkout.
	wd, _ := os.Getwd()
	if trace != "" {
		tests, err := recorder.Tests(trace, recorder.TestRoot()) // the outputs' root: the same figures
		if err != nil {
			return 0, fmt.Errorf("check: per-test figures: %w", err)
		}
		snap.Tests, snap.TestsRead = tests, true
	}

	v := compare.Judge(snap, base, o.limits, exitCode)
	v.Recording = recording
	// Annotations name files relative to the repository GitHub checked
	// out; elsewhere, to where check runs.
	if v.SourceRoot = os.Getenv("GITHUB_WORKSPACE"); v.SourceRoot == "" {
		v.SourceRoot = wd
	}

	regression, err := v.Publish(os.Stdout, compare.Outputs{Annotations: os.Getenv("GITHUB_ACTIONS") == "true",
		JUnit: o.JUnit, StepSummary: os.Getenv("GITHUB_STEP_SUMMARY"), Baseline: o.WriteBaseline,
		Tool: "vramprof " + version, WriteFile: recorder.WriteFileAtomic})
	switch {
	case err != nil:
		return 0, fmt.Errorf("check: %w", err)
	case regression:
		return exitCheckRegression, nil
	}
	return exitCheckPass, nil
}
