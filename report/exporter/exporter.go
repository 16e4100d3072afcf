package exporter

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

// Defaults for Options fields left zero.
const (
	// DefaultGrace keeps an exited process's figures at least this long:
	// records still in the session's reorder window arrive within a
	// second, and a pprof fetch right after the exit still finds it.
	DefaultGrace = 30 * time.Second
	// DefaultTTL drops an exited process nobody scraped: a daemon on a
	// node running short jobs must not keep every job it ever saw.
	DefaultTTL = 10 * time.Minute
	// DefaultIterationLog is analysis.Options.IterationLog for serve: 4096
	// allocation times per site still find a training loop (4 iterations
	// make one), and cap a site's logs near 160 KiB instead of 2.5 MiB.
	DefaultIterationLog = 1 << 12
)

// ErrNoProcess is returned for a PID the exporter does not hold.
var ErrNoProcess = errors.New("exporter: no such traced process")

// Options configures an Exporter. The zero value uses the defaults.
type Options struct {
	// Grace is how long an exited process is kept at least (default
	// DefaultGrace).
	Grace time.Duration
	// TTL is how long an exited process is kept at most, scraped or not
	// (default DefaultTTL).
	TTL time.Duration
	// Analysis tunes each process's Analyzer; IterationLog defaults to
	// DefaultIterationLog here.
	Analysis analysis.Options
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// Alive says whether the process instance seen with start time start
	// (clock ticks since boot, /proc/PID/stat field 22) still runs;
	// default reads /proc (tests replace it).
	Alive func(pid uint32, start uint64) bool
}

// Exporter folds a session's records into per-process analyses. It is a
// probes.Sink. Create it with New; it is safe for concurrent use.
type Exporter struct {
	opts Options

	mu     sync.Mutex
	header *event.Header
	procs  map[uint32]*proc
	lost   event.Lost
	nvml   nvmlState // the device layer (nvml.go)
	// limiter holds Serve's connections (conns.go); nil before Serve.
	limiter *connLimiter
}

// proc is one traced process (PID) and its analysis.
type proc struct {
	pid uint32
	// start is the process's start time (/proc/PID/stat), to tell a
	// reused PID from the process that had it.
	start uint64
	// Labels: command (argv0's base name, else comm; p.mu guards it, an
	// exec changes it), cgroup path and the container ID found in it (""
	// when none).
	command, cgroup, container string

	mu sync.Mutex
	an *analysis.Analyzer
	// version counts records added; snap is the snapshot at snapVersion.
	version, snapVersion uint64
	snap                 *analysis.Result
	// exited is when the process was found gone; zero while it runs.
	// reported is set by a metrics scrape after exited.
	exited   time.Time
	reported bool
}

// New returns an Exporter with no process yet.
func New(opts Options) *Exporter {
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	opts.TTL = max(opts.TTL, opts.Grace)
	if opts.Analysis.IterationLog <= 0 {
		opts.Analysis.IterationLog = DefaultIterationLog
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Alive == nil {
		opts.Alive = alive
	}
	return &Exporter{opts: opts, procs: make(map[uint32]*proc)}
}

// SetHeader sets the header every process's analysis starts from (its
// time origin). Call it before the first record.
func (x *Exporter) SetHeader(h *event.Header) {
	x.mu.Lock()
	defer x.mu.Unlock()
	c := *h
	x.header = &c
}

// Write folds one record into its process's analysis. Records of no
// process (Lost) and NVML's (DeviceInfo, Sample, NVMLStatus: nvml.go) are
// kept globally.
func (x *Exporter) Write(rec event.Record) error {
	var pid uint32
	switch r := rec.(type) {
	case *event.Event:
		pid = r.PID
	case *event.Stack:
		pid = r.PID
	case *event.Mapping:
		pid = r.PID
	case *event.Library:
		pid = r.PID
	case *event.Interpreter:
		pid = r.PID
	case *event.Process:
		pid = r.PID
	case *event.Lost:
		x.mu.Lock()
		x.lost = *r
		x.mu.Unlock()
		return nil
	case *event.Header:
		x.SetHeader(r)
		return nil
	case *event.DeviceInfo, *event.Sample, *event.NVMLStatus:
		x.mu.Lock()
		x.writeNVML(rec)
		x.mu.Unlock()
		return nil
	default:
		// End.
		return nil
	}
	p := x.process(pid, rec)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.version++
	return p.an.Add(rec)
}

// Flush does nothing: nothing is buffered.
func (x *Exporter) Flush() error { return nil }

// process returns pid's state, creating it (and replacing an exited
// instance whose PID was reused) as needed.
func (x *Exporter) process(pid uint32, rec event.Record) *proc {
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.procs[pid]
	if p != nil && (p.exitedAt().IsZero() || !isProcess(rec)) {
		if r, ok := rec.(*event.Process); ok && len(r.Command) > 0 {
			// An exec: the process is what it now runs (a launcher that
			// became python). Its series take the new name.
			p.mu.Lock()
			p.command = filepath.Base(r.Command[0])
			p.mu.Unlock()
		}
		return p
	}
	p = &proc{pid: pid, an: analysis.New(x.opts.Analysis)}
	p.start, _ = startTime(pid)
	p.command, p.cgroup, p.container = describe(pid, rec)
	h := event.Header{Mode: "serve", PID: pid}
	if x.header != nil {
		h = *x.header
		h.PID = pid
	}
	_ = p.an.Add(&h)
	x.procs[pid] = p
	return p
}

func isProcess(rec event.Record) bool {
	_, ok := rec.(*event.Process)
	return ok
}

func (p *proc) exitedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// snapshot returns the process's figures so far, cached until its next
// record.
func (p *proc) snapshot() *analysis.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.snap == nil || p.snapVersion != p.version {
		p.snap, p.snapVersion = p.an.Snapshot(), p.version
	}
	return p.snap
}

// Sweep notices processes that exited and drops the ones whose time is up
// (see Options). `vramprof serve` calls it on a clock; it returns the
// number of processes still held.
func (x *Exporter) Sweep() int {
	now := x.opts.Now()
	x.mu.Lock()
	defer x.mu.Unlock()
	for pid, p := range x.procs {
		p.mu.Lock()
		if p.exited.IsZero() && !x.opts.Alive(pid, p.start) {
			p.exited = now
			p.reported = false
		}
		if !p.exited.IsZero() {
			age := now.Sub(p.exited)
			if age >= x.opts.TTL || (p.reported && age >= x.opts.Grace) {
				delete(x.procs, pid)
			}
		}
		p.mu.Unlock()
	}
	return len(x.procs)
}

// Lost returns the session's lost-record totals so far.
func (x *Exporter) Lost() event.Lost {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.lost
}

// processes returns the processes held, by PID.
func (x *Exporter) processes() []*proc {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]*proc, 0, len(x.procs))
	for _, p := range x.procs {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *proc) int { return int(a.pid) - int(b.pid) })
	return out
}

// Result returns pid's figures so far, or ErrNoProcess.
func (x *Exporter) Result(pid uint32) (*analysis.Result, error) {
	x.mu.Lock()
	p := x.procs[pid]
	x.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("%w: %d", ErrNoProcess, pid)
	}
	return p.snapshot(), nil
}

// describe finds pid's labels: command from its Process record's argv0 (or
// /proc/PID/comm), cgroup and container from /proc/PID/cgroup.
func describe(pid uint32, rec event.Record) (command, cgroup, container string) {
	if r, ok := rec.(*event.Process); ok && len(r.Command) > 0 {
		command = filepath.Base(r.Command[0])
	}
	if command == "" {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		command = strings.TrimSpace(string(b))
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	cgroup, container = parseCgroup(b)
	return command, cgroup, container
}

// containerID finds a container runtime's 64-hex ID in a cgroup path:
// docker-<id>.scope, cri-containerd-<id>.scope, crio-<id>.scope,
// /docker/<id>, kubepods/.../<id>.
var containerID = regexp.MustCompile(`([0-9a-f]{64})`)

// parseCgroup returns the cgroup v2 path in /proc/PID/cgroup's contents
// (the "0::" line), else the first v1 hierarchy's, and the container ID in
// it.
func parseCgroup(b []byte) (path, container string) {
	for line := range bytes.Lines(b) {
		f := strings.SplitN(strings.TrimSpace(string(line)), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			path = f[2]
			break
		}
		if path == "" {
			path = f[2]
		}
	}
	if m := containerID.FindAllString(path, -1); len(m) > 0 {
		container = m[len(m)-1]
	}
	return path, container
}

// startTime reads a process's start time (clock ticks since boot) from
// /proc/PID/stat: with the PID, it names one process instance.
func startTime(pid uint32) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command (field 2) may hold spaces and parentheses: fields
	// start after its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat: no command", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); start time is field 22.
	if len(f) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// alive is Options.Alive's default: pid runs and is the instance that
// started at start (a zombie counts as exited).
func alive(pid uint32, start uint64) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
		return false
	}
	st, err := startTime(pid)
	return err == nil && (start == 0 || st == start)
}
