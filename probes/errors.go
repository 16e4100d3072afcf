package probes

import (
	"errors"
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
	// ErrNoProcess: the PID does not exist (or exited).
	ErrNoProcess = errors.New("no such process")
	// ErrNoCUDA: the process maps no library that defines the CUDA
	// allocation API (yet: see AttachOptions.Wait).
	ErrNoCUDA = errors.New("no CUDA runtime in process")
	// ErrCommandNotFound: the command to run does not exist or is not
	// executable.
	ErrCommandNotFound = errors.New("command not found")
	// ErrNoBPF: the kernel lacks a BPF feature vramprof needs.
	ErrNoBPF = errors.New("kernel lacks BPF support")
)

// isPermission reports whether err is the kernel saying no for lack of
// privilege.
func isPermission(err error) bool {
	return errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES)
}
