package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	pysnapshot "github.com/vramprof/vramprof/probes/snapshot"
)

// snapshotFile is what `report --format snapshot -o DIR` writes in DIR.
const snapshotFile = "snapshot.pickle"

// isSnapshot reports whether path is a PyTorch memory snapshot rather than a
// .vpt trace: by its extension, or by a pickle protocol header (PROTO 2-5)
// where a trace has its magic.
func isSnapshot(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".pickle", ".pkl":
		return true
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var head [2]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return false
	}
	return head[0] == 0x80 && head[1] >= 2 && head[1] <= 5
}

// replay feeds every record of path (a .vpt trace or a snapshot pickle) to
// add, in order. A trace cut short inside a record gives its whole records,
// then an error matching errTruncatedTrace.
func replay(path string, add func(event.Record) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: open trace: %w", errInput, err)
	}
	defer f.Close()
	if isSnapshot(path) {
		recs, err := pysnapshot.Read(bufio.NewReaderSize(f, 1<<20))
		if err != nil {
			return fmt.Errorf("%w: read snapshot %s: %w", errInput, path, err)
		}
		if h, ok := recs[0].(*event.Header); ok {
			h.Command = []string{path}
		}
		for _, r := range recs {
			if err := add(r); err != nil {
				return err
			}
		}
		return nil
	}
	r, err := event.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return fmt.Errorf("read trace %s: %w", path, err)
	}
	if err := add(r.Header()); err != nil {
		return err
	}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read trace %s: %w", path, err)
		}
		if err := add(rec); err != nil {
			return err
		}
	}
	if r.Truncated() {
		return fmt.Errorf("%w: %s ends inside a record at byte %d, after %d whole records", errTruncatedTrace, path, r.Offset(), r.Records())
	}
	return nil
}

// analyzeSnapshot runs the analysis on an imported PyTorch snapshot.
func analyzeSnapshot(path string, opts analysis.Options) (*analysis.Result, error) {
	a := analysis.New(opts)
	if err := replay(path, func(r event.Record) error {
		if err := a.Add(r); err != nil {
			return fmt.Errorf("analyze %s: %w", path, err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return a.Finish(), nil
}

// writeSnapshot exports the trace or snapshot at path as a PyTorch memory
// snapshot pickle to w. A trace cut short is exported up to the cut, and
// the error matching errTruncatedTrace is returned after.
func writeSnapshot(w io.Writer, path string) error {
	x := pysnapshot.NewExporter()
	err := replay(path, x.Add)
	if err != nil && !errors.Is(err, errTruncatedTrace) {
		return err
	}
	if werr := pysnapshot.Encode(w, x.Snapshot()); werr != nil {
		return werr
	}
	return err
}
