//go:build linux

package probes

import (
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
	root, err := procFS()
	if err != nil {
		return nil // cannot tell: let the kernel decide
	}
	self, err := root.Self()
	if err != nil {
		return nil
	}
	status, err := self.NewStatus()
	if err != nil {
		return nil
	}
	eff := status.CapEff
	has := func(c uint) bool { return eff&(1<<c) != 0 }
	if has(capSysAdmin) {
		return nil
	}
	var missing []string
	if !has(capBPF) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(capPerfmon) {
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
