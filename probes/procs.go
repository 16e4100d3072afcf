//go:build linux

package probes

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/symbolize"
)

// proc is a traced process.
type proc struct {
	pid       uint32
	startTime uint64           // /proc/PID/stat field 22: tells a reused PID apart
	libraries map[fileKey]bool // probed files this process maps, reported once each
	cuda      bool             // maps at least one probed CUDA library
	// stripped are the files p maps that hold a CUDA runtime without
	// symbols (probedFile.StrippedRuntime), as p maps them.
	stripped  []string
	fromStart bool          // traced from its first instruction (run, or forked from a target)
	info      event.Process // the last Process record written for it
	exited    bool
	// forget: exited, but records of it may still wait in the ring buffer,
	// and they need its maps to symbolize. Dropped once the ring is empty,
	// or once due and every record in the ring when it became due is read.
	forget bool
	due    bool
	// rendezvousAt is when its loader last announced a change this
	// session did not stop it for (MonotonicNow; 0: never): another
	// session may have (takeDeferred).
	rendezvousAt uint64
	py           *pyProc // its CPython, once found
	pyNoted      bool    // a CPython was found that cannot be read: said once
	pytest       bool    // its libc was found for pytest's phases (pytest.go)
	lock         *procLock
}

// procHost is what the process lifecycle needs of the system: /proc, the
// one-session-per-process locks (lock.go) and the BPF filter. A session's
// is kernelHost; tests drive procTable with a fake, without root.
type procHost interface {
	// startTime is the start time of pid (clock ticks since boot), which
	// tells a process apart from a later one that reuses its PID. Errors
	// match ErrNoProcess when pid does not exist.
	startTime(pid uint32) (uint64, error)
	// lock takes the lock of the process (pid, start) for this session:
	// a *TracedError when another session holds it.
	lock(pid uint32, start uint64) (*procLock, error)
	// heldBy is the PID of the session that holds the lock of the
	// process (pid, start), 0 when none does.
	heldBy(pid uint32, start uint64) int
	// target makes the BPF side trace pid.
	target(pid uint32) error
	// untarget stops tracing pid in the BPF side, and forgets its threads'
	// state there.
	untarget(pid uint32)
}

// procTable is the process lifecycle of a session: the processes traced,
// the ones left to other sessions, how the traced ones ended. It reaches
// the system through its host only. Not safe for concurrent use.
type procTable struct {
	host procHost
	// all: every process on the host may be a target (Options.All): no
	// locks are taken, and processes other sessions hold are left alone.
	all     bool
	note    func(msg string) // Options.Note; nil drops notes
	targets *atomic.Int64    // Stats.Targets
	procs   map[uint32]*proc
	// held are processes another session traces (with All: left alone
	// for as long as they live), by PID, with their start time.
	held  map[uint32]uint64
	exits map[uint32]syscall.WaitStatus // see ExitStatus
}

func newProcTable(host procHost, all bool, note func(string), targets *atomic.Int64) *procTable {
	return &procTable{host: host, all: all, note: note, targets: targets,
		procs: make(map[uint32]*proc), held: make(map[uint32]uint64)}
}

// add makes pid a target: its lock taken (or, with all, checked), the BPF
// filter told. A process already traced comes back as it is, with added
// false. known says the caller can describe the process without /proc: it
// is then added even when /proc no longer shows it (a fork child gone
// already).
func (t *procTable) add(pid uint32, known bool) (p *proc, added bool, err error) {
	if p, ok := t.procs[pid]; ok && !p.exited {
		return p, false, nil
	}
	st, err := t.host.startTime(pid)
	if err != nil && !known {
		return nil, false, err
	}
	var lock *procLock
	switch {
	case err != nil:
	case t.all:
		// Every process: look, never lock (lock.go).
		if owner := t.host.heldBy(pid, st); owner != 0 {
			return nil, false, &TracedError{PID: pid, Owner: owner}
		}
	default:
		// One session per process (lock.go): before anything is probed.
		if lock, err = t.host.lock(pid, st); err != nil {
			return nil, false, err
		}
	}
	if err := t.host.target(pid); err != nil {
		lock.release()
		return nil, false, err
	}
	p = &proc{pid: pid, startTime: st, libraries: make(map[fileKey]bool), lock: lock}
	t.procs[pid] = p
	t.targets.Add(1)
	return p, true, nil
}

// retire marks a process instance exited, leaving the BPF maps alone.
func (t *procTable) retire(p *proc) {
	if p.exited {
		return
	}
	p.exited = true
	p.forget = true
	p.lock.release()
	t.targets.Add(-1)
}

// untrack marks pid exited and stops filtering for it.
func (t *procTable) untrack(p *proc) {
	if p.exited {
		return
	}
	t.retire(p)
	t.host.untarget(p.pid)
}

// reap calls drop for each process that exited since the last reap, once
// the ring buffer was found empty: none of their records remain; with
// dueOnly, only those markDue marked, once the reader has read every record
// the ring held then (a reader that is behind never finds it empty). With
// all, the table then forgets them.
func (t *procTable) reap(drop func(p *proc), dueOnly bool) {
	for _, p := range t.procs {
		if p.forget && (p.due || !dueOnly) {
			p.forget, p.due = false, false
			drop(p)
			if t.all {
				// A session that adopts every process (serve runs for
				// weeks) keeps none it has seen exit; a later process
				// with the PID is adopted afresh. ExitStatus is for
				// single-target sessions.
				delete(t.procs, p.pid)
				delete(t.exits, p.pid)
			}
		}
	}
}

// markDue marks the processes known to have exited now: all their records
// are in the ring buffer already, so reap(drop, true) may drop them once
// the reader has read what the ring holds now.
func (t *procTable) markDue() {
	for _, p := range t.procs {
		p.due = p.forget
	}
}

func (t *procTable) allExited() bool {
	if len(t.procs) == 0 || t.all {
		return false // --all waits for processes yet to come
	}
	for _, p := range t.procs {
		if !p.exited {
			return false
		}
	}
	return true
}

// sweep notices what ends without a record: processes left to other
// sessions that are gone, targets gone or replaced by a later process with
// the PID (an exit the tracepoint did not announce), and, with all, targets
// a single-process session took since.
func (t *procTable) sweep() {
	for pid, st := range t.held {
		// Gone, or the PID is another process's now (the exit of a
		// process that is not ours is not announced).
		if now, err := t.host.startTime(pid); err != nil || now != st {
			delete(t.held, pid)
		}
	}
	for _, p := range t.procs {
		if p.exited {
			continue
		}
		if st, err := t.host.startTime(p.pid); err != nil || st != p.startTime {
			t.untrack(p)
			continue
		}
		if t.all {
			// A single-process session took it since: left to that
			// session from now on (lock.go), no longer stopped by us.
			if owner := t.host.heldBy(p.pid, p.startTime); owner != 0 {
				t.untrack(p)
				t.hold(p.pid, &TracedError{PID: p.pid, Owner: owner})
			}
		}
	}
}

// giveUp leaves alone, for as long as it lives, a process adopt could not
// probe (All), and says why once.
func (t *procTable) giveUp(pid uint32, why error) { t.leave(pid, why.Error()) }

// hold leaves pid to the session that traces it (All), and says so once.
func (t *procTable) hold(pid uint32, why *TracedError) {
	reason := ErrTraced.Error()
	if why.Owner != 0 {
		reason += fmt.Sprintf(" (vramprof pid %d)", why.Owner)
	}
	t.leave(pid, reason)
}

// leave keeps pid out of the session for as long as that process lives
// (its records are dropped in handle until sweep sees it gone) and notes
// the reason once.
func (t *procTable) leave(pid uint32, reason string) {
	st, err := t.host.startTime(pid)
	if err != nil {
		return
	}
	if old, ok := t.held[pid]; ok && old == st {
		return // said already
	}
	t.held[pid] = st
	if t.note != nil {
		t.note(fmt.Sprintf("skipping pid %d: %s", pid, reason))
	}
}

// kernelHost is the procHost of a live session: the real /proc, lock
// files and BPF maps.
type kernelHost struct {
	objs  *bpfObjects
	epoch *filterEpoch
}

// filterEpoch is the BPF side's user_epoch (bpf/vramprof/blocks.h): the
// block layer's probes cache, per thread, what the targets and py_procs
// maps say of its process, and read them again once the epoch moved. So
// every change that takes a process out of targets, or adds or removes its
// py_procs entry, is followed by bump. Safe for concurrent use: the one
// writer of user_epoch.
type filterEpoch struct {
	mu sync.Mutex
	n  uint64
	v  *ebpf.Variable
}

// newFilterEpoch checks that user_epoch can be written (memory-mapped
// globals: kernel 5.5+), so that bump cannot fail later.
func newFilterEpoch(v *ebpf.Variable) (*filterEpoch, error) {
	if err := v.Set(uint64(0)); err != nil {
		return nil, fmt.Errorf("set user_epoch: %w", err)
	}
	return &filterEpoch{v: v}, nil
}

// bump moves the epoch on, after a change to targets or py_procs.
func (e *filterEpoch) bump() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	_ = e.v.Set(e.n) // a memory-mapped store: checked in newFilterEpoch
}

func (kernelHost) startTime(pid uint32) (uint64, error) { return procStartTime(int(pid)) }

func (kernelHost) lock(pid uint32, start uint64) (*procLock, error) { return lockProc(pid, start) }

func (kernelHost) heldBy(pid uint32, start uint64) int { return heldBy(pid, start) }

func (h kernelHost) target(pid uint32) error {
	if err := h.objs.Targets.Put(pid, uint8(1)); err != nil {
		return fmt.Errorf("add pid %d to targets: %w", pid, err)
	}
	return nil
}

func (h kernelHost) untarget(pid uint32) {
	_ = h.objs.Targets.Delete(pid)
	_ = h.objs.PyProcs.Delete(pid)
	h.epoch.bump()
	// Its threads' state passes the BPF filter by itself (see thread_state):
	// drop it, so a later process that reuses the PID is not traced.
	var key uint64
	var th bpfThread
	var stale []uint64
	for it := h.objs.Threads.Iterate(); it.Next(&key, &th); {
		if uint32(key>>32) == pid {
			stale = append(stale, key)
		}
	}
	for _, k := range stale {
		_ = h.objs.Threads.Delete(k)
	}
}

// procFS is /proc, read through procfs; opened once.
var procFS = sync.OnceValues(func() (procfs.FS, error) { return procfs.NewFS(procfs.DefaultMountPoint) })

// procOf is the /proc directory of pid. Errors match ErrNoProcess.
func procOf(pid int) (procfs.Proc, error) {
	root, err := procFS()
	if err != nil {
		return procfs.Proc{}, fmt.Errorf("%w: %d", ErrNoProcess, pid)
	}
	p, err := root.Proc(pid)
	if err != nil {
		return procfs.Proc{}, fmt.Errorf("%w: %d", ErrNoProcess, pid)
	}
	return p, nil
}

// procStat reads /proc/PID/stat. Errors match ErrNoProcess when it cannot
// be read (the process is gone).
func procStat(pid int) (procfs.ProcStat, error) {
	p, err := procOf(pid)
	if err != nil {
		return procfs.ProcStat{}, err
	}
	st, err := p.Stat()
	var pathErr *fs.PathError
	switch {
	case errors.As(err, &pathErr) || errors.Is(err, syscall.ESRCH):
		return procfs.ProcStat{}, fmt.Errorf("%w: %d", ErrNoProcess, pid)
	case err != nil:
		return procfs.ProcStat{}, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// procInfo describes pid as /proc shows it now.
func procInfo(pid uint32) *event.Process {
	info := &event.Process{PID: pid}
	p, err := procOf(int(pid))
	if err != nil {
		return info
	}
	if cmd, err := p.CmdLine(); err == nil && len(cmd) > 0 {
		info.Command = cmd
	}
	if st, err := procStat(int(pid)); err == nil {
		info.PPID = uint32(st.PPID)
	}
	info.Exe, _ = p.Executable()
	info.Cgroup = procCgroup(p)
	if (info.Cgroup == "/" || info.Cgroup == "") && symbolize.Exiting(int(pid)) {
		// An exiting process reads the root in every cgroup v1 hierarchy
		// whatever cgroup it ran in (seen on a hybrid host, kernel 6.18:
		// a short job under serve labelled cgroup="/"), or nothing once
		// reaped. Checked after the read: a process not exiting then was
		// read true. A fork child stays in its parent's cgroup unless
		// something moves it: the parent's, as adoptGone takes it;
		// unknown without one.
		info.Cgroup = ""
		if pp, err := procOf(int(info.PPID)); info.PPID != 0 && err == nil {
			info.Cgroup = procCgroup(pp)
		}
	}
	return info
}

// procCgroup is the cgroup path of a process: the cgroup v2 line of
// /proc/PID/cgroup ("0::/path"), unless it is the root "/" on a host that
// mounts v1 hierarchies too (a hybrid host, where Kubernetes places
// containers in the v1 ones); then the first v1 hierarchy's that is not
// the root. "" when unreadable. Read at adoption, it places a process that
// is gone by the time its records are read (a short job in a container).
func procCgroup(p procfs.Proc) string {
	cgs, err := p.Cgroups()
	if err != nil {
		return ""
	}
	v2, v1 := "", ""
	for _, cg := range cgs {
		switch {
		case cg.HierarchyID == 0 && len(cg.Controllers) == 0:
			v2 = cg.Path
		case v1 == "" && cg.Path != "/":
			v1 = cg.Path
		}
	}
	if (v2 == "" || v2 == "/") && v1 != "" {
		return v1
	}
	return v2
}

// procStartTime reads the start time of pid (clock ticks since boot, field
// 22 of /proc/PID/stat), which tells a process apart from a later one that
// reuses its PID.
func procStartTime(pid int) (uint64, error) {
	st, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return st.Starttime, nil
}

// bootTicks is the time since boot in the clock ticks /proc/PID/stat
// counts process start times in (CLOCK_BOOTTIME, as start_boottime), cut
// to the tick: a process whose start tick is greater started after now.
func bootTicks() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano()) / clockTicksNs
}

// procState is the state letter of /proc/PID/stat ('T': stopped), 0 when
// unreadable.
func procState(pid int) byte {
	st, err := procStat(pid)
	if err != nil || st.State == "" {
		return 0
	}
	return st.State[0]
}
