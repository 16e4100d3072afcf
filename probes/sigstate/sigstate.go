package sigstate

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// NSig is the number of signals the sets below cover (1 to 64).
const NSig = 64

// Set is a set of signals: bit N-1 is signal N, as /proc/PID/status's
// SigIgn and SigBlk show them.
type Set uint64

// Has reports whether s is in the set.
func (m Set) Has(s syscall.Signal) bool { return s >= 1 && s <= NSig && uint64(m)&bit(s) != 0 }

func bit(s syscall.Signal) uint64 { return 1 << (uint(s) - 1) }

// start is what this process started with, read once.
var start = sync.OnceValue(func() (st struct {
	ign, blk Set
	known    bool
}) {
	ign, blk, known := startState()
	st.ign, st.blk, st.known = Set(ign), Set(blk), known
	return st
})

// Ignored is the set of signals whose disposition was SIG_IGN when this
// process started.
func Ignored() Set { return start().ign }

// Blocked is the signal mask this process started with.
func Blocked() Set { return start().blk }

// Known reports whether Ignored is complete: false when built without cgo,
// where only SIGHUP and SIGINT are known.
func Known() bool { return start().known }

// runtimeHandled are the signals the runtime needs a handler for whatever
// this process inherited (ForExec ignores them only around a fork): SIGCHLD
// (ignoring it makes the kernel reap children, and Wait fails) and SIGURG
// (the runtime's preemption signal).
var runtimeHandled = []syscall.Signal{syscall.SIGCHLD, syscall.SIGURG}

// Lost returns the signals inherited as ignored that a launched command
// still gets with their default action (see the package comment).
func Lost() []syscall.Signal {
	var out []syscall.Signal
	for _, s := range unignorable {
		if Ignored().Has(s) {
			out = append(out, s)
		}
	}
	return out
}

// Keep makes this process ignore again every signal it started with
// ignored, except those the runtime must handle (SIGCHLD, SIGURG, and the
// ones of Lost). It undoes any os/signal.Notify of those signals: call it
// before them, and leave them out of Notify (Wanted). Safe to call more
// than once, and for concurrent use.
func Keep() {
	ign := Ignored()
	for s := syscall.Signal(1); s <= NSig; s++ {
		if ign.Has(s) && s != syscall.SIGCHLD && s != syscall.SIGURG && s != syscall.SIGKILL && s != syscall.SIGSTOP {
			signal.Ignore(s) // a no-op for the ones of Lost
		}
	}
}

// forExec serialises ForExec's windows: two overlapping ones would restore
// the handlers early.
var forExec sync.Mutex

// ForExec prepares a fork and exec: the child will start with the
// dispositions and mask this process started with. It calls Keep, ignores
// SIGCHLD and SIGURG too when they were inherited as ignored, and sets the
// calling thread's mask to Blocked (when Known), until the returned
// function, called right after the child is started, undoes the last two.
// The caller must be locked to its thread (runtime.LockOSThread) from ForExec to done, and
// start the child from it. Meanwhile a child of this process that exits is
// reaped by the kernel (SIGCHLD ignored): start nothing else in between.
func ForExec() (done func(), err error) {
	forExec.Lock()
	Keep()
	var back []os.Signal
	for _, s := range runtimeHandled {
		if Ignored().Has(s) {
			signal.Ignore(s)
			back = append(back, s)
		}
	}
	restoreMask := func() {}
	if Known() { // else the runtime's own: what it started with, less what it needs
		restoreMask, err = setThreadMask(Blocked())
	}
	done = func() {
		restoreMask()
		if len(back) > 0 {
			// Notify installs the runtime's handler again; Stop leaves
			// it there, as for any signal the runtime handles.
			c := make(chan os.Signal, 1)
			signal.Notify(c, back...)
			signal.Stop(c)
		}
		forExec.Unlock()
	}
	if err != nil {
		done()
		return func() {}, fmt.Errorf("set the signal mask for a child: %w", err)
	}
	return done, nil
}

// Spawn runs start, which starts a child, outside every ForExec window:
// a child started in one would inherit its dispositions and mask, and
// while SIGCHLD is ignored its exit is reaped by the kernel, not by Wait.
func Spawn(start func()) {
	forExec.Lock()
	defer forExec.Unlock()
	start()
}

// Wanted returns the signals of sigs this process did not start with
// ignored: the ones it may Notify (and pass on) as a shell would. One it
// started with ignored is not delivered to it, nor to what it runs.
func Wanted(sigs ...os.Signal) []os.Signal {
	var out []os.Signal
	for _, s := range sigs {
		if ss, ok := s.(syscall.Signal); ok && Ignored().Has(ss) {
			continue
		}
		out = append(out, s)
	}
	return out
}
