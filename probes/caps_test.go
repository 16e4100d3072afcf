//go:build linux

package probes

import (
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
