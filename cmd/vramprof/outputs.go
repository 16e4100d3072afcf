package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

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

// ensureDir creates dir (and parents) and checks that it is writable now,
// before anything is traced, so an unwritable directory is an error at once
// rather than after an hour of training.
func ensureDir(dir string) (created bool, err error) {
	if _, statErr := os.Stat(dir); errors.Is(statErr, os.ErrNotExist) {
		created = true
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("%w: %s: %w", errOutputDir, dir, err)
	}
	probe, err := os.CreateTemp(dir, ".vramprof-write-test-*")
	if err != nil {
		if created {
			_ = os.Remove(dir)
		}
		return false, fmt.Errorf("%w: %s: %w", errOutputDir, dir, err)
	}
	_ = probe.Close()
	_ = os.Remove(probe.Name())
	return created, nil
}
