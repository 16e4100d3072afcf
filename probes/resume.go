//go:build linux

package probes

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Resuming a process the BPF side stopped, without cancelling a stop of
// the user's.
//
// A SIGCONT discards every stop signal pending in the process (SIGSTOP,
// SIGTSTP, SIGTTIN, SIGTTOU: the kernel flushes them all, handled or not).
// A user's SIGSTOP sent while vramprof holds a process at a library load
// is such a signal: the process is stopped already, so it waits in the
// queue, and a SIGCONT would throw it away and let the process run on. So
// resume looks first: with a stop signal pending that would stop the
// process (SIGSTOP, or another one left to its default action, not
// blocked, in a process group that is not orphaned: the kernel discards
// SIGTSTP, SIGTTIN and SIGTTOU in one), the process is the user's to
// resume and is left stopped; the user's SIGCONT resumes it as it would
// have without vramprof. Any other pending stop signal (handled, ignored,
// blocked, or one the kernel will discard) is sent again after the
// SIGCONT, so that its handler still runs (or it stays pending while
// blocked).
//
// A SIGSTOP pending in a process that is not stopped yet is taken for the
// BPF side's own, on its way (the stop record can be read before the
// signal is delivered): a SIGCONT then discards it, as it always did.
//
// What is left: a stop signal sent between the look and the SIGCONT, or
// before the process has stopped, is still lost; one sent while the BPF
// side's own SIGSTOP is pending merges with it (one instance of a signal
// is queued at a time), as two SIGSTOPs from two users would.

// stopSignals are the signals a SIGCONT discards.
var stopSignals = []syscall.Signal{syscall.SIGSTOP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU}

// resume sends SIGCONT to pid, which the BPF side stopped, unless a stop
// signal that stops it is pending while it is stopped (see above): then it
// returns that signal and leaves pid stopped.
func resume(pid int) (userStop syscall.Signal, err error) {
	// Only once the process is stopped: until then the pending SIGSTOP
	// may be the BPF side's own, not delivered yet (user space can read
	// the stop record first), and the SIGCONT must discard it.
	st, ok := pendingStops(pid)
	if ok && st.stop != 0 && st.stopped {
		return st.stop, nil
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		return 0, err
	}
	for _, s := range st.again {
		_ = syscall.Kill(pid, s)
	}
	return 0, nil
}

// pending is what pendingStops found.
type pending struct {
	// stopped: the process was stopped (state T) before the signals were
	// read. Read in that order (the kernel writes State before the
	// signal sets in /proc/PID/status): a stop signal pending after the
	// process had stopped came after the one that stopped it. Read the
	// other way round, the BPF side's own SIGSTOP, seen pending, could
	// stop the process before its state was read.
	stopped bool
	stop    syscall.Signal   // a pending signal that stops the process; 0: none
	again   []syscall.Signal // pending stop signals it handles, ignores or blocks
}

// pendingStops reads the stop signals pending in pid, in the process's
// queue and in each thread's, from /proc. ok is false when pid cannot be
// read (it exited).
func pendingStops(pid int) (p pending, ok bool) {
	f, state, err := procStatusFields(fmt.Sprintf("/proc/%d/status", pid), "ShdPnd", "SigPnd", "SigBlk", "SigCgt", "SigIgn")
	if err != nil {
		return p, false
	}
	p.stopped = state == 'T'
	// A signal pending in a thread's queue is blocked when that thread
	// blocks it; one in the process's queue, when every thread does.
	pnd, blocked := f["SigPnd"]&^f["SigBlk"], f["SigPnd"]&f["SigBlk"]
	blockedAll := f["SigBlk"]
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, t := range tasks {
		if tf, _, err := procStatusFields(t, "SigPnd", "SigBlk"); err == nil {
			pnd |= tf["SigPnd"] &^ tf["SigBlk"]
			blocked |= tf["SigPnd"] & tf["SigBlk"]
			blockedAll &= tf["SigBlk"]
		}
	}
	pnd |= f["ShdPnd"] &^ blockedAll
	blocked |= f["ShdPnd"] & blockedAll
	orphaned := sync.OnceValue(func() bool { return orphanedGroup(pid) }) // read only when needed
	for _, s := range stopSignals {
		b := uint64(1) << (uint(s) - 1)
		switch {
		case pnd&b == 0 && blocked&b == 0:
		case pnd&b == 0, s != syscall.SIGSTOP && (f["SigCgt"]|f["SigIgn"])&b != 0:
			p.again = append(p.again, s)
		case p.stop != 0:
		case s != syscall.SIGSTOP && orphaned():
			// The kernel discards it at delivery: it stops nothing.
			p.again = append(p.again, s)
		default:
			p.stop = s
		}
	}
	return p, true
}

// orphanedGroup says whether pid's process group is orphaned (POSIX): no
// member has a parent, other than init, in another group of the same
// session. The kernel discards a SIGTSTP, SIGTTIN or SIGTTOU left to its
// default action in such a group rather than stop the process. It reads
// every process's /proc/PID/stat: only when such a signal is pending.
func orphanedGroup(pid int) bool {
	st, err := procStat(pid)
	if err != nil {
		return false
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range ents {
		m, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ms, err := procStat(m)
		if err != nil || ms.PGRP != st.PGRP || ms.State == "Z" || ms.PPID <= 1 {
			continue
		}
		if ps, err := procStat(ms.PPID); err == nil && ps.PGRP != st.PGRP && ps.Session == st.Session {
			return false
		}
	}
	return true
}

// procStatusFields reads the named hexadecimal fields (signal sets) of a
// /proc status file, and the state letter of its State line, in one read.
func procStatusFields(path string, names ...string) (map[string]uint64, byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	var state byte
	out := make(map[string]uint64, len(names))
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if k == "State" && v != "" {
			state = v[0]
		}
		for _, n := range names {
			if k == n {
				x, err := strconv.ParseUint(v, 16, 64)
				if err != nil {
					return nil, 0, fmt.Errorf("%s: %s: %w", path, k, err)
				}
				out[k] = x
			}
		}
	}
	if len(out) != len(names) {
		return nil, 0, fmt.Errorf("%s: missing fields of %v", path, names)
	}
	return out, state, nil
}
