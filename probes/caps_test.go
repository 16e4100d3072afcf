//go:build linux

package probes

import (
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestMissingCaps checks what /proc/self/status says against capget(2),
// an independent view of the same effective set.
func TestMissingCaps(t *testing.T) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	require.NoError(t, unix.Capget(&hdr, &data[0]))
	eff := uint64(data[0].Effective) | uint64(data[1].Effective)<<32
	has := func(c uint) bool { return eff&(1<<c) != 0 }
	var want []string
	if !has(capSysAdmin) {
		if !has(capBPF) {
			want = append(want, "CAP_BPF")
		}
		if !has(capPerfmon) {
			want = append(want, "CAP_PERFMON")
		}
	}
	assert.Equal(t, want, missingCaps())
}

// TestAccessError: a memory map the kernel refuses says why: a missing
// CAP_SYS_PTRACE matches ErrNotPermitted (the CLI says to run as root or
// grant it); a user namespace or a sandbox matches ErrNoAccess.
func TestAccessError(t *testing.T) {
	for _, tc := range []struct {
		name           string
		ptrace, userNS bool
		sentinel       error
		words          []string
	}{
		{"no CAP_SYS_PTRACE", false, false, ErrNotPermitted, []string{"lacks CAP_SYS_PTRACE", "pid 1: uid"}},
		{"user namespace", true, true, ErrNoAccess, []string{"user namespace"}},
		{"sandbox", true, false, ErrNoAccess, []string{"has CAP_SYS_PTRACE", "security module", "pid 1 is outside"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &AccessError{PID: 1, Err: os.ErrPermission}
			e.Reason, e.Missing = accessReason(1, tc.ptrace, tc.userNS)
			assert.ErrorIs(t, e, tc.sentinel)
			assert.ErrorIs(t, e, os.ErrPermission)
			other := ErrNoAccess
			if errors.Is(tc.sentinel, ErrNoAccess) {
				other = ErrNotPermitted
			}
			assert.False(t, errors.Is(e, other))
			assert.Contains(t, e.Error(), "cannot read pid 1's memory map")
			for _, w := range tc.words {
				assert.Contains(t, e.Error(), w)
			}
		})
	}
}
