//go:build linux

package probes

// A loader probe that only one process tree traps into. The loader's
// rendezvous (_dl_debug_state) runs at every process start and every
// dlopen/dlclose of every process that maps the loader; a uprobe without a
// process filter puts its breakpoint in all of them, and each pays a trap
// (microseconds) for a program that then finds it is no target. Under run,
// only the command's tree is traced.
//
// A uprobe perf event opened on one task with inherit set is the kernel's
// own process-tree filter: the breakpoint is installed only in the memory
// of tasks that carry the event (trace_uprobe's perf filter compares the
// event's task's mm), a fork copies the event to the child (and the page
// with the breakpoint), and an exec keeps it (the new image's loader is
// probed when it is mapped). A process outside the tree never has the
// breakpoint, so it never traps, whatever this session probes.
//
// The event must be a tracefs uprobe event (uprobe_events), opened as a
// tracepoint: an event of the uprobe PMU (perf_event_open's uprobe type,
// what cilium/ebpf uses) reads its file's path from the opener's memory
// when it is created, and an inherited copy is created in the forking
// process, where that address means nothing: the fork fails (ENOMEM or
// EFAULT; seen on 6.18 as "Cannot fork"). A tracefs event's copies share
// one event call, and its BPF programs are the call's: a hit in a task the
// filter passes runs them once. The program is attached through a second
// perf event on the root, one not inherited: an inherited copy of an event
// that carries a program carries it too, and when that copy is freed (its
// task exits) it takes the program off the shared call, for every event
// (seen on 6.18: after the tree's first child exited, no process of the
// tree ran the program again).
//
// tracefs is reached through a mount of its own that is attached nowhere
// (fsopen/fsmount, 5.2+), so nothing changes in any mount namespace; where
// that is refused, through a mount that exists. Without either, the caller
// keeps the probe without a process filter.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// treeGroup is the tracefs group of every event this package creates.
const treeGroup = "vramprof"

// treeSeq numbers the events of this process.
var treeSeq atomic.Uint64

// treeProbe is one uprobe seen by one process tree: the tracefs event and
// the perf event opened on the tree's root, with a BPF program attached. It
// must be Closed (the tracefs event outlives this process otherwise). Not
// safe for concurrent use.
type treeProbe struct {
	tracefs string // a directory holding tracefs's root
	mount   int    // the detached tracefs mount, -1 if tracefs is a mounted one
	name    string // the event, in treeGroup
	// tree is the perf event on the root, inherited by every task it
	// forks from then on; prog the one the program is attached to. -1
	// when closed.
	tree, prog int
}

// openTreeProbe places prog on the instruction at offset in the file at
// path, for the process pid and every process it forks from now on (and
// what those exec). pid must not run meanwhile: a task forked before the
// event is opened does not carry it.
func openTreeProbe(path string, offset uint64, pid int, prog *ebpf.Program) (_ *treeProbe, err error) {
	p := &treeProbe{mount: -1, tree: -1, prog: -1}
	if p.tracefs, p.mount, err = openTracefs(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = p.Close()
		}
	}()
	removeStaleTreeEvents(p.tracefs)
	p.name = fmt.Sprintf("loader_%d_%d", os.Getpid(), treeSeq.Add(1))
	if strings.ContainsAny(path, " \n") {
		// uprobe_events takes fields separated by white space.
		return nil, fmt.Errorf("tracefs uprobe on %q: a path with white space: %w", path, ebpf.ErrNotSupported)
	}
	if err := p.writeEvents(fmt.Sprintf("p:%s/%s %s:%#x", treeGroup, p.name, path, offset)); err != nil {
		p.name = ""
		return nil, fmt.Errorf("create tracefs uprobe %s:%#x: %w", path, offset, err)
	}
	idText, err := os.ReadFile(filepath.Join(p.tracefs, "events", treeGroup, p.name, "id"))
	if err != nil {
		return nil, fmt.Errorf("read id of tracefs uprobe %s: %w", p.name, err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(idText)), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("read id of tracefs uprobe %s: %w", p.name, err)
	}
	// The program goes on an event of its own that nothing inherits (see
	// the type's comment), opened on the root too.
	attr := unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_TRACEPOINT,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Config:      id,
		Sample_type: unix.PERF_SAMPLE_RAW,
		Sample:      1,
		Wakeup:      1,
		Bits:        unix.PerfBitDisabled,
	}
	if p.prog, err = unix.PerfEventOpen(&attr, pid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC); err != nil {
		p.prog = -1
		return nil, fmt.Errorf("open perf event of tracefs uprobe %s on pid %d: %w", p.name, pid, err)
	}
	if err := unix.IoctlSetInt(p.prog, unix.PERF_EVENT_IOC_SET_BPF, prog.FD()); err != nil {
		return nil, fmt.Errorf("attach %s to tracefs uprobe %s: %w", prog, p.name, err)
	}
	if err := unix.IoctlSetInt(p.prog, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		return nil, fmt.Errorf("enable tracefs uprobe %s: %w", p.name, err)
	}
	attr.Bits = unix.PerfBitInherit
	if p.tree, err = unix.PerfEventOpen(&attr, pid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC); err != nil {
		p.tree = -1
		return nil, fmt.Errorf("open inherited perf event of tracefs uprobe %s on pid %d: %w", p.name, pid, err)
	}
	return p, nil
}

// openTracefs returns a directory holding tracefs's root: a mount of its
// own attached nowhere (and its fd, to close), else a mounted one (and -1).
func openTracefs() (dir string, mount int, err error) {
	if fs, ferr := unix.Fsopen("tracefs", unix.FSOPEN_CLOEXEC); ferr == nil {
		cerr := unix.FsconfigCreate(fs)
		if cerr == nil {
			mount, cerr = unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, 0)
		}
		_ = unix.Close(fs)
		if cerr == nil {
			dir = fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), mount)
			if _, serr := os.Stat(filepath.Join(dir, "uprobe_events")); serr == nil {
				return dir, mount, nil
			}
			_ = unix.Close(mount)
		}
		err = cerr
	} else {
		err = ferr
	}
	for _, d := range []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"} {
		if _, serr := os.Stat(filepath.Join(d, "uprobe_events")); serr == nil {
			return d, -1, nil
		}
	}
	if err == nil {
		err = errors.New("no uprobe_events")
	}
	return "", -1, fmt.Errorf("reach tracefs: %w: %w", ebpf.ErrNotSupported, err)
}

// writeEvents writes one command to uprobe_events.
func (p *treeProbe) writeEvents(cmd string) error {
	f, err := os.OpenFile(filepath.Join(p.tracefs, "uprobe_events"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(cmd + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

// removeStaleTreeEvents removes the events of this package whose process
// is gone (killed before its Close): unused, they trap nobody, but they
// would stay listed. One still in use is refused by the kernel (EBUSY).
func removeStaleTreeEvents(tracefs string) {
	f, err := os.Open(filepath.Join(tracefs, "uprobe_events"))
	if err != nil {
		return
	}
	var stale []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// p:vramprof/loader_PID_N /path:0x...
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		_, ev, ok := strings.Cut(fields[0], ":"+treeGroup+"/")
		if !ok {
			continue
		}
		parts := strings.Split(ev, "_")
		if len(parts) != 3 || parts[0] != "loader" {
			continue
		}
		pid, err := strconv.Atoi(parts[1])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			stale = append(stale, ev)
		}
	}
	_ = f.Close()
	for _, ev := range stale {
		p := treeProbe{tracefs: tracefs}
		_ = p.writeEvents("-:" + treeGroup + "/" + ev)
	}
}

// Close detaches the program, removes the event (its inherited copies go
// with it) and returns the first error.
func (p *treeProbe) Close() error {
	var first error
	for _, fd := range []*int{&p.tree, &p.prog} {
		if *fd < 0 {
			continue
		}
		if err := unix.Close(*fd); err != nil && first == nil {
			first = fmt.Errorf("close perf event of tracefs uprobe %s: %w", p.name, err)
		}
		*fd = -1
	}
	if p.name != "" {
		// The last reference to the event call can be dropped a moment
		// after the perf event's: the kernel says EBUSY until then.
		var err error
		for range 50 {
			if err = p.writeEvents("-:" + treeGroup + "/" + p.name); !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil && first == nil {
			first = fmt.Errorf("remove tracefs uprobe %s: %w", p.name, err)
		}
		p.name = ""
	}
	if p.mount >= 0 {
		_ = unix.Close(p.mount)
		p.mount = -1
	}
	return first
}
