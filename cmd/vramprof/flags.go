package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/cmd/vramprof/internal/recorder"
	"github.com/vramprof/vramprof/probes/allocspec"
	"github.com/vramprof/vramprof/report"
	"github.com/vramprof/vramprof/report/compare"
	"github.com/vramprof/vramprof/report/exporter"
	"github.com/vramprof/vramprof/report/units"
)

// The command line, as kong reads it: one struct per subcommand, whose
// fields are the flags and the help, and the command runs with it. Parsing
// stops at kong; what a flag means (sizes, auto|off, files) is checked
// after, by the struct's check method, into its unexported fields, with the
// error texts the flag package gave; its exec method runs the command.

// command is a subcommand's flags: check checks what kong cannot (values,
// combinations) once kong has filled them, and exec runs the command and
// returns the exit code, or an error for exit 2.
type command interface {
	check() error
	exec(ctx context.Context) (int, error)
}

// cli is the whole command line: kong prints its help.
type cli struct {
	Version kong.VersionFlag `help:"print vramprof's version and exit"`

	Run    runFlags    `cmd:"" help:"launch CMD and trace it from its first CUDA call"`
	Attach attachFlags `cmd:"" help:"trace a running process (or every CUDA process)"`
	Report reportFlags `cmd:"" help:"re-analyse a recording or a PyTorch snapshot (no root needed)"`
	Check  checkFlags  `cmd:"" help:"gate CI on GPU memory: exit 0 pass, 1 regression or out of memory, 2 error or unknown (events lost)"`
	Diff   diffFlags   `cmd:"" help:"compare two recordings (DIRs, traces or report.json files)"`
	Serve  serveFlags  `cmd:"" help:"a node daemon: trace every CUDA process, serve Prometheus metrics (/metrics) and pprof (/debug/pprof/: allocs, heap, peak)"`
}

// description is the text under the usage line of `vramprof --help`. The
// names of the outputs come from the code that writes them (recorder,
// analysis), so that the help says what is written.
var description = `vramprof profiles CUDA GPU memory with eBPF.

Outputs in DIR: ` + recorder.TraceFile + `, ` + recorder.ProfileFile + ` (go tool pprof -http=: DIR/` + recorder.ProfileFile + `), ` +
	recorder.JSONFile + `, ` + recorder.MarkdownFile + `, ` + recorder.HTMLFile + `; ` + momentHelp + `.`

// momentHelp says where moment reports and the out-of-memory profiles go.
var momentHelp = `at an out-of-memory failure, that moment's outputs in DIR/` +
	recorder.MomentsDir + "/" + recorder.MomentName(analysis.MomentOOM, "<n>", "<time>") + `/ (on SIGUSR1, ` +
	recorder.MomentsDir + "/" + recorder.MomentName(analysis.MomentSignal, "<n>", "<time>") + `/); with a caching allocator traced, ` +
	analysis.OOMProfileFile("<n>") + ` (what was live at each failed allocation)`

// errHelp: help or the version was printed; main exits 0.
var errHelp = errors.New("help printed")

// kongExit carries kong's exit code (after help or --version) out of its
// parse, which would otherwise go on.
type kongExit int

// newParser builds the command line's parser; help goes to stdout (or to
// w when not nil).
func newParser(w io.Writer) (*kong.Kong, error) {
	if w == nil {
		w = os.Stdout
	}
	return kong.New(&cli{},
		kong.Name("vramprof"),
		kong.Description(description),
		kong.Writers(w, os.Stderr),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true, NoExpandSubcommands: true}),
		kong.ValueFormatter(helpWithDefault),
		kong.Vars{
			"version":        versionLine(),
			"momentInterval": defaultMomentInterval.String(),
			"pythonDepth":    strconv.Itoa(maxPythonDepth),
			"listen":         defaultListen,
			"port":           defaultPort,
			"grace":          exporter.DefaultGrace.String(),
			"ttl":            exporter.DefaultTTL.String(),
			"runtimeDirs":    strings.Join(exporter.DefaultRuntimeDirs, ","),
			"snapshotFile":   recorder.SnapshotFile,
			"perfettoFile":   recorder.PerfettoFile,
			"perfettoSlices": strconv.Itoa(report.DefaultPerfettoSlices),
			"baselineSchema": compare.BaselineSchema,
			"segmentPattern": recorder.SegmentPattern,
		},
		kong.Exit(func(code int) { panic(kongExit(code)) }),
	)
}

// helpWithDefault is a flag's help with its default, "(default: auto)",
// when it has one that its text does not already give.
func helpWithDefault(v *kong.Value) string {
	h := kong.DefaultHelpValueFormatter(v)
	if v.Default == "" || v.IsBool() || kong.HasInterpolatedVar(v.OrigHelp, "default") {
		return h
	}
	return h + " (default: " + v.Default + ")"
}

// parseCommand parses `vramprof name args...` into the command's flags and
// checks them. -h prints the command's help on stdout and returns errHelp;
// a parse error is a usage error of one line naming the command.
func parseCommand(name string, args []string) (cmd command, err error) {
	k, err := newParser(nil)
	if err != nil {
		return nil, fmt.Errorf("build command line: %w", err)
	}
	var node *kong.Node
	for _, n := range k.Model.Children {
		if n.Name == name {
			node, cmd = n, n.Target.Addr().Interface().(command)
		}
	}
	if node == nil {
		return nil, usageError(fmt.Errorf("unknown command %q; run 'vramprof help'", name))
	}
	if c, ok := cmd.(*checkFlags); ok {
		args = c.split(args)
	}
	defer func() {
		if code, ok := recover().(kongExit); ok {
			cmd, err = nil, errHelp
			if code != 0 {
				err = usageError(fmt.Errorf("%s: exit %d", name, code))
			}
		}
	}()
	if _, err := k.Parse(append([]string{name}, flagSyntax(node, args)...)); err != nil {
		return nil, usageError(fmt.Errorf("%s: %w; see 'vramprof %s -h'", name, err, name))
	}
	if err := cmd.check(); err != nil {
		return nil, err
	}
	return cmd, nil
}

// flagSyntax rewrites the flag forms Go's flag package took and kong does
// not into kong's: a value that begins with a dash (--moment-interval -1s,
// --max-leak -3, given to be refused with their own message), a long flag
// with one dash (-force), a short flag with two (--o DIR) or with an equals
// sign (-o=DIR). It stops at "--" and, for run, at the command.
func flagSyntax(node *kong.Node, args []string) []string {
	flags := map[string]*kong.Flag{} // by long and short name
	for n := node; n != nil; n = n.Parent {
		for _, f := range n.Flags {
			flags[f.Name] = f
			if f.Short != 0 {
				flags[string(f.Short)] = f
			}
		}
	}
	passthrough := len(node.Positional) > 0 && node.Positional[0].Passthrough
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			if a == "--" || passthrough {
				return append(out, args[i:]...)
			}
			out = append(out, a) // a positional argument
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := flags[name]
		if f == nil {
			out = append(out, a) // kong's error names it
			continue
		}
		switch {
		case hasValue:
			out = append(out, "--"+f.Name+"="+value)
		case f.IsBool() || i+1 == len(args):
			out = append(out, "--"+f.Name)
		default: // the next argument is the value, whatever it looks like
			out = append(out, "--"+f.Name+"="+args[i+1])
			i++
		}
	}
	return out
}

// printHelp prints what kong prints for `vramprof args...` to w: the help
// when args end in --help, the version for --version.
func printHelp(w io.Writer, args ...string) {
	k, err := newParser(w)
	if err != nil {
		return
	}
	defer func() { _ = recover() }()
	_, _ = k.Parse(args)
}

// flagValueError is the error of a flag whose value is wrong, in the words
// of the flag package vramprof used before kong.
func flagValueError(cmd, flag, value string, err error) error {
	return usageError(fmt.Errorf("%s: invalid value %q for flag -%s: %w; see 'vramprof %s -h'", cmd, value, flag, err, cmd))
}

// probeFlags are the flags of every command that loads the probes.
type probeFlags struct {
	Pool       string      `default:"auto" placeholder:"auto|off" help:"trace framework allocators' blocks (PyTorch's USDT probes, allocator specs): auto or off"`
	Allocators []string    `sep:"none" placeholder:"FILE" help:"allocator specs for the block layer beside the built-in ones (XLA BFC, RMM): see README, \"Allocator specs\""`
	Python     pythonFlags `embed:""`

	allocs []allocspec.Allocator // --allocators' specs, set by check
}

// check checks the flags and reads the allocator specs into allocs: a bad
// file is a usage error (exit 2) on one line, file:line, what is wrong and
// what to write instead.
func (p *probeFlags) check(cmd string) error {
	for _, file := range p.Allocators {
		specs, err := allocspec.ReadFile(file)
		if err != nil {
			return flagValueError(cmd, "allocators", file, err)
		}
		p.allocs = append(p.allocs, specs...)
	}
	if err := checkAutoOff(cmd, "pool", p.Pool); err != nil {
		return err
	}
	return p.Python.check(cmd)
}

// recordFlags are the flags of every command that records: run, attach,
// and check -- CMD.
type recordFlags struct {
	NVML     string  `name:"nvml" default:"auto" placeholder:"auto|off" help:"sample device memory with NVML: auto or off"`
	Capacity *string `placeholder:"SIZE" help:"each device's memory size (e.g. 80GiB), for the projected time to OOM when NVML cannot tell"`
	probeFlags
	Quiet bool `short:"q" help:"no live status and no summary (outputs are still written, errors still printed)"`

	capacity uint64 // --capacity in bytes, set by check
	// testLimit gives the outputs each pytest test's limit: check's, for
	// the command it records; nil otherwise.
	testLimit recorder.TestLimitFunc
}

// check checks the flags and sets capacity (and probeFlags' allocs).
func (f *recordFlags) check(cmd string) error {
	if f.Capacity != nil {
		var err error
		if f.capacity, err = units.ParseSize(*f.Capacity); err != nil {
			return flagValueError(cmd, "capacity", *f.Capacity, err)
		}
	}
	if err := f.probeFlags.check(cmd); err != nil {
		return err
	}
	return checkAutoOff(cmd, "nvml", f.NVML)
}

// liveFlags are the flags of run and attach beyond recordFlags.
type liveFlags struct {
	Output         string        `short:"o" placeholder:"DIR" help:"output directory (default ./vramprof-<pid>-<time>)"`
	Force          bool          `help:"overwrite the outputs of an earlier recording in the output directory (refused without it)"`
	MomentInterval time.Duration `default:"${momentInterval}" placeholder:"D" help:"after an out-of-memory moment report (DIR/moments/), the least time before the next one"`
	MaxTrace       *string       `placeholder:"SIZE" help:"keep the trace within SIZE on disk (e.g. 512MiB): the last events, in segments DIR/${segmentPattern}, and a checkpoint of what came before"`

	// maxTrace is --max-trace in bytes, 0 when not given (unbounded), set
	// by check.
	maxTrace uint64
}

// check checks r (the recording flags), then --max-trace and
// --moment-interval, in the order the flag package checked them.
func (f *liveFlags) check(cmd string, r *recordFlags) error {
	if err := r.check(cmd); err != nil {
		return err
	}
	if v := f.MaxTrace; v != nil {
		n, err := units.ParseSize(*v)
		if err == nil && n < recorder.MinMaxTrace {
			err = fmt.Errorf("%s is below the least --max-trace, %d bytes (%s)", *v, recorder.MinMaxTrace, "64KiB")
		}
		if err != nil {
			return flagValueError(cmd, "max-trace", *v, err)
		}
		f.maxTrace = n
	}
	if f.MomentInterval < 0 {
		return usageError(fmt.Errorf("%s: --moment-interval %s is negative", cmd, f.MomentInterval))
	}
	return nil
}

// checkAutoOff validates a flag that takes auto or off.
func checkAutoOff(cmd, flag, v string) error {
	if v != "auto" && v != "off" {
		return usageError(fmt.Errorf("%s: --%s %q: use auto or off", cmd, flag, v))
	}
	return nil
}

// defaultMomentInterval is the --moment-interval default: after an
// out-of-memory moment report, the next failure gets one only this much
// later. A minute keeps a retry loop from writing a report a second, and
// still catches the OOM of a later epoch.
const defaultMomentInterval = time.Minute

// runFlags are the flags of `vramprof run`; check fills one for its
// recording of -- CMD.
type runFlags struct {
	liveFlags
	recordFlags
	Command []string `arg:"" optional:"" passthrough:"partial" name:"CMD" help:"the command to trace and its arguments, after --"`
}

func (f *runFlags) check() error {
	if err := f.liveFlags.check("run", &f.recordFlags); err != nil {
		return err
	}
	if len(f.Command) > 0 && f.Command[0] == "--" {
		f.Command = f.Command[1:] // kong keeps the -- before a passthrough argument
	}
	if len(f.Command) == 0 {
		return usageError(errors.New("run: no command given; usage: vramprof run [-o DIR] -- CMD [ARGS...]"))
	}
	return nil
}

// attachFlags are the flags of `vramprof attach`.
type attachFlags struct {
	PID      int           `name:"pid" short:"p" placeholder:"PID" help:"PID of the process to trace (required, or --all)"`
	All      bool          `help:"trace every process on the host that maps a CUDA library, including later ones"`
	Duration time.Duration `placeholder:"D" help:"stop after this long (default: until Ctrl-C or the process exits)"`
	Wait     bool          `help:"wait for a process that has not loaded CUDA yet"`
	liveFlags
	recordFlags
}

func (f *attachFlags) check() error {
	if err := f.liveFlags.check("attach", &f.recordFlags); err != nil {
		return err
	}
	switch {
	case f.All && f.PID != 0:
		return usageError(errors.New("attach: give either -p PID or --all, not both"))
	case !f.All && f.PID <= 0:
		return usageError(errors.New("attach: -p PID is required (a positive process ID), or --all"))
	}
	if f.Duration < 0 {
		return usageError(fmt.Errorf("attach: --duration %s is negative", f.Duration))
	}
	return nil
}

// maxPythonDepth is the most Python frames a stack can hold
// (probes.DefaultPythonDepth; run.go checks the two agree).
const maxPythonDepth = 64

// pythonFlags are --python and --python-depth of the commands that load
// the probes.
type pythonFlags struct {
	Mode  string `name:"python" default:"auto" placeholder:"auto|off" help:"add CPython frames (function, file, line) to stacks: auto or off"`
	Depth int    `name:"python-depth" default:"${pythonDepth}" placeholder:"N" help:"most Python frames kept per stack"`
}

func (p *pythonFlags) check(cmd string) error {
	if err := checkAutoOff(cmd, "python", p.Mode); err != nil {
		return err
	}
	if p.Depth < 1 || p.Depth > maxPythonDepth {
		return usageError(fmt.Errorf("%s: --python-depth %d is out of range; give 1 to %d", cmd, p.Depth, maxPythonDepth))
	}
	return nil
}

// reportFlags are the flags of `vramprof report`.
type reportFlags struct {
	Output   string   `short:"o" placeholder:"DIR" help:"write trace outputs (profile, report.json, report.md, report.html) into DIR"`
	Force    bool     `help:"overwrite the outputs of an earlier report in DIR (refused without it)"`
	Format   string   `default:"text" placeholder:"text|md|json|html|snapshot|perfetto" help:"what to print: text, md, json, html, snapshot (a PyTorch memory snapshot pickle; with -o, written to DIR/${snapshotFile} instead), or perfetto (a trace for ui.perfetto.dev, Chrome JSON: live bytes per process and device at every allocation and free, allocations as slices, the ${perfettoSlices} largest live at each process's peak and the ${perfettoSlices} largest others, OOMs and findings as instants; with -o, written to DIR/${perfettoFile} instead)"`
	PID      *string  `name:"pid" placeholder:"PID" help:"with --format snapshot: the process to export (default: the recorded process, else the highest segment peak)"`
	Capacity *string  `placeholder:"SIZE" help:"each device's memory size (e.g. 80GiB), for the projected time to OOM when NVML cannot tell"`
	Input    []string `arg:"" optional:"" name:"INPUT" help:"an output DIR, a .vpt trace or a PyTorch snapshot .pickle"`

	opts recorder.ReportOptions // the flags checked, set by check
}

func (f *reportFlags) check() error {
	o := recorder.ReportOptions{Out: f.Output, Force: f.Force, Format: f.Format}
	if f.Capacity != nil {
		n, err := units.ParseSize(*f.Capacity)
		if err != nil {
			return flagValueError("report", "capacity", *f.Capacity, err)
		}
		o.Analysis.Capacity = n
	}
	if f.PID != nil {
		n, err := strconv.ParseUint(*f.PID, 10, 32)
		if err != nil || n == 0 {
			return flagValueError("report", "pid", *f.PID, fmt.Errorf("want a process ID, got %q", *f.PID))
		}
		o.PID, o.PIDSet = uint32(n), true
	}
	if len(f.Input) != 1 {
		return usageError(errors.New("report: give exactly one INPUT (an output directory or a .vpt trace)"))
	}
	o.Input = f.Input[0]
	switch o.Format {
	case "text", "md", "json", "html", "snapshot", "perfetto":
	default:
		return usageError(fmt.Errorf("report: unknown --format %q; use text, md, json, html, snapshot or perfetto", o.Format))
	}
	if o.PIDSet && o.Format != "snapshot" {
		return usageError(errors.New("report: --pid chooses the process of --format snapshot; the other formats cover every process"))
	}
	f.opts = o
	return nil
}

// checkFlags are the flags of `vramprof check`. The command after -- is
// split off before kong reads the rest (split).
type checkFlags struct {
	MaxPeak        *string `placeholder:"SIZE" help:"fail when the peak (device memory, all devices and processes) exceeds SIZE"`
	MaxLeak        *string `placeholder:"SIZE" help:"fail when the bytes still live at the end exceed SIZE"`
	MaxPeakPerTest *string `placeholder:"SIZE" help:"fail when a pytest test's own allocations peak above SIZE (one JUnit testcase per test; see --limits)"`
	Limits         string  `placeholder:"FILE" help:"per-test limits: lines of 'TEST-ID-GLOB SIZE' (tests/test_x.py::test_big 2GiB), the first matching line wins over --max-peak-per-test"`
	Baseline       string  `placeholder:"FILE" help:"a baseline (written by --write-baseline) or a report.json to compare with"`
	MaxIncrease    *string `placeholder:"PCT" help:"fail when the peak grows more than PCT percent over --baseline's"`
	AllowLost      *string `placeholder:"PCT" help:"judge anyway when at most PCT percent of the events were lost, lost/(lost+recorded) (default: any lost event makes the verdict unknown, exit 2)"`
	WriteBaseline  string  `placeholder:"FILE" help:"write this recording's baseline (schema ${baselineSchema}) to FILE"`
	JUnit          string  `name:"junit" placeholder:"FILE" help:"write a JUnit XML report to FILE (one testcase per check)"`
	Output         *string `short:"o" placeholder:"DIR" help:"keep the recording of -- CMD in DIR (default: a temporary directory, removed)"`
	Force          bool    `help:"overwrite the outputs of an earlier recording in the output directory (refused without it)"`
	recordFlags
	Input []string `arg:"" optional:"" name:"INPUT" help:"an output directory, .vpt trace or report.json to check, or -- CMD [ARGS...] to record and check"`

	limits compare.Limits // the limits parsed, set by check
	argv   []string       // the command after --; nil: check Input[0]
	hasCmd bool           // a -- was given, with or without a command after it
}

// diffFlags are the flags of `vramprof diff`.
type diffFlags struct {
	Format string   `default:"text" placeholder:"text|json" help:"what to print: text or json"`
	Paths  []string `arg:"" optional:"" name:"BASE NEW" help:"the recordings to compare: output DIRs, .vpt traces or report.json files"`
}

// serveFlags are the flags of `vramprof serve`.
type serveFlags struct {
	Listen string        `default:"${listen}" placeholder:"HOST:PORT" help:"address to serve metrics and profiles on (host:port); the default port, ${port}, is not dcgm-exporter's 9400: both run on every GPU node"`
	Grace  time.Duration `default:"${grace}" placeholder:"D" help:"keep an exited process's figures at least this long"`
	TTL    time.Duration `name:"ttl" default:"${ttl}" placeholder:"D" help:"drop an exited process after this long even if never scraped"`
	NVML   string        `name:"nvml" default:"auto" placeholder:"auto|off" help:"serve each device's memory as NVML reports it: auto or off"`
	// PerProcess: series per process (pid, start labels) instead of per
	// group (command, cgroup, container, pod_uid, pod, namespace,
	// container_name).
	PerProcess bool `name:"per-process" help:"a set of series per process (pid and start labels); default: per command, cgroup, container and pod"`
	// RuntimeDirs: where containerd's and CRI-O's container bundles are,
	// for the pod, namespace and container_name labels.
	RuntimeDirs []string `name:"runtime-dirs" default:"${runtimeDirs}" sep:"," placeholder:"DIR" help:"container runtime directories (containerd's, CRI-O's) of container bundles, read for a Kubernetes container's pod, namespace and container_name labels (\"\": none); a directory not there leaves them empty"`
	probeFlags
	Quiet bool `short:"q" help:"no banner and no notes (errors are still printed)"`
}
