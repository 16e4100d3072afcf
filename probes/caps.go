//go:build linux

package probes

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Capabilities vramprof needs (linux/capability.h numbers).
const (
	capSysPtrace = 19 // read other users' /proc/PID/maps and files; ptrace for run
	capSysAdmin  = 21 // stands in for CAP_BPF and CAP_PERFMON on any kernel
	capPerfmon   = 38 // perf_event_open for uprobes
	capBPF       = 39 // load BPF programs and maps
)

// missingCaps names the capabilities this process lacks to trace, or nil
// when it has them. It reads the effective set from /proc/self/status, so
// the error can say which privilege is missing instead of "permission
// denied".
func missingCaps() []string {
	if hasCap(capSysAdmin) { // stands in for both; true when unknown
		return nil
	}
	var missing []string
	if !hasCap(capBPF) {
		missing = append(missing, "CAP_BPF")
	}
	if !hasCap(capPerfmon) {
		missing = append(missing, "CAP_PERFMON")
	}
	return missing
}

// CheckPrivileges returns an error matching ErrNotPermitted that names the
// missing capabilities, or nil when this process may trace. NewSession
// checks too; callers use it to fail before doing anything else.
func CheckPrivileges() error {
	if m := missingCaps(); len(m) > 0 {
		return fmt.Errorf("%w: missing %s (uid %d)", ErrNotPermitted, strings.Join(m, " and "), os.Geteuid())
	}
	return nil
}

// AccessError is the error of a process whose memory map this process may
// not read, and why, as far as it can tell. It matches ErrNotPermitted when
// a privilege is missing (CAP_SYS_PTRACE) and ErrNoAccess otherwise.
type AccessError struct {
	PID int
	Err error // the open of /proc/PID/maps
	// Reason says why, in words; Missing tells ErrNotPermitted from
	// ErrNoAccess.
	Reason  string
	Missing bool
}

func (e *AccessError) Error() string {
	return fmt.Sprintf("cannot read pid %d's memory map (%v): %s", e.PID, e.Err, e.Reason)
}

func (e *AccessError) Unwrap() []error {
	if e.Missing {
		return []error{ErrNotPermitted, e.Err}
	}
	return []error{ErrNoAccess, e.Err}
}

// checkAccess returns an *AccessError when the kernel refuses this process
// /proc/PID/maps, which attaching reads first; any other failure is left
// to the reads that follow. The kernel's test is ptrace's read mode
// (ptrace_may_access): a process of another user needs CAP_SYS_PTRACE; with
// it, only a user namespace (CAP_SYS_PTRACE counts in this namespace only)
// or a security module (Landlock: a sandboxed process reaches only its own
// sandbox's; AppArmor, SELinux, a BPF LSM) still refuses. Yama's
// ptrace_scope governs ptrace attach alone, not this read.
func checkAccess(pid int) error {
	path := fmt.Sprintf("/proc/%d/maps", pid)
	f, err := os.Open(path)
	if err == nil {
		_ = f.Close()
		return nil
	}
	if !isPermission(err) {
		return nil
	}
	e := &AccessError{PID: pid, Err: err}
	var pe *os.PathError
	if errors.As(err, &pe) {
		e.Err = fmt.Errorf("%s: %w", pe.Path, pe.Err) // without "open"
	}
	e.Reason, e.Missing = accessReason(pid, hasCap(capSysPtrace), inUserNamespace())
	return e
}

// accessReason says why the kernel refuses pid's memory map to a process
// with or without CAP_SYS_PTRACE, in the initial user namespace or not;
// missing is true when a privilege is missing.
func accessReason(pid int, ptrace, userNS bool) (reason string, missing bool) {
	switch {
	case !ptrace:
		return fmt.Sprintf("vramprof (uid %d) lacks CAP_SYS_PTRACE, which a process of another user (pid %d: uid %s) or with more capabilities needs",
			os.Geteuid(), pid, procUID(pid)), true
	case userNS:
		return "vramprof runs in a user namespace (a container), whose CAP_SYS_PTRACE does not reach a process outside it", false
	}
	return fmt.Sprintf("vramprof has CAP_SYS_PTRACE, so a security module refuses: vramprof runs in a sandbox (Landlock, AppArmor, SELinux, a BPF LSM) that pid %d is outside of", pid), false
}

// hasCap reports whether this process has capability c in its effective
// set; true when it cannot tell.
func hasCap(c uint) bool {
	root, err := procFS()
	if err != nil {
		return true
	}
	self, err := root.Self()
	if err != nil {
		return true
	}
	status, err := self.NewStatus()
	if err != nil {
		return true
	}
	return status.CapEff&(1<<c) != 0
}

// procUID is the real user ID of pid, from /proc/PID/status (readable by
// anyone), or "unknown".
func procUID(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				return f[0]
			}
		}
	}
	return "unknown"
}

// inUserNamespace reports whether this process runs in a user namespace
// other than the initial one: its uid_map is not the identity over all
// 2^32-1 IDs.
func inUserNamespace() bool {
	data, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	f := strings.Fields(string(data))
	return !(len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295")
}
