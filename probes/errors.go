package probes

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Sentinel errors. Callers test them with errors.Is; the CLI turns each into
// one line that says what to do.
var (
	// ErrNotPermitted: the kernel refused to load BPF or place a uprobe.
	// vramprof needs root, or CAP_BPF + CAP_PERFMON (+ CAP_SYS_PTRACE and
	// CAP_DAC_READ_SEARCH to read another user's process).
	ErrNotPermitted = errors.New("not permitted")
	// ErrNoAccess: the kernel refuses this process a look at another's
	// memory map although it holds the privileges to trace (a user
	// namespace, a sandbox). The error is an *AccessError, which says why.
	ErrNoAccess = errors.New("no access to the process")
	// ErrNoProcess: the PID does not exist (or exited).
	ErrNoProcess = errors.New("no such process")
	// ErrNoCUDA: the process maps no library that defines the CUDA
	// allocation API (yet: see AttachOptions.Wait).
	ErrNoCUDA = errors.New("no CUDA runtime in process")
	// ErrCommandNotFound: the command to run does not exist (a shell's
	// exit 127).
	ErrCommandNotFound = errors.New("command not found")
	// ErrCommandNotExecutable: the command to run exists but cannot be
	// executed: no execute permission, a directory, not a program (a
	// shell's exit 126).
	ErrCommandNotExecutable = errors.New("command not executable")
	// ErrNoBPF: the kernel lacks a BPF feature vramprof needs.
	ErrNoBPF = errors.New("kernel lacks BPF support")
	// ErrTraced: another vramprof session traces the process. The error
	// is a *TracedError, which names that session.
	ErrTraced = errors.New("already traced by another vramprof session")
	// ErrStrippedRuntime: the process's only CUDA runtime is linked in
	// statically with its symbols stripped, and it has not loaded the
	// driver (libcuda.so.1, loaded at the first CUDA call), so there is
	// nothing to probe. The error is a *StrippedRuntimeError, which names
	// the file.
	ErrStrippedRuntime = errors.New("statically linked, stripped CUDA runtime")
	// ErrLock: the per-process lock (LockDir) cannot be taken: the
	// directory is read-only or cannot be made, or a lock file is a link or
	// not a plain file. Tracing is refused: without the lock two sessions
	// could trace one process unawares.
	ErrLock = errors.New("cannot take the per-process lock")
)

// isPermission reports whether err is the kernel saying no for lack of
// privilege.
func isPermission(err error) bool {
	return errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES)
}

// TracedError says which session holds a process.
type TracedError struct {
	PID   uint32 // the process
	Owner int    // the vramprof session tracing it; 0 if unknown
}

func (e *TracedError) Error() string {
	if e.Owner == 0 {
		return fmt.Sprintf("pid %d is %s", e.PID, ErrTraced)
	}
	return fmt.Sprintf("pid %d is %s (vramprof pid %d)", e.PID, ErrTraced, e.Owner)
}

// Unwrap makes errors.Is(err, ErrTraced) hold.
func (e *TracedError) Unwrap() error { return ErrTraced }

// StrippedRuntimeError says which file holds the stripped runtime.
type StrippedRuntimeError struct {
	PID  uint32 // the process
	Path string // the file, as the process maps it
}

func (e *StrippedRuntimeError) Error() string {
	return fmt.Sprintf("pid %d: %s has a %s: its cudaMalloc calls cannot be probed, and no driver (libcuda.so.1) is loaded yet to probe instead",
		e.PID, e.Path, ErrStrippedRuntime)
}

// Unwrap makes errors.Is(err, ErrStrippedRuntime) hold.
func (e *StrippedRuntimeError) Unwrap() error { return ErrStrippedRuntime }
