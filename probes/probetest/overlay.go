//go:build linux

package probetest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// Overlay mounts an overlayfs, as a container's root is, over a fresh
// lower directory and returns both: what is written into lower shows in
// merged, where stat(2) gives the overlay's device while the kernel's
// faults and probes see the file underneath. It is unmounted when the test
// ends. It needs root.
func Overlay(tb testing.TB) (lower, merged string) {
	tb.Helper()
	dir := tb.TempDir()
	lower, upper, work, merged := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "merged")
	for _, d := range []string{lower, upper, work, merged} {
		require.NoError(tb, os.Mkdir(d, 0o755))
	}
	require.NoError(tb, syscall.Mount("overlay", merged, "overlay", 0,
		"lowerdir="+lower+",upperdir="+upper+",workdir="+work), "mount overlayfs")
	tb.Cleanup(func() { _ = syscall.Unmount(merged, syscall.MNT_DETACH) })
	return lower, merged
}
