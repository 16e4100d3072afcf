package recorder

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOutputDirStaysPut: the output directory is opened once; swapping its
// path for a link afterwards (the owner of a directory in /tmp could) moves
// no write: the files land in the directory that was checked, never in the
// link's target.
func TestOutputDirStaysPut(t *testing.T) {
	tmp := t.TempDir()
	dir, moved, victim := filepath.Join(tmp, "out"), filepath.Join(tmp, "moved"), filepath.Join(tmp, "victim")
	require.NoError(t, os.Mkdir(victim, 0o755))
	out, created, err := OpenDir(dir, false, RecordingFiles)
	require.NoError(t, err)
	defer out.Close()
	assert.True(t, created)

	require.NoError(t, os.Rename(dir, moved))
	require.NoError(t, os.Symlink("victim", dir))
	f, err := out.createTrace()
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, out.WriteFile(JSONFile, func(w io.Writer) error { _, err := io.WriteString(w, "{}"); return err }))

	entries, err := os.ReadDir(victim)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing written through the link")
	assert.FileExists(t, filepath.Join(moved, TraceFile))
	data, err := os.ReadFile(filepath.Join(moved, JSONFile))
	require.NoError(t, err)
	assert.Equal(t, "{}", string(data))
	left, err := os.ReadDir(moved)
	require.NoError(t, err)
	assert.Len(t, left, 2, "no temporary file left: %v", left)
}

// TestEnsureDirRefuses: a link as -o, or a directory holding an earlier
// recording's files (a link among them counts), is refused; --force
// removes those files (a link itself, never its target) and goes on.
func TestEnsureDirRefuses(t *testing.T) {
	tmp := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "victim"), []byte("precious"), 0o644))
	require.NoError(t, os.Symlink(tmp, filepath.Join(tmp, "link")))
	_, _, err := OpenDir(filepath.Join(tmp, "link"), true, RecordingFiles)
	require.ErrorIs(t, err, ErrOutputLink)
	_, _, err = OpenDir(filepath.Join(tmp, "link")+"/", true, RecordingFiles)
	require.ErrorIs(t, err, ErrOutputLink, "a trailing slash does not follow the link")

	dir := filepath.Join(tmp, "rec")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.Symlink("../victim", filepath.Join(dir, JSONFile)))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "oom-1.pb.gz"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644))
	_, _, err = OpenDir(dir, false, RecordingFiles)
	require.ErrorIs(t, err, ErrOutputExists)
	assert.Contains(t, err.Error(), "already holds report.json, oom-1.pb.gz")

	out, created, err := OpenDir(dir, true, RecordingFiles)
	require.NoError(t, err)
	defer out.Close()
	assert.False(t, created)
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, left, 1)
	assert.Equal(t, "notes.txt", left[0].Name(), "the recording's files removed, others kept")
	data, err := os.ReadFile(filepath.Join(tmp, "victim"))
	require.NoError(t, err)
	assert.Equal(t, "precious", string(data))

	// report -o writes no trace: one there is neither refused nor removed.
	require.NoError(t, os.WriteFile(filepath.Join(dir, TraceFile), []byte("trace"), 0o644))
	rep, _, err := OpenDir(dir, false, ReportFiles)
	require.NoError(t, err)
	require.NoError(t, rep.Close())
	assert.FileExists(t, filepath.Join(dir, TraceFile))
}

// TestMomentsDir: an earlier recording's moments/ is refused without
// --force and removed with it (a link there removed, never followed); a
// moment directory is created afresh, never through a link.
func TestMomentsDir(t *testing.T) {
	tmp := t.TempDir()
	victim := filepath.Join(tmp, "victim")
	require.NoError(t, os.MkdirAll(filepath.Join(victim, "keep"), 0o755))
	dir := filepath.Join(tmp, "rec")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, MomentsDir, "oom-1-20260101-000000"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, MomentsDir, "oom-1-20260101-000000", JSONFile), nil, 0o644))
	_, _, err := OpenDir(dir, false, RecordingFiles)
	require.ErrorIs(t, err, ErrOutputExists)
	assert.Contains(t, err.Error(), "already holds "+MomentsDir)

	out, _, err := OpenDir(dir, true, RecordingFiles)
	require.NoError(t, err)
	defer out.Close()
	_, err = os.Lstat(filepath.Join(dir, MomentsDir))
	require.ErrorIs(t, err, os.ErrNotExist, "--force removes the earlier moments")

	sub, err := out.Subdir(MomentsDir, "usr1-1-20260101-000000")
	require.NoError(t, err)
	require.NoError(t, sub.WriteFile(JSONFile, func(w io.Writer) error { _, err := io.WriteString(w, "{}"); return err }))
	require.NoError(t, sub.Close())
	data, err := os.ReadFile(filepath.Join(dir, MomentsDir, "usr1-1-20260101-000000", JSONFile))
	require.NoError(t, err)
	assert.Equal(t, "{}", string(data))
	assert.Equal(t, filepath.Join(dir, MomentsDir, "usr1-1-20260101-000000"), sub.path)
	_, err = out.Subdir(MomentsDir, "usr1-1-20260101-000000")
	require.ErrorIs(t, err, os.ErrExist, "a moment directory is written once")

	// A link planted as moments/ is neither followed nor written through.
	require.NoError(t, os.RemoveAll(filepath.Join(dir, MomentsDir)))
	require.NoError(t, os.Symlink(victim, filepath.Join(dir, MomentsDir)))
	_, err = out.Subdir(MomentsDir, "oom-2-20260101-000000")
	require.ErrorIs(t, err, ErrOutputDir)
	_, err = os.Stat(filepath.Join(victim, "oom-2-20260101-000000"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing written through the link")

	out2, _, err := OpenDir(dir, true, RecordingFiles)
	require.NoError(t, err)
	defer out2.Close()
	_, err = os.Stat(filepath.Join(victim, "keep"))
	require.NoError(t, err, "--force removed the link, not its target's contents")
}
