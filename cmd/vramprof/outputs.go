package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
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

// writeOutputs writes the profile and the reports into dir. Each file is
// written under a temporary name and renamed into place, so a failure never
// leaves a partial file that looks whole.
func writeOutputs(dir string, res *analysis.Result) error {
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
		if err := writeFileAtomic(filepath.Join(dir, o.name), func(w io.Writer) error { return o.write(w, res) }); err != nil {
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
			if err := writeFileAtomic(filepath.Join(dir, analysis.OOMProfileName(o)), func(w io.Writer) error { return profile.Write(w, view) }); err != nil {
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
	recordingFiles = []string{traceFile, profileFile, jsonFile, mdFile, htmlFile}
	reportFiles    = []string{profileFile, jsonFile, mdFile, htmlFile, snapshotFile}
)

// ensureDir creates dir (and parents) for the outputs named in files (and
// oom-<n>.pb.gz) and checks that it is writable now, before anything is
// traced, so an unwritable directory is an error at once rather than after
// an hour of training.
//
// dir must not be a symbolic link, and must not hold any of those files
// already: an earlier recording is refused unless force, which removes
// them first (a symbolic link among them is removed, never followed).
// Files are then created afresh: the trace with O_EXCL|O_NOFOLLOW
// (createTrace), the others through a new temporary file renamed into
// place (writeFileAtomic), which replaces a link rather than writing to
// its target.
func ensureDir(dir string, force bool, files []string) (created bool, err error) {
	clean := filepath.Clean(dir) // "link/" would follow the link
	st, statErr := os.Lstat(clean)
	switch {
	case statErr == nil && st.Mode()&os.ModeSymlink != 0:
		target, _ := os.Readlink(clean)
		return false, fmt.Errorf("%w: -o %s points to %s", errOutputLink, dir, target)
	case statErr == nil && !st.IsDir():
		return false, fmt.Errorf("%w: %s exists and is not a directory", errOutputDir, dir)
	case errors.Is(statErr, os.ErrNotExist):
		created = true
	}
	if err := os.MkdirAll(clean, 0o755); err != nil {
		return false, fmt.Errorf("%w: %s: %w", errOutputDir, dir, err)
	}
	if !created {
		old := existingOutputs(clean, files)
		if len(old) > 0 && !force {
			return false, fmt.Errorf("%w: %s already holds %s", errOutputExists, dir, strings.Join(old, ", "))
		}
		for _, name := range old {
			if err := os.Remove(filepath.Join(clean, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return false, fmt.Errorf("%w: --force: remove %s: %w", errOutputDir, filepath.Join(dir, name), err)
			}
		}
	}
	probe, err := os.CreateTemp(clean, ".vramprof-write-test-*")
	if err != nil {
		if created {
			_ = os.Remove(clean)
		}
		return false, fmt.Errorf("%w: %s: %w", errOutputDir, dir, err)
	}
	_ = probe.Close()
	_ = os.Remove(probe.Name())
	return created, nil
}

// existingOutputs lists which of files, and of the oom-<n>.pb.gz profiles,
// dir holds (as any kind of file, a link included).
func existingOutputs(dir string, files []string) []string {
	var out []string
	for _, name := range files {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			out = append(out, name)
		}
	}
	if slices.Contains(files, profileFile) {
		ooms, _ := filepath.Glob(filepath.Join(dir, "oom-*.pb.gz"))
		for _, p := range ooms {
			out = append(out, filepath.Base(p))
		}
	}
	return out
}

// createTrace creates dir's trace file, failing if one exists (ensureDir
// removed the old one) or if a link was put there since: it is written
// for the whole run, so it is never opened through a link.
func createTrace(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, traceFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errOutputDir, dir, err)
	}
	return f, nil
}
