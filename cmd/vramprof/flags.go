package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/vramprof/vramprof/probes/allocspec"
	"github.com/vramprof/vramprof/report/recorder"
)

// newFlagSet returns a flag set that prints nothing itself: a bad flag
// becomes the one-line error main prints, and -h prints the usage line and
// the flags (see parseFlags).
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // the flag package calls it on every error
	return fs
}

// parseFlags parses args into fs; -h prints usage and the flags and
// returns flag.ErrHelp, which main turns into exit 0.
func parseFlags(fs *flag.FlagSet, usage string, args []string) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, usage)
		fs.SetOutput(os.Stderr)
		fs.PrintDefaults()
		return err
	}
	if err != nil {
		return usageError(fmt.Errorf("%s: %w; see 'vramprof %s -h'", fs.Name(), err, fs.Name()))
	}
	return nil
}

// parseInterleaved parses flags and positional arguments given in any
// order ("report trace.vpt -o out" and "report -o out trace.vpt" alike) and
// returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, usage string, args []string) ([]string, error) {
	var positional []string
	for len(args) > 0 {
		if err := parseFlags(fs, usage, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) > 0 {
			positional = append(positional, args[0])
			args = args[1:]
		}
	}
	return positional, nil
}

// capacityFlag registers --capacity, every device's memory size, for the
// leak's time to OOM when NVML cannot tell it.
// maxTraceFlag registers --max-trace SIZE, the flight recorder.
func maxTraceFlag(fs *flag.FlagSet, dst *uint64) {
	fs.Func("max-trace", "keep the trace within SIZE on disk (e.g. 512MiB): the last events, in segments DIR/trace-NNNNNN.vpt, and a checkpoint of what came before", func(v string) error {
		n, err := parseSize(v)
		if err != nil {
			return err
		}
		if n < recorder.MinMaxTrace {
			return fmt.Errorf("%s is below the least --max-trace, %d bytes (%s)", v, recorder.MinMaxTrace, "64KiB")
		}
		*dst = n
		return nil
	})
}

func capacityFlag(fs *flag.FlagSet, dst *uint64) {
	fs.Func("capacity", "each device's memory size (e.g. 80GiB), for the projected time to OOM when NVML cannot tell", func(v string) error {
		n, err := parseSize(v)
		if err != nil {
			return err
		}
		*dst = n
		return nil
	})
}

// allocatorsFlag registers --allocators FILE, allocator specs (block layer)
// beside the built-in ones, read and checked as the flag is parsed: a bad
// file is a usage error (exit 2) on one line, file:line, what is wrong and
// what to write instead.
func allocatorsFlag(fs *flag.FlagSet, dst *[]allocspec.Allocator) {
	fs.Func("allocators", "allocator specs for the block layer beside the built-in ones (XLA BFC, RMM): see README, \"Allocator specs\"", func(v string) error {
		specs, err := allocspec.ReadFile(v)
		if err != nil {
			return err
		}
		*dst = append(*dst, specs...)
		return nil
	})
}

// checkAutoOff validates a flag that takes auto or off.
func checkAutoOff(cmd, flag, v string) error {
	if v != "auto" && v != "off" {
		return usageError(fmt.Errorf("%s: --%s %q: use auto or off", cmd, flag, v))
	}
	return nil
}

// runOptions are the flags of `vramprof run`.
type runOptions struct {
	out      string
	nvml     string
	pool     string
	python   pythonFlags
	capacity uint64
	allocs   []allocspec.Allocator // --allocators
	argv     []string
	// quiet (-q) leaves out the live status and the summary; outputs are
	// still written and errors still printed. check sets it: it prints its
	// own verdict.
	quiet bool
	// force (--force) overwrites an earlier recording in out.
	force bool
	// momentInterval (--moment-interval) is the rate limit of
	// out-of-memory moment reports (moment.go); 0: none but the cap.
	momentInterval time.Duration
	// maxTrace (--max-trace) bounds the trace on disk: the flight
	// recorder (flight.go); 0: unbounded.
	maxTrace uint64
}

// defaultMomentInterval is the --moment-interval default: after an
// out-of-memory moment report, the next failure gets one only this much
// later. A minute keeps a retry loop from writing a report a second, and
// still catches the OOM of a later epoch.
const defaultMomentInterval = time.Minute

// addMomentInterval defines --moment-interval.
func addMomentInterval(fs *flag.FlagSet, d *time.Duration) {
	fs.DurationVar(d, "moment-interval", defaultMomentInterval,
		"after an out-of-memory moment report (DIR/moments/), the least time before the next one")
}

// checkMomentInterval refuses a negative --moment-interval.
func checkMomentInterval(cmd string, d time.Duration) error {
	if d < 0 {
		return usageError(fmt.Errorf("%s: --moment-interval %s is negative", cmd, d))
	}
	return nil
}

// addForce defines --force: write into an output directory that already
// holds a recording, replacing its files.
func addForce(fs *flag.FlagSet, force *bool) {
	fs.BoolVar(force, "force", false, "overwrite the outputs of an earlier recording in the output directory (refused without it)")
}

// addQuiet defines -q and its long form --quiet (the flag package takes
// either with one or two dashes).
func addQuiet(fs *flag.FlagSet, quiet *bool) {
	const help = "no live status and no summary (outputs are still written, errors still printed)"
	fs.BoolVar(quiet, "q", false, help)
	fs.BoolVar(quiet, "quiet", false, help)
}

func parseRun(args []string) (*runOptions, error) {
	const usage = "usage: vramprof run [-o DIR] [--force] [--pool auto|off] [--allocators FILE] [--python auto|off] [--python-depth N] [--nvml auto|off] [--capacity SIZE] [--moment-interval D] [--max-trace SIZE] [-q] -- CMD [ARGS...]"
	fs := newFlagSet("run")
	o := &runOptions{}
	fs.StringVar(&o.out, "o", "", "output directory (default ./vramprof-<pid>-<time>)")
	fs.StringVar(&o.nvml, "nvml", "auto", "sample device memory with NVML: auto or off")
	fs.StringVar(&o.pool, "pool", "auto", "trace framework allocators' blocks (PyTorch's USDT probes, allocator specs): auto or off")
	allocatorsFlag(fs, &o.allocs)
	o.python.define(fs)
	capacityFlag(fs, &o.capacity)
	addMomentInterval(fs, &o.momentInterval)
	maxTraceFlag(fs, &o.maxTrace)
	addQuiet(fs, &o.quiet)
	addForce(fs, &o.force)
	if err := parseFlags(fs, usage, args); err != nil {
		return nil, err
	}
	if err := checkMomentInterval("run", o.momentInterval); err != nil {
		return nil, err
	}
	if err := checkAutoOff("run", "nvml", o.nvml); err != nil {
		return nil, err
	}
	if err := checkAutoOff("run", "pool", o.pool); err != nil {
		return nil, err
	}
	if err := o.python.check("run"); err != nil {
		return nil, err
	}
	o.argv = fs.Args()
	if len(o.argv) == 0 {
		return nil, usageError(errors.New("run: no command given; usage: vramprof run [-o DIR] -- CMD [ARGS...]"))
	}
	return o, nil
}

// attachOptions are the flags of `vramprof attach`.
type attachOptions struct {
	pid      int
	out      string
	duration time.Duration
	wait     bool
	all      bool
	nvml     string
	pool     string
	python   pythonFlags
	quiet    bool // -q: see runOptions.quiet
	force    bool // --force: see runOptions.force
	capacity uint64
	allocs   []allocspec.Allocator // --allocators
	// momentInterval: see runOptions.momentInterval.
	momentInterval time.Duration
	// maxTrace: see runOptions.maxTrace.
	maxTrace uint64
}

func parseAttach(args []string) (*attachOptions, error) {
	const usage = "usage: vramprof attach (-p PID | --all) [-o DIR] [--force] [--duration D] [--wait] [--pool auto|off] [--allocators FILE] [--python auto|off] [--python-depth N] [--nvml auto|off] [--capacity SIZE] [--moment-interval D] [--max-trace SIZE] [-q]"
	fs := newFlagSet("attach")
	o := &attachOptions{}
	fs.IntVar(&o.pid, "p", 0, "PID of the process to trace (required)")
	fs.StringVar(&o.out, "o", "", "output directory (default ./vramprof-<pid>-<time>)")
	fs.DurationVar(&o.duration, "duration", 0, "stop after this long (default: until Ctrl-C or the process exits)")
	fs.BoolVar(&o.wait, "wait", false, "wait for a process that has not loaded CUDA yet")
	fs.BoolVar(&o.all, "all", false, "trace every process on the host that maps a CUDA library, including later ones")
	fs.StringVar(&o.nvml, "nvml", "auto", "sample device memory with NVML: auto or off")
	fs.StringVar(&o.pool, "pool", "auto", "trace framework allocators' blocks (PyTorch's USDT probes, allocator specs): auto or off")
	allocatorsFlag(fs, &o.allocs)
	o.python.define(fs)
	capacityFlag(fs, &o.capacity)
	addMomentInterval(fs, &o.momentInterval)
	maxTraceFlag(fs, &o.maxTrace)
	addQuiet(fs, &o.quiet)
	addForce(fs, &o.force)
	if err := parseFlags(fs, usage, args); err != nil {
		return nil, err
	}
	if err := checkMomentInterval("attach", o.momentInterval); err != nil {
		return nil, err
	}
	if err := checkAutoOff("attach", "nvml", o.nvml); err != nil {
		return nil, err
	}
	if err := checkAutoOff("attach", "pool", o.pool); err != nil {
		return nil, err
	}
	if err := o.python.check("attach"); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usageError(fmt.Errorf("attach: unexpected argument %q; usage: vramprof attach -p PID [-o DIR]", fs.Arg(0)))
	}
	switch {
	case o.all && o.pid != 0:
		return nil, usageError(errors.New("attach: give either -p PID or --all, not both"))
	case !o.all && o.pid <= 0:
		return nil, usageError(errors.New("attach: -p PID is required (a positive process ID), or --all"))
	}
	if o.duration < 0 {
		return nil, usageError(fmt.Errorf("attach: --duration %s is negative", o.duration))
	}
	return o, nil
}

// maxPythonDepth is the most Python frames a stack can hold
// (probes.DefaultPythonDepth; run.go checks the two agree).
const maxPythonDepth = 64

// pythonFlags are --python and --python-depth of run and attach.
type pythonFlags struct {
	mode  string
	depth int
}

func (p *pythonFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&p.mode, "python", "auto", "add CPython frames (function, file, line) to stacks: auto or off")
	fs.IntVar(&p.depth, "python-depth", maxPythonDepth, "most Python frames kept per stack")
}

func (p *pythonFlags) check(cmd string) error {
	if err := checkAutoOff(cmd, "python", p.mode); err != nil {
		return err
	}
	if p.depth < 1 || p.depth > maxPythonDepth {
		return usageError(fmt.Errorf("%s: --python-depth %d is out of range; give 1 to %d", cmd, p.depth, maxPythonDepth))
	}
	return nil
}
