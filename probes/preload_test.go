//go:build linux

package probes

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResolveIn: a preloaded library is named as /proc/PID/maps will name
// it once mapped: every link resolved, absolute ones inside the process's
// root (a container's), not vramprof's.
func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "usr/lib/x86_64-linux-gnu"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "usr/lib/x86_64-linux-gnu/libcuda.so.1"), nil, 0o644))
	require.NoError(t, os.Symlink("libcuda.so.1", filepath.Join(root, "usr/lib/x86_64-linux-gnu/libcuda.so")))
	require.NoError(t, os.Symlink("usr/lib", filepath.Join(root, "lib")))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "opt"), 0o755))
	// Absolute: on the host, /usr/lib/x86_64-linux-gnu has no libcuda.so.1.
	require.NoError(t, os.Symlink("/usr/lib/x86_64-linux-gnu", filepath.Join(root, "opt/cuda")))
	require.NoError(t, os.Symlink("loop", filepath.Join(root, "loop")))

	for _, tc := range []struct{ in, want string }{
		{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
		{"/usr/lib/x86_64-linux-gnu/libcuda.so", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
		{"/lib/x86_64-linux-gnu/libcuda.so", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
		{"/opt/cuda/libcuda.so", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
		{"/opt/../lib/./x86_64-linux-gnu//libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
		{"/loop/libcuda.so", "/loop/libcuda.so"},       // ELOOP: as given
		{"/missing/libcuda.so", "/missing/libcuda.so"}, // not there: as given
	} {
		assert.Equal(t, tc.want, resolveIn(root, tc.in), tc.in)
	}
}
