package exporter

import (
	"bytes"
	"cmp"
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
	// (clock ticks since boot, /proc/PID/stat field 22; 0: it was gone
	// when first seen) still runs; default reads /proc (tests replace it).
	Alive func(pid uint32, start uint64) bool
	// Start reads a process's start time (default: /proc/PID/stat; tests
	// replace it). Used when a Process record carries none.
	Start func(pid uint32) (uint64, error)
	// PerProcess labels every series with the process (pid, start) as
	// well: one set of series per process instance. Off, the default, a
	// series is a group of processes (groupLabels: command, cgroup,
	// container, pod_uid, pod, namespace, container_name), what a fleet
	// groups on, and its counters keep the totals of members that left
	// (groups.go).
	PerProcess bool
	// Held says whether another vramprof session traces the process now
	// (serve let go of it, probes.CheckTraced): its figures end there, as
	// at an exit. Nil: never.
	Held func(pid uint32, start uint64) bool
	// Environ reads a process's environment block (NUL-separated, as
	// /proc/PID/environ, the default; tests replace it). Only the CUDA
	// variables that number its devices are kept (gpumap.go).
	Environ func(pid uint32) ([]byte, error)
	// Hostname is the GPU series' Hostname label, as dcgm-exporter sets
	// it: default $NODE_NAME (a DaemonSet sets it from spec.nodeName),
	// else the host name.
	Hostname string
	// RuntimeDirs are the container runtimes' directories of container
	// bundles, where a Kubernetes container's pod name, namespace and
	// container name are read (pods.go; DefaultRuntimeDirs). Nil: none
	// read, those labels stay empty.
	RuntimeDirs []string
	// Note says, in one line, why a Kubernetes container's series have no
	// pod name (a bundle malformed or of another pod, the directories not
	// there). Nil: nothing is said.
	Note func(string)
}

// Exporter folds a session's records into per-process analyses. It is a
// probes.Sink. Create it with New; it is safe for concurrent use.
type Exporter struct {
	opts Options

	mu     sync.Mutex
	header *event.Header
	// procs holds every process instance: a process is its PID and its
	// start time, and a PID reused while the exited process that had it is
	// still held has two. cur is the instance each PID's records go to
	// (the latest); seq numbers instances in the order they were seen.
	procs map[*proc]struct{}
	cur   map[uint32]*proc
	seq   uint64
	lost  event.Lost
	// groups keep the totals of processes that left each label set
	// (groups.go); with PerProcess, none are kept.
	groups map[groupKey]*group
	nvml   nvmlState // the device layer (nvml.go)
	// limiter holds Serve's connections (conns.go); nil before Serve.
	limiter *connLimiter
	// pods are the Kubernetes pods of the containers held (pods.go).
	pods podNames
}

// proc is one traced process instance (PID and start time) and its
// analysis.
type proc struct {
	pid uint32
	// start is the process's start time (/proc/PID/stat, clock ticks
	// since boot), read when its first record came: with the PID, it names
	// the process. 0 when the process was gone by then.
	start uint64
	seq   uint64 // the order it was seen in
	// Labels: command (argv0's base name, else comm; p.mu guards it, an
	// exec changes it), cgroup path and the container ID and Kubernetes
	// pod UID found in it ("" when none), and the pod's name, namespace
	// and container name its runtime gives (pods.go).
	command, cgroup, container, podUID string
	pod                                podMeta
	// env is what decides its CUDA numbering (gpumap.go), read with the
	// labels.
	env cudaEnv
	// commands are the commands of the process's instances (an exec makes
	// one) as each began, by the time of the Process record that began it
	// (analysis.Process.Start); "" when none was known then. Every other
	// label is the process's, as known now (groups.go: key). p.mu guards
	// it.
	commands map[uint64]string

	mu sync.Mutex
	an *analysis.Analyzer
	// version counts records added; snap is the result so far at snapVersion.
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
	if opts.Start == nil {
		opts.Start = startTime
	}
	if opts.Environ == nil {
		opts.Environ = func(pid uint32) ([]byte, error) {
			return os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		}
	}
	if opts.Hostname == "" {
		opts.Hostname = os.Getenv("NODE_NAME")
	}
	if opts.Hostname == "" {
		opts.Hostname, _ = os.Hostname()
	}
	return &Exporter{opts: opts, procs: make(map[*proc]struct{}), cur: make(map[uint32]*proc),
		groups: make(map[groupKey]*group), pods: podNames{dirs: opts.RuntimeDirs, note: opts.Note}}
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

// process returns the instance pid's record rec belongs to. A Process
// record starts a new instance unless it is an exec of the running one
// (same start time): the session writes one for every process it begins
// to trace, before any of its events, after every event of the process
// that had the PID before. The instance it replaces has exited, whether a
// sweep saw it or not (its PID is another process's now). A Process
// record read after its process exited (no start time) keeps the running
// instance: an exec's, most likely, and a new instance would split one
// process's figures.
func (x *Exporter) process(pid uint32, rec event.Record) *proc {
	r, isProc := rec.(*event.Process)
	var start uint64
	var startErr error
	if isProc {
		start = r.Start // read by the session at adoption
		if start == 0 {
			start, startErr = x.opts.Start(pid) // /proc, outside the lock
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.cur[pid]
	if !isProc {
		if p != nil {
			return p
		}
		// No Process record: the session saw the process's calls (serve
		// traces every process's) but it was gone before it could be
		// adopted, so nothing describes it: labels are what /proc still
		// shows, most often nothing (command="", start 0). A process
		// another session traces never gets here: the session drops its
		// records.
		r = &event.Process{PID: pid}
		start, startErr = x.opts.Start(pid)
	}
	if startErr != nil {
		start = 0 // gone already
	}
	if isProc && p != nil && (start == 0 || start == p.start) && p.exitedAt().IsZero() {
		// An exec: the process is what it now runs (a launcher that
		// became python). Its series take the new name; the analysis
		// starts an instance at this record, and what the old image did
		// stays with the old name.
		p.mu.Lock()
		if len(r.Command) > 0 {
			p.command = filepath.Base(r.Command[0])
		}
		if r.Cgroup != "" {
			p.setCgroup(r.Cgroup, &x.pods)
		}
		if b, err := x.opts.Environ(pid); err == nil {
			p.env = parseCUDAEnv(b) // the new image's environment
		}
		p.commands[r.Time] = p.command
		p.mu.Unlock()
		return p
	}
	now := x.opts.Now()
	if p != nil {
		p.mu.Lock()
		if p.exited.IsZero() {
			p.exited, p.reported = now, false
		}
		p.mu.Unlock()
	}
	x.seq++
	p = &proc{pid: pid, start: start, seq: x.seq, an: analysis.New(x.opts.Analysis), commands: map[uint64]string{}}
	x.describe(p, r)
	p.commands[r.Time] = p.command
	if start == 0 && !x.opts.Alive(pid, 0) {
		// Exited before it could be looked at: its records still count,
		// and it goes as any exited process does.
		p.exited = now
	}
	h := event.Header{Mode: "serve", PID: pid}
	if x.header != nil {
		h = *x.header
		h.PID = pid
	}
	_ = p.an.Add(&h)
	x.procs[p] = struct{}{}
	x.cur[pid] = p
	return p
}

func (p *proc) exitedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// soFar returns the process's figures so far, cached until its next
// record.
func (p *proc) soFar() *analysis.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.snap == nil || p.snapVersion != p.version {
		p.snap, p.snapVersion = p.an.SoFar(), p.version
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
	containers := make(map[string]bool) // of the processes still held
	for p := range x.procs {
		p.mu.Lock()
		if p.exited.IsZero() && (!x.opts.Alive(p.pid, p.start) ||
			x.opts.Held != nil && x.opts.Held(p.pid, p.start)) {
			// Exited, or left to another session: its figures end here.
			p.exited = now
			p.reported = false
		}
		drop := false
		if !p.exited.IsZero() {
			age := now.Sub(p.exited)
			drop = age >= x.opts.TTL || (p.reported && age >= x.opts.Grace)
		}
		if !drop {
			containers[p.container] = true
		}
		p.mu.Unlock()
		if drop {
			delete(x.procs, p)
			if x.cur[p.pid] == p {
				delete(x.cur, p.pid)
			}
			x.retire(p)
		}
	}
	x.sweepGroups(now)
	x.pods.keep(containers)
	return len(x.procs)
}

// Lost returns the session's lost-record totals so far.
func (x *Exporter) Lost() event.Lost {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.lost
}

// processes returns the process instances held, by PID, then in the
// order they were seen.
func (x *Exporter) processes() []*proc {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]*proc, 0, len(x.procs))
	for p := range x.procs {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *proc) int {
		if a.pid != b.pid {
			return cmp.Compare(a.pid, b.pid)
		}
		return cmp.Compare(a.seq, b.seq)
	})
	return out
}

// instance returns the process pid that started at start, or pid's latest
// instance when start is 0; nil when none is held.
func (x *Exporter) instance(pid uint32, start uint64) *proc {
	x.mu.Lock()
	defer x.mu.Unlock()
	if start == 0 {
		return x.cur[pid]
	}
	var found *proc
	for p := range x.procs {
		if p.pid == pid && p.start == start && (found == nil || p.seq > found.seq) {
			found = p
		}
	}
	return found
}

// Result returns the figures so far of pid's latest instance, or
// ErrNoProcess.
func (x *Exporter) Result(pid uint32) (*analysis.Result, error) {
	p := x.instance(pid, 0)
	if p == nil {
		return nil, fmt.Errorf("%w: %d", ErrNoProcess, pid)
	}
	return p.soFar(), nil
}

// describe finds p's labels (x.mu held): command from its Process
// record's argv0 (else /proc/PID/comm), cgroup from the record (read at
// adoption), else /proc/PID/cgroup, else its parent's (a fork child is in
// its parent's cgroup), the container and pod in the cgroup path, and the
// pod's name from the container's runtime.
func (x *Exporter) describe(p *proc, r *event.Process) {
	if len(r.Command) > 0 {
		p.command = filepath.Base(r.Command[0])
	}
	if p.command == "" && p.start != 0 {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.pid))
		p.command = strings.TrimSpace(string(b))
	}
	cg := r.Cgroup
	if cg == "" && p.start != 0 {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.pid))
		cg, _ = parseCgroup(b)
	}
	envRead := false
	if p.start != 0 {
		if b, err := x.opts.Environ(p.pid); err == nil {
			p.env, envRead = parseCUDAEnv(b), true
		}
	}
	if r.PPID != 0 && (cg == "" || !envRead) {
		// A fork child gone already: its parent's, which it inherits.
		if pp := x.cur[r.PPID]; pp != nil {
			pp.mu.Lock()
			if cg == "" {
				cg = pp.cgroup
			}
			if !envRead {
				p.env = pp.env
			}
			pp.mu.Unlock()
		}
	}
	p.setCgroup(cg, &x.pods)
}

// setCgroup sets p's cgroup path, what it says of the container and the
// pod, and the pod's name and namespace from pods (p.mu held, or p not
// shared yet; x.mu held, which guards pods).
func (p *proc) setCgroup(path string, pods *podNames) {
	p.cgroup = path
	p.container = containerOf(path)
	p.podUID = podUIDOf(path)
	p.pod = pods.of(p.container, p.podUID)
}

// containerID finds a container runtime's 64-hex ID in a cgroup path:
// docker-<id>.scope, cri-containerd-<id>.scope, crio-<id>.scope,
// /docker/<id>, kubepods/.../<id>.
var containerID = regexp.MustCompile(`([0-9a-f]{64})`)

// parseCgroup returns the cgroup path in /proc/PID/cgroup's contents: the
// cgroup v2 line's ("0::"), unless it is the root "/" and a v1 hierarchy
// has another (a hybrid host, where Kubernetes places containers in the v1
// ones: the first such), and the container ID in it. The session reads
// its Process records' the same way (probes.procCgroup).
func parseCgroup(b []byte) (path, container string) {
	v2, v1, first := "", "", ""
	for line := range bytes.Lines(b) {
		f := strings.SplitN(strings.TrimSpace(string(line)), ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			v2 = f[2]
		case v1 == "" && f[2] != "/":
			v1 = f[2]
		case first == "":
			first = f[2]
		}
	}
	switch {
	case (v2 == "" || v2 == "/") && v1 != "":
		path = v1
	case v2 != "":
		path = v2
	default:
		path = first
	}
	return path, containerOf(path)
}

// containerOf is the container ID in a cgroup path ("" when none): the
// last 64-hex name in it.
func containerOf(path string) string {
	if m := containerID.FindAllString(path, -1); len(m) > 0 {
		return m[len(m)-1]
	}
	return ""
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
// started at start (a zombie counts as exited). An instance of unknown
// start (0: gone when first seen) is not alive, whatever has its PID now.
func alive(pid uint32, start uint64) bool {
	if start == 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
		return false
	}
	st, err := startTime(pid)
	return err == nil && st == start
}
