package main

import (
	"errors"
	"strings"

	"github.com/vramprof/vramprof/cmd/vramprof/internal/recorder"
	"github.com/vramprof/vramprof/probes"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report/compare"
)

var (
	// errUsage: the command line is wrong.
	errUsage = errors.New("usage")
)

func usageError(err error) error {
	if errors.Is(err, errHelp) {
		return err
	}
	return &wrapped{err: err, kind: errUsage}
}

type wrapped struct {
	err  error
	kind error
}

func (w *wrapped) Error() string   { return w.err.Error() }
func (w *wrapped) Unwrap() []error { return []error{w.err, w.kind} }

// hints say what to do about each kind of failure. The first match wins.
var hints = []struct {
	err  error
	hint string
}{
	{probes.ErrNotPermitted, "run as root (sudo), or grant CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep vramprof)"},
	{probes.ErrNoBPF, "this kernel lacks BPF features vramprof needs (uprobes, ring buffer, attach cookies): use Linux 5.15 or newer"},
	{probes.ErrNoAccess, "run vramprof where the process runs: in its container or sandbox, or on the host for a host process"},
	{probes.ErrNoProcess, "check the PID (ps -ef); it may have exited"},
	{probes.ErrTraced, "one vramprof session per process: stop that session first, or read its outputs"},
	{probes.ErrLock, "make /run/vramprof a writable directory holding only vramprof's lock files (remove any link or other file there): vramprof locks each traced process in it so two sessions never trace one"},
	{probes.ErrStrippedRuntime, "pass --wait to trace the driver's calls from the process's first CUDA call on (if it has a driver to load), or rebuild it unstripped or with nvcc --cudart shared to trace the runtime's"},
	{probes.ErrNoCUDA, "the process has not loaded libcudart or libcuda; pass --wait to wait for it, or check the PID"},
	{probes.ErrCommandNotFound, "check the command name and PATH"},
	{probes.ErrCommandNotExecutable, "check the file's execute permission (chmod +x) and that it is a program or a script with a #! line"},
	{recorder.ErrOutputLink, "give -o the directory's real path: vramprof does not write through symbolic links"},
	{recorder.ErrOutputExists, "choose a new directory with -o, remove the old files, or pass --force to overwrite them"},
	{recorder.ErrOutputDir, "choose a writable directory with -o"},
	{event.ErrNotTrace, "INPUT must be a vramprof output directory or its trace.vpt"},
	{event.ErrVersion, "this trace was written by a newer vramprof: upgrade to read it"},
	{event.ErrCorrupt, "the trace is damaged at that point; re-record it"},
	{event.ErrTruncated, "the trace was cut short before its first record; re-record it"},
	{compare.ErrIncomplete, "check the recording of a whole run: the output directory or report.json of a run that ended, not a moment report or a trace cut short"},
	{compare.ErrLostEvents, "re-run the check (a less loaded machine loses fewer events), or accept that share with --allow-lost PCT"},
	{compare.ErrCommandFailed, "the command's own failure, not a memory regression: see its output above"},
	{compare.ErrSchema, "give a vramprof report.json, or a baseline written by 'vramprof check --write-baseline'"},
	{compare.ErrRecording, "give a vramprof output directory, its trace.vpt, or its report.json"},
	{recorder.ErrInput, "INPUT must be a vramprof output directory (holding trace.vpt), a .vpt trace or a PyTorch memory snapshot .pickle"},
	{recorder.ErrTruncated, "the outputs cover the whole records before the cut and say the run was cut short"},
}

// exitCodeOf is the exit code of a command that failed with err: a shell's
// 127 for a command `run` cannot find and 126 for one it cannot execute, as
// `sh -c CMD` would exit, else 2 (exitToolError). check keeps 2 for these:
// its codes say pass, fail, or could not judge.
func exitCodeOf(cmd string, err error) int {
	switch {
	case cmd != "run":
	case errors.Is(err, probes.ErrCommandNotFound):
		return exitCommandNotFound
	case errors.Is(err, probes.ErrCommandNotExecutable):
		return exitCommandNotExecutable
	}
	return exitToolError
}

// explain turns err into the one line the user sees: what went wrong, then
// what to do.
func explain(err error) string {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	for _, h := range hints {
		if errors.Is(err, h.err) {
			return msg + " (" + h.hint + ")"
		}
	}
	return msg
}
