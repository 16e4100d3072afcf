package main

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

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/profile"
	"github.com/vramprof/vramprof/report"
)

// Names of the files an output directory receives (DESIGN.md, CLI contract).
const (
	traceFile   = "trace.vpt"
	profileFile = "profile.pb.gz"
	jsonFile    = "report.json"
	mdFile      = "report.md"
	htmlFile    = "report.html"
	// momentsDir receives the moment reports of run and attach (moment.go),
	// one directory each.
	momentsDir = "moments"
)

// errTruncatedTrace: the trace ends inside a record, or without its End
// record (the recorder was killed). What came before is valid and is analysed; the outputs say the
// run was cut short.
var errTruncatedTrace = errors.New("trace cut short")

// analyze replays a trace (or imports a PyTorch snapshot pickle) through
// the analysis. The live commands use it
// too, on the trace they just recorded: that is what makes `vramprof report`
// byte-identical to the live run. A trace cut short inside a record gives
// both a result and an error matching errTruncatedTrace.
//
// opts are the analysis options the user can set (--capacity); the same
// options give the same outputs.
func analyze(tracePath string, opts analysis.Options) (*analysis.Result, error) {
	if isSnapshot(tracePath) {
		return analyzeSnapshot(tracePath, opts) // a PyTorch memory snapshot
	}
	if segs := segmentsOf(tracePath); len(segs) > 0 {
		return analyzeSegments(segs, opts) // a flight recorder's (--max-trace)
	}
	f, err := os.Open(tracePath)
	if err != nil {
		return nil, fmt.Errorf("%w: open trace: %w", errInput, err)
	}
	defer f.Close()
	r, err := event.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read trace %s: %w", tracePath, err)
	}
	a := analysis.New(opts)
	if err := a.Add(r.Header()); err != nil {
		return nil, fmt.Errorf("analyze %s: %w", tracePath, err)
	}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read trace %s: %w", tracePath, err)
		}
		if err := a.Add(rec); err != nil {
			return nil, fmt.Errorf("analyze %s: %w", tracePath, err)
		}
	}
	res := a.Finish()
	if r.Truncated() {
		return res, fmt.Errorf("%w: %s ends inside a record at byte %d, after %d whole records", errTruncatedTrace, tracePath, r.Offset(), r.Records())
	}
	if !res.Run.Ended {
		// Cut at a record boundary (the recorder was killed right after
		// a flush): whole, but the End record a closed trace always has
		// is missing.
		return res, fmt.Errorf("%w: %s ends after %d whole records without its End record", errTruncatedTrace, tracePath, r.Records())
	}
	return res, nil
}

// writeOutputs writes the profile and the reports into out. Each file is
// written under a temporary name and renamed into place, so a failure never
// leaves a partial file that looks whole.
func writeOutputs(out *outputDir, res *analysis.Result) error {
	outputs := []struct {
		name  string
		write func(io.Writer, *analysis.Result) error
	}{
		{profileFile, profile.Write},
		{jsonFile, report.WriteJSON},
		{mdFile, report.WriteMarkdown},
		{htmlFile, report.WriteHTML},
	}
	for _, o := range outputs {
		if err := out.writeFile(o.name, func(w io.Writer) error { return o.write(w, res) }); err != nil {
			return err
		}
	}
	// What was live at each failed segment allocation of a traced caching
	// allocator (segments and blocks): oom-<n>.pb.gz, as report.json names
	// them.
	for i := range res.Pools {
		for j := range res.Pools[i].OOMs {
			o := &res.Pools[i].OOMs[j]
			view := res.AtOOM(o)
			if err := out.writeFile(analysis.OOMProfileName(o), func(w io.Writer) error { return profile.Write(w, view) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeFileAtomic writes path through a temporary file in the same
// directory and renames it into place once complete.
func writeFileAtomic(path string, write func(io.Writer) error) (err error) {
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

var (
	// errOutputExists: the output directory already holds a recording's
	// files, which would be overwritten.
	errOutputExists = errors.New("output directory holds an earlier recording")
	// errOutputLink: the output directory or a file in it is a symbolic
	// link, which vramprof never writes through (run as root, a link
	// planted in a shared directory would aim its writes anywhere).
	errOutputLink = errors.New("output path is a symbolic link")
)

// recordingFiles are the files run and attach write into their directory;
// report -o writes the same but the trace (reportFiles).
var (
	recordingFiles = []string{traceFile, profileFile, jsonFile, mdFile, htmlFile, momentsDir}
	reportFiles    = []string{profileFile, jsonFile, mdFile, htmlFile, snapshotFile}
)

// outputDir is an output directory, opened once: every file is created
// through it (an os.Root, openat(2) underneath), so swapping the
// directory's path for a link afterwards, as the owner of a directory in a
// shared place could, redirects nothing. Close it when done.
type outputDir struct {
	path string
	root *os.Root
}

// ensureDir creates dir (and parents) for the outputs named in files (and
// oom-<n>.pb.gz; momentsDir among files is a directory), opens it, and checks that it is writable now, before
// anything is traced, so an unwritable directory is an error at once rather
// than after an hour of training. created says whether it was made here.
//
// dir must not be a symbolic link, and must not hold any of those files
// already: an earlier recording is refused unless force, which removes
// them first (a symbolic link among them is removed, never followed).
// Files are then created afresh: the trace with O_EXCL (createTrace), the
// others through a new temporary file renamed into place (writeFile), which
// replaces a link rather than writing to its target.
func ensureDir(dir string, force bool, files []string) (out *outputDir, created bool, err error) {
	clean := filepath.Clean(dir) // "link/" would follow the link
	st, statErr := os.Lstat(clean)
	switch {
	case statErr == nil && st.Mode()&os.ModeSymlink != 0:
		return nil, false, linkError(dir, clean)
	case statErr == nil && !st.IsDir():
		return nil, false, fmt.Errorf("%w: %s exists and is not a directory", errOutputDir, dir)
	case errors.Is(statErr, os.ErrNotExist):
		created = true
	}
	if err := os.MkdirAll(clean, 0o755); err != nil {
		return nil, false, fmt.Errorf("%w: %s: %w", errOutputDir, dir, err)
	}
	fail := func(err error) (*outputDir, bool, error) {
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
		return fail(fmt.Errorf("%w: %s: %w", errOutputDir, dir, err))
	}
	out = &outputDir{path: dir, root: root}
	// The directory opened is the one checked: not a link put in its
	// place meanwhile.
	opened, err1 := root.Stat(".")
	now, err2 := os.Lstat(clean)
	switch {
	case err2 == nil && now.Mode()&os.ModeSymlink != 0:
		return fail(linkError(dir, clean))
	case err1 != nil || err2 != nil || !os.SameFile(opened, now):
		return fail(fmt.Errorf("%w: %s changed while it was opened", errOutputDir, dir))
	}
	if !created {
		old := existingOutputs(root, files)
		if len(old) > 0 && !force {
			return fail(fmt.Errorf("%w: %s already holds %s", errOutputExists, dir, strings.Join(old, ", ")))
		}
		for _, name := range old {
			remove := root.Remove
			if name == momentsDir {
				remove = root.RemoveAll // an earlier recording's moment reports
			}
			if err := remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fail(fmt.Errorf("%w: --force: remove %s: %w", errOutputDir, filepath.Join(dir, name), err))
			}
		}
	}
	if err := out.writeFile(".vramprof-write-test", func(io.Writer) error { return nil }); err != nil {
		return fail(fmt.Errorf("%w: %s: %w", errOutputDir, dir, err))
	}
	_ = root.Remove(".vramprof-write-test")
	return out, created, nil
}

func linkError(dir, clean string) error {
	target, _ := os.Readlink(clean)
	return fmt.Errorf("%w: -o %s points to %s", errOutputLink, dir, target)
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
	if !slices.Contains(files, profileFile) {
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
		if ok, _ := filepath.Match(segmentPattern, name); ok && slices.Contains(files, traceFile) {
			out = append(out, name)
		}
	}
	return out
}

// subdir creates the new directory parent/name in d (parent made if
// missing) and opens it. Neither may be a symbolic link, and name must not
// exist: a moment directory is written once, afresh. Close it when done.
func (d *outputDir) subdir(parent, name string) (*outputDir, error) {
	if err := d.root.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("%w: %s: %w", errOutputDir, d.file(parent), err)
	}
	// Lstat, then open: os.Root keeps a link from leading outside d, and
	// the check refuses one inside it.
	if st, err := d.root.Lstat(parent); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", errOutputDir, d.file(parent))
	}
	rel := filepath.Join(parent, name)
	if err := d.root.Mkdir(rel, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errOutputDir, d.file(rel), err)
	}
	sub, err := d.root.OpenRoot(rel)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errOutputDir, d.file(rel), err)
	}
	return &outputDir{path: d.file(rel), root: sub}, nil
}

// Close releases the directory.
func (d *outputDir) Close() error { return d.root.Close() }

// file is the path of name in d, for messages.
func (d *outputDir) file(name string) string { return filepath.Join(d.path, name) }

// createTrace creates d's trace file, failing if one exists (ensureDir
// removed the old one) or if anything was put there since, a link
// included: it is written for the whole run, so it is never opened through
// a link.
func (d *outputDir) createTrace() (*os.File, error) {
	f, err := d.root.OpenFile(traceFile, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errOutputDir, d.path, err)
	}
	return f, nil
}

// writeFile writes name in d through a new temporary file, renamed into
// place once complete: a failure never leaves a partial file that looks
// whole, and a link at name is replaced, its target untouched.
func (d *outputDir) writeFile(name string, write func(io.Writer) error) (err error) {
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
