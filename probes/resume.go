//go:build linux

package probes

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Resuming a process the BPF side stopped, without cancelling a stop of
// the user's.
//
// A SIGCONT discards every stop signal pending in the process (SIGSTOP,
// SIGTSTP, SIGTTIN, SIGTTOU: the kernel flushes them all, handled or not).
// A user's SIGSTOP sent while vramprof holds a process at a library load
// is such a signal: the process is stopped already, so it waits in the
// queue, and vramprof's SIGCONT used to throw it away and let the process
// run on. So resume looks first: with a stop signal pending that would
// stop the process (SIGSTOP, or another one left to its default action),
// the process is the user's to resume and is left stopped; the user's
// SIGCONT resumes it as it would have without vramprof. A pending stop
// signal the process handles (or blocks and ignores) is sent again after
// the SIGCONT, so that its handler still runs.
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
	if ok && st.stop != 0 && procState(pid) == 'T' {
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
	stop  syscall.Signal   // a pending signal that stops the process; 0: none
	again []syscall.Signal // pending stop signals it handles or ignores
}

// pendingStops reads the stop signals pending in pid, in the process's
// queue and in each thread's, from /proc. ok is false when pid cannot be
// read (it exited).
func pendingStops(pid int) (p pending, ok bool) {
	f, err := procStatusFields(fmt.Sprintf("/proc/%d/status", pid), "ShdPnd", "SigPnd", "SigCgt", "SigIgn")
	if err != nil {
		return p, false
	}
	pnd := f["ShdPnd"] | f["SigPnd"]
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, t := range tasks {
		if tf, err := procStatusFields(t, "SigPnd"); err == nil {
			pnd |= tf["SigPnd"]
		}
	}
	for _, s := range stopSignals {
		b := uint64(1) << (uint(s) - 1)
		switch {
		case pnd&b == 0:
		case s != syscall.SIGSTOP && (f["SigCgt"]|f["SigIgn"])&b != 0:
			p.again = append(p.again, s)
		case p.stop == 0:
			p.stop = s
		}
	}
	return p, true
}

// procStatusFields reads the named hexadecimal fields (signal sets) of a
// /proc status file.
func procStatusFields(path string, names ...string) (map[string]uint64, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	out := make(map[string]uint64, len(names))
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		for _, n := range names {
			if k == n {
				x, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				if err != nil {
					return nil, fmt.Errorf("%s: %s: %w", path, k, err)
				}
				out[k] = x
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(out) != len(names) {
		return nil, fmt.Errorf("%s: missing fields of %v", path, names)
	}
	return out, nil
}
