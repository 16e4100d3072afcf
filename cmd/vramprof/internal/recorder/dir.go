package recorder

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Names of the files an output directory receives (DESIGN.md, CLI contract).
const (
	// TraceFile is the trace, read by every replay.
	TraceFile    = "trace.vpt"
	ProfileFile  = "profile.pb.gz"
	JSONFile     = "report.json"
	MarkdownFile = "report.md"
	HTMLFile     = "report.html"
	// MomentsDir receives the moment reports of run and attach (moment.go),
	// one directory each.
	MomentsDir = "moments"
)

// WriteFileAtomic writes path through a temporary file in the same
// directory and renames it into place once complete.
func WriteFileAtomic(path string, write func(io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriter(tmp)
	if err := write(bw); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// RecordingFiles are the files a recording (run, attach) writes into its
// directory; ReportFiles those Report writes with -o: the same but the
// trace, and the snapshot and the Perfetto trace.
var (
	RecordingFiles = []string{TraceFile, ProfileFile, JSONFile, MarkdownFile, HTMLFile, MomentsDir}
	ReportFiles    = []string{ProfileFile, JSONFile, MarkdownFile, HTMLFile, SnapshotFile, PerfettoFile}
)

// Dir is an output directory, opened once: every file is created
// through it (an os.Root, openat(2) underneath), so swapping the
// directory's path for a link afterwards, as the owner of a directory in a
// shared place could, redirects nothing. Close it when done.
type Dir struct {
	path string
	root *os.Root
}

// OpenDir creates dir (and parents) for the outputs named in files (and
// oom-<n>.pb.gz; MomentsDir among files is a directory), opens it, and checks that it is writable now, before
// anything is traced, so an unwritable directory is an error at once rather
// than after an hour of training. created says whether it was made here.
//
// dir must not be a symbolic link, and must not hold any of those files
// already: an earlier recording is refused unless force, which removes
// them first (a symbolic link among them is removed, never followed).
// Files are then created afresh: the trace with O_EXCL (createTrace), the
// others through a new temporary file renamed into place (WriteFile), which
// replaces a link rather than writing to its target.
func OpenDir(dir string, force bool, files []string) (out *Dir, created bool, err error) {
	clean := filepath.Clean(dir) // "link/" would follow the link
	st, statErr := os.Lstat(clean)
	switch {
	case statErr == nil && st.Mode()&os.ModeSymlink != 0:
		return nil, false, linkError(dir, clean)
	case statErr == nil && !st.IsDir():
		return nil, false, fmt.Errorf("%w: %s exists and is not a directory", ErrOutputDir, dir)
	case errors.Is(statErr, os.ErrNotExist):
		created = true
	}
	if err := os.MkdirAll(clean, 0o755); err != nil {
		return nil, false, fmt.Errorf("%w: %s: %w", ErrOutputDir, dir, err)
	}
	fail := func(err error) (*Dir, bool, error) {
		if out != nil {
			_ = out.root.Close()
		}
		if created {
			_ = os.Remove(clean) // only if empty
		}
		return nil, false, err
	}
	root, err := os.OpenRoot(clean)
	if err != nil {
		return fail(fmt.Errorf("%w: %s: %w", ErrOutputDir, dir, err))
	}
	out = &Dir{path: dir, root: root}
	// The directory opened is the one checked: not a link put in its
	// place meanwhile.
	opened, err1 := root.Stat(".")
	now, err2 := os.Lstat(clean)
	switch {
	case err2 == nil && now.Mode()&os.ModeSymlink != 0:
		return fail(linkError(dir, clean))
	case err1 != nil || err2 != nil || !os.SameFile(opened, now):
		return fail(fmt.Errorf("%w: %s changed while it was opened", ErrOutputDir, dir))
	}
	if !created {
		old := existingOutputs(root, files)
		if len(old) > 0 && !force {
			return fail(fmt.Errorf("%w: %s already holds %s", ErrOutputExists, dir, strings.Join(old, ", ")))
		}
		for _, name := range old {
			remove := root.Remove
			if name == MomentsDir {
				remove = root.RemoveAll // an earlier recording's moment reports
			}
			if err := remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fail(fmt.Errorf("%w: --force: remove %s: %w", ErrOutputDir, filepath.Join(dir, name), err))
			}
		}
	}
	if err := out.WriteFile(".vramprof-write-test", func(io.Writer) error { return nil }); err != nil {
		return fail(fmt.Errorf("%w: %s: %w", ErrOutputDir, dir, err))
	}
	_ = root.Remove(".vramprof-write-test")
	return out, created, nil
}

func linkError(dir, clean string) error {
	target, _ := os.Readlink(clean)
	return fmt.Errorf("%w: -o %s points to %s", ErrOutputLink, dir, target)
}

// existingOutputs lists which of files, and of the oom-<n>.pb.gz profiles,
// root holds (as any kind of file, a link included).
func existingOutputs(root *os.Root, files []string) []string {
	var out []string
	for _, name := range files {
		if _, err := root.Lstat(name); err == nil {
			out = append(out, name)
		}
	}
	if !slices.Contains(files, ProfileFile) {
		return out
	}
	f, err := root.Open(".")
	if err != nil {
		return out
	}
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	slices.Sort(names)
	for _, name := range names {
		if ok, _ := filepath.Match("oom-*.pb.gz", name); ok {
			out = append(out, name)
		}
		// A flight recorder's trace segments (--max-trace).
		if ok, _ := filepath.Match(SegmentPattern, name); ok && slices.Contains(files, TraceFile) {
			out = append(out, name)
		}
	}
	return out
}

// Subdir creates the new directory parent/name in d (parent made if
// missing) and opens it. Neither may be a symbolic link, and name must not
// exist: a moment directory is written once, afresh. Close it when done.
func (d *Dir) Subdir(parent, name string) (*Dir, error) {
	if err := d.root.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("%w: %s: %w", ErrOutputDir, d.file(parent), err)
	}
	// Lstat, then open: os.Root keeps a link from leading outside d, and
	// the check refuses one inside it.
	if st, err := d.root.Lstat(parent); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrOutputDir, d.file(parent))
	}
	rel := filepath.Join(parent, name)
	if err := d.root.Mkdir(rel, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrOutputDir, d.file(rel), err)
	}
	sub, err := d.root.OpenRoot(rel)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrOutputDir, d.file(rel), err)
	}
	return &Dir{path: d.file(rel), root: sub}, nil
}

// Path is the directory's path, for messages.
func (d *Dir) Path() string { return d.path }

// Close releases the directory.
func (d *Dir) Close() error { return d.root.Close() }

// file is the path of name in d, for messages.
func (d *Dir) file(name string) string { return filepath.Join(d.path, name) }

// createTrace creates d's trace file, failing if one exists (OpenDir
// removed the old one) or if anything was put there since, a link
// included: it is written for the whole run, so it is never opened through
// a link.
func (d *Dir) createTrace() (*os.File, error) {
	// Read and write: Finish reads it back through this descriptor.
	f, err := d.root.OpenFile(TraceFile, os.O_CREATE|os.O_EXCL|os.O_RDWR|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrOutputDir, d.path, err)
	}
	return f, nil
}

// WriteFile writes name in d through a new temporary file, renamed into
// place once complete: a failure never leaves a partial file that looks
// whole, and a link at name is replaced, its target untouched.
func (d *Dir) WriteFile(name string, write func(io.Writer) error) (err error) {
	var tmp *os.File
	var tmpName string
	for range 100 {
		tmpName = fmt.Sprintf(".%s.%d", name, rand.Uint32())
		tmp, err = d.root.OpenFile(tmpName, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o644)
		if !errors.Is(err, os.ErrExist) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", d.file(name), err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = d.root.Remove(tmpName)
		}
	}()
	bw := bufio.NewWriter(tmp)
	if err := write(bw); err != nil {
		return fmt.Errorf("write %s: %w", d.file(name), err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", d.file(name), err)
	}
	if err := tmp.Chmod(0o644); err != nil { // whatever the umask
		return fmt.Errorf("write %s: %w", d.file(name), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", d.file(name), err)
	}
	if err := d.root.Rename(tmpName, name); err != nil {
		return fmt.Errorf("write %s: %w", d.file(name), err)
	}
	return nil
}
