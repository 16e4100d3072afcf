package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/vramprof/vramprof/report/compare"
	"github.com/vramprof/vramprof/report/recorder"
)

// Exit codes of `vramprof check`: 0 every check passed, 1 a memory
// regression (some limit was exceeded, whatever else happened), 2 a usage or
// tool error, or the checked command failing on its own (exit code not 0)
// while every memory limit held.
const (
	exitCheckPass       = 0
	exitCheckRegression = 1
)

func parseCheck(args []string) (*checkFlags, error) {
	const usage = "usage: vramprof check [--max-peak SIZE] [--max-leak SIZE] [--baseline FILE --max-increase PCT] " +
		"[--allow-lost PCT] [--write-baseline FILE] [--junit FILE] [-o DIR] [--force] (-- CMD [ARGS...] | INPUT)"
	// Everything after the first "--" is the command; before it, flags and
	// at most one INPUT in any order.
	flagArgs, argv, hasCmd := args, []string(nil), false
	if i := slices.Index(args, "--"); i >= 0 {
		flagArgs, argv, hasCmd = args[:i], args[i+1:], true
	}
	c, err := parseCommand("check", flagArgs)
	if err != nil {
		return nil, err
	}
	o := &c.Check
	o.argv = argv
	if err := o.recordFlags.check("check"); err != nil {
		return nil, err
	}
	switch positional := o.Input; {
	case hasCmd && len(positional) > 0:
		return nil, usageError(fmt.Errorf("check: give either -- CMD or INPUT, not both (unexpected %q)", positional[0]))
	case hasCmd && len(o.argv) == 0:
		return nil, usageError(errors.New("check: no command after --; " + usage))
	case !hasCmd && len(positional) == 0:
		return nil, usageError(errors.New("check: give a command (-- CMD [ARGS...]) or an INPUT (an output directory, .vpt trace or report.json)"))
	case len(positional) > 1:
		return nil, usageError(fmt.Errorf("check: give one INPUT, not %d", len(positional)))
	case !hasCmd && o.Output != nil:
		return nil, usageError(errors.New("check: -o keeps the recording of -- CMD; an INPUT is already a recording"))
	}
	o.limits, err = compare.ParseLimits(compare.LimitFlags{MaxPeak: o.MaxPeak, MaxLeak: o.MaxLeak, AllowLost: o.AllowLost,
		MaxIncrease: o.MaxIncrease, Baseline: o.Baseline != "", WriteBaseline: o.WriteBaseline != ""})
	if err != nil {
		return nil, usageError(fmt.Errorf("check: %w", err))
	}
	return o, nil
}

// exec records `-- CMD` (as `vramprof run` does) or reads INPUT, judges
// it against the limits (package compare), prints the verdict to stdout and
// writes the requested files. It returns the exit code, or an error for
// exit 2.
func (o *checkFlags) exec(ctx context.Context) (int, error) {
	var base *compare.Snapshot
	if o.Baseline != "" {
		// Before the run: a bad baseline should not cost an hour of training.
		var err error
		if base, err = compare.LoadBaseline(o.Baseline); err != nil {
			return 0, fmt.Errorf("check: --baseline %s: %w", o.Baseline, err)
		}
	}
	var (
		snap      *compare.Snapshot
		recording string
		exitCode  *int
	)
	if o.argv != nil {
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
		code, err := (&runFlags{liveFlags: liveFlags{Output: dir, Force: o.Force, MomentInterval: defaultMomentInterval},
			recordFlags: rf, Command: o.argv}).exec(ctx)
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
		if snap, err = recorder.LoadSnapshot(o.Input[0]); err != nil {
			return 0, fmt.Errorf("check: %s: %w", o.Input[0], err)
		}
		recording = "recording: " + o.Input[0]
	}

	v := compare.Judge(snap, base, o.limits, exitCode)
	v.Recording = recording

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
