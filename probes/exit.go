//go:build linux

package probes

import "syscall"

// noteExit keeps how a traced process ended: the exit tracepoint's record
// carries the kernel's wait(2) status (exit code << 8, or the signal).
func (t *procTable) noteExit(pid uint32, status uint64) {
	if t.exits == nil {
		t.exits = map[uint32]syscall.WaitStatus{}
	}
	t.exits[pid] = syscall.WaitStatus(uint32(status))
}

// ExitStatus is how traced process pid ended, as wait(2) would tell its
// parent: attach is not the parent, so this is the only way it learns that
// a SIGKILL, not exit(0), ended its target. ok is false when the session
// did not see it exit. Call it after Run has returned (not safe for use
// concurrent with Run).
func (s *Session) ExitStatus(pid uint32) (status syscall.WaitStatus, ok bool) {
	status, ok = s.procs.exits[pid]
	return status, ok
}
