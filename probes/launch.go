//go:build linux

package probes

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"github.com/vramprof/vramprof/probes/sigstate"
)

// LaunchOptions describes a command to run under the session.
type LaunchOptions struct {
	Argv           []string
	Env            []string // nil: this process's environment
	Dir            string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// LookCommand finds the command name as a shell would (exec.LookPath): the
// error wraps ErrCommandNotFound when there is no such file (a shell's exit
// 127), ErrCommandNotExecutable when there is one that cannot be run (126).
func LookCommand(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", commandError(name, err)
	}
	return path, nil
}

// commandError is the error of a command that could not be started: not
// found (no such file, or not in PATH) or found but not executable.
func commandError(name string, err error) error {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %s", ErrCommandNotFound, name)
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		err = ee.Err // ee names the command again
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%w: %s: %w", ErrCommandNotExecutable, name, err)
}

// Launch starts a command with tracing in place before its first
// instruction: the child stops right after execve (ptrace), when only the
// executable and the dynamic loader are mapped; the loader rendezvous and
// any CUDA runtime linked into the executable are probed; then the child is
// let go. Every library it loads later, at start-up or by dlopen, is probed
// when the loader announces it (see loaderProbe), before its first call.
//
// The child runs in a session of its own (setsid), so it has no controlling
// terminal: the caller forwards the signals a terminal would send (Ctrl-C,
// hang-up) to it, except those this process started with ignored
// (sigstate.Wanted).
//
// The child starts with the signal dispositions and mask this process
// started with (sigstate): what its parent ignored stays ignored (a shell's
// trap "" PIPE, nohup's SIGHUP, a background job's SIGINT and SIGQUIT), as it
// would without vramprof. This process ignores them again too (sigstate.Keep).
//
// The returned command is running; the caller must Wait for it.
func (s *Session) Launch(o LaunchOptions) (*exec.Cmd, error) {
	if len(o.Argv) == 0 {
		return nil, errors.New("launch: empty command")
	}
	path, err := LookCommand(o.Argv[0])
	if err != nil {
		return nil, err
	}
	alone := !s.opts.All && len(s.procs.procs) == 0 && len(s.loader.att.trees) == 0
	if !alone {
		// Loader probes limited to an earlier command's tree would not
		// reach this one.
		if err := s.loader.att.widen(); err != nil {
			return nil, fmt.Errorf("launch %s: %w", o.Argv[0], err)
		}
	}
	cmd := exec.Command(path, o.Argv[1:]...)
	cmd.Args[0] = o.Argv[0]
	cmd.Env, cmd.Dir = o.Env, o.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr
	// A session of its own: if vramprof dies while the child is stopped at
	// a dlopen, a child in vramprof's process group would be in an orphaned
	// group with a stopped member, which the kernel sends SIGHUP (fatal by
	// default) before the guardian can resume it. The kernel sends that
	// only within one session. The terminal's signals then reach vramprof
	// alone: the caller passes them on.
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true, Setsid: true}

	// ptrace requests must come from the thread that became the tracer.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	inherited, err := sigstate.ForExec()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Argv[0], err)
	}
	err = cmd.Start()
	inherited()
	if err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) ||
			errors.Is(err, syscall.ENOEXEC) || errors.Is(err, syscall.EISDIR) {
			return nil, commandError(o.Argv[0], err)
		}
		return nil, fmt.Errorf("start %s: %w", o.Argv[0], err)
	}
	pid := cmd.Process.Pid
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("wait for %s to start: %w", o.Argv[0], err)
	}
	if !ws.Stopped() {
		_ = cmd.Wait()
		return nil, fmt.Errorf("start %s: it ended before its first instruction (status %#x)", o.Argv[0], ws)
	}
	fail := func(err error) (*exec.Cmd, error) {
		_ = cmd.Process.Kill()
		_ = syscall.PtraceDetach(pid)
		_ = cmd.Wait()
		return nil, err
	}
	// The command has not run an instruction yet: a loader probe placed
	// now can be limited to its tree (treeprobe.go), when it is all this
	// session traces (its children are targets from their fork).
	if alone {
		s.loader.att.tree = pid
		defer func() { s.loader.att.tree = 0 }()
	}
	info := procInfo(uint32(pid))
	info.Command = o.Argv // as launched: the shell's view, not /proc's
	info.FromStart = true
	p, err := s.track(uint32(pid), info, nil)
	if err != nil {
		return fail(err)
	}
	if err := s.scan(p, false); err != nil {
		return fail(err)
	}
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	s.preload(p, env)
	if err := syscall.PtraceDetach(pid); err != nil {
		return fail(fmt.Errorf("resume %s: %w", o.Argv[0], err))
	}
	return cmd, nil
}

// Attach traces a running process. Without wait, a process that maps no
// CUDA runtime is an error (ErrNoCUDA); with wait, the session watches its
// loader and probes the runtime when it arrives.
func (s *Session) Attach(pid int, wait bool) error {
	if _, err := procStartTime(pid); err != nil {
		return err
	}
	if err := checkAccess(pid); err != nil {
		return err
	}
	// Only this process: probes on a shared library fire in every process
	// that maps it, and the perf-level filter keeps the others from
	// trapping at all.
	if len(s.loader.att.links) == 0 && len(s.loader.att.trees) == 0 {
		s.loader.att.pid = pid
	}
	// A loader probe limited to a launched command's tree would not
	// reach this process.
	if err := s.loader.att.widen(); err != nil {
		return err
	}
	p, err := s.track(uint32(pid), nil, nil)
	if err != nil {
		return err
	}
	if err := s.scan(p, false); err != nil {
		return err
	}
	s.preload(p, procEnviron(pid))
	if !p.cuda && !wait {
		if len(p.stripped) > 0 {
			// --wait would wait for a runtime that is already there,
			// where no probe can reach it.
			return &StrippedRuntimeError{PID: uint32(pid), Path: p.stripped[0]}
		}
		return fmt.Errorf("%w %d", ErrNoCUDA, pid)
	}
	return nil
}
