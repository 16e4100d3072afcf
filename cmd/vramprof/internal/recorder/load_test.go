package recorder

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report/compare"
)

// TestLoadFigures: a directory, its trace and its report.json give the
// workload's figures; a directory without its trace falls back on its
// report.json; a trace cut short is marked; anything else is refused.
func TestLoadFigures(t *testing.T) {
	const n, size = 40, 1 << 20
	dir, _ := mustRecord(t, Options{}, workload(n, size))
	noTrace := filepath.Join(t.TempDir(), "json-only")
	require.NoError(t, os.Mkdir(noTrace, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(noTrace, JSONFile), mustReadFile(t, filepath.Join(dir, JSONFile)), 0o644))

	for _, tc := range []struct{ name, path string }{
		{"directory", dir},
		{"trace", filepath.Join(dir, TraceFile)},
		{"report.json", filepath.Join(dir, JSONFile)},
		{"directory without its trace", noTrace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := LoadFigures(tc.path)
			require.NoError(t, err)
			assert.Equal(t, tc.path, s.Source)
			assert.Equal(t, uint64(n), s.Allocations)
			assert.Equal(t, uint64(n/4*size), s.Peak)
			assert.Equal(t, uint64(n/4*size), s.LiveEnd)
			assert.False(t, s.Truncated)
		})
	}

	t.Run("truncated", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), TraceFile)
		f, err := os.Create(path)
		require.NoError(t, err)
		w, err := event.NewWriter(f, &event.Header{Mode: "run", PID: 7, Start: 1})
		require.NoError(t, err)
		for _, rec := range workload(8, 4096) {
			require.NoError(t, w.Write(rec))
		}
		require.NoError(t, w.Close())
		require.NoError(t, f.Close())
		s, err := LoadFigures(path)
		require.NoError(t, err)
		assert.True(t, s.Truncated)
		assert.Equal(t, uint64(2*4096), s.LiveEnd)
	})

	for _, tc := range []struct{ name, path string }{
		{"missing", filepath.Join(t.TempDir(), "missing")},
		{"empty directory", t.TempDir()},
		{"not a trace", mustWrite(t, "junk.vpt", "junk")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadFigures(tc.path)
			require.ErrorIs(t, err, compare.ErrRecording)
		})
	}
	_, err := LoadFigures(mustWrite(t, "other.json", `{"schema": "other/v1"}`))
	require.ErrorIs(t, err, compare.ErrSchema, "a JSON file of another kind")
}

func mustReadFile(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	require.NoError(tb, err)
	return b
}

// mustWrite writes text to a new file name and returns its path.
func mustWrite(tb testing.TB, name, text string) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), name)
	require.NoError(tb, os.WriteFile(path, []byte(text), 0o644))
	return path
}
