//go:build linux

package sigstate

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// unignorable are the signals os/signal cannot set to SIG_IGN (see the
// package comment).
var unignorable = []syscall.Signal{syscall.SIGPROF, syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE,
	syscall.SIGILL, syscall.SIGTRAP, syscall.SIGSTKFLT, syscall.SIGSYS}

// setThreadMask sets the calling thread's signal mask to m and returns a
// function that sets the previous one again. The runtime forks with the
// forking thread's mask, and keeps the signals it needs unblocked on its
// threads (SIGINT, SIGTERM, SIGCHLD, SIGURG...) whatever this process
// started with: the child would start with those unblocked.
func setThreadMask(m Set) (restore func(), err error) {
	var set, old unix.Sigset_t
	set.Val[0] = uint64(m)
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &set, &old); err != nil {
		return func() {}, err
	}
	return func() { _ = unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil) }, nil
}
