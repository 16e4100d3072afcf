package recorder

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	pysnapshot "github.com/vramprof/vramprof/profile/snapshot"
)

// source is an input opened once and read once, sequentially from its
// start: a .vpt trace or a PyTorch snapshot pickle, told apart by its
// name or by its first bytes, peeked, never read twice. So a pipe or a
// FIFO (`vramprof report <(cat trace.vpt)`) reads as a file does.
type source struct {
	name     string
	br       *bufio.Reader
	snapshot bool
}

// newSource reads r, named name in messages.
func newSource(name string, r io.Reader) *source {
	s := &source{name: name, br: bufio.NewReaderSize(r, 1<<20)}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".pickle", ".pkl":
		s.snapshot = true
	default:
		head, _ := s.br.Peek(2)
		s.snapshot = isPickleHead(head)
	}
	return s
}

// isPickleHead reports whether head opens a pickle of protocol 2-5 (PROTO
// n), where a trace has its magic.
func isPickleHead(head []byte) bool {
	return len(head) == 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5
}

// openInput opens the file at path for a source. Whatever it is (a file,
// a pipe, a FIFO, a device) it is opened once; the caller closes it.
func openInput(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: open trace: %w", ErrInput, err)
	}
	return f, nil
}

// replay feeds every record of s to add, in order, as Replay does; it
// returns the trace's count of whole records (0 for a snapshot).
func (s *source) replay(add func(event.Record) error) (int64, error) {
	if s.snapshot {
		recs, err := pysnapshot.Read(s.br)
		if err != nil {
			return 0, fmt.Errorf("%w: read snapshot %s: %w", ErrInput, s.name, err)
		}
		if h, ok := recs[0].(*event.Header); ok {
			h.Command = []string{s.name}
		}
		for _, r := range recs {
			if err := add(r); err != nil {
				return 0, err
			}
		}
		return 0, nil
	}
	rr, err := replayTrace(s.name, []io.Reader{s.br}, []string{s.name}, add, nil)
	if err != nil {
		return rr.records, err
	}
	if rr.truncated {
		return rr.records, fmt.Errorf("%w: %s ends inside a record at byte %d, after %d whole records (the %d bytes after them dropped)",
			ErrTruncated, s.name, rr.offset, rr.records, rr.dropped)
	}
	return rr.records, nil
}

// analyze runs the analysis on s, and also feeds every record to also
// when it is not nil (Report's snapshot export, in the same single read).
// A trace cut short gives both a result and an error matching
// ErrTruncated.
func (s *source) analyze(opts analysis.Options, also func(event.Record) error) (*analysis.Result, error) {
	a := analysis.New(opts)
	records, err := s.replay(func(rec event.Record) error {
		if also != nil {
			if err := also(rec); err != nil {
				return err
			}
		}
		if err := a.Add(rec); err != nil {
			return fmt.Errorf("analyze %s: %w", s.name, err)
		}
		return nil
	})
	if s.snapshot {
		return finishReplay(a, err, nil)
	}
	return finishReplay(a, err, func() error {
		if next := nextSegment(s.name); next != "" {
			return fmt.Errorf("%w: %s ends after %d whole records without its End record: it is a segment of a flight recording "+
				"and %s follows it (the run went on); `vramprof report %s` reads the whole recording",
				ErrTruncated, s.name, records, filepath.Base(next), filepath.Dir(s.name))
		}
		return fmt.Errorf("%w: %s ends after %d whole records without its End record", ErrTruncated, s.name, records)
	})
}

// nextSegment is the segment that follows the one at path in its
// directory, "" when path is not a segment (by its name) or is the last.
func nextSegment(path string) string {
	if ok, _ := filepath.Match(SegmentPattern, filepath.Base(path)); !ok {
		return ""
	}
	segs := traceSegments(filepath.Dir(path))
	for i, seg := range segs {
		if filepath.Base(seg) == filepath.Base(path) && i+1 < len(segs) {
			return segs[i+1]
		}
	}
	return ""
}

// finishReplay closes a's replay of a trace, err being the replay's error:
// a trace cut inside a record gives both a result and an error matching
// ErrTruncated. One cut at a record boundary (the recorder was killed
// right after a flush) is whole, but the End record a closed trace always
// has is missing: noEnd's error, when noEnd is not nil (a snapshot has
// none).
func finishReplay(a *analysis.Analyzer, err error, noEnd func() error) (*analysis.Result, error) {
	if err != nil && !errors.Is(err, ErrTruncated) {
		return nil, err
	}
	res := a.Finish()
	if err == nil && noEnd != nil && !res.Run.Ended {
		err = noEnd()
	}
	return res, err
}

// analyzePath analyses the input at path (a trace, a snapshot, or a
// recording's trace.vpt replaced by a flight recorder's segments), reading
// it once; also, when not nil, sees every record too.
func analyzePath(path string, opts analysis.Options, also func(event.Record) error) (*analysis.Result, bool, error) {
	if segs := SegmentsOf(path); len(segs) > 0 {
		a := analysis.New(opts)
		add := a.Add
		if also != nil {
			add = func(rec event.Record) error {
				if err := also(rec); err != nil {
					return err
				}
				return a.Add(rec)
			}
		}
		res, err := finishSegments(a, replaySegmentFiles(segs, nil, add), segs[len(segs)-1])
		return res, false, err
	}
	f, err := openInput(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	src := newSource(path, f)
	res, err := src.analyze(opts, also)
	return res, src.snapshot, err
}

// openTrace opens d's trace for reading, through d and never through a
// link (see Dir): a plain file, or an error that names it and quotes
// nothing of it.
func (d *Dir) openTrace(name string) (*os.File, error) {
	f, err := d.root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: open trace: %w", ErrInput, err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("%w: %s is not a plain file", ErrInput, d.file(name))
	}
	return f, nil
}

// finishSegments closes a's replay of a flight recorder's segments (err is
// the replay's error, last the newest segment's name), as Analyze does one
// trace.
func finishSegments(a *analysis.Analyzer, err error, last string) (*analysis.Result, error) {
	return finishReplay(a, err, func() error {
		return fmt.Errorf("%w: %s ends without its End record", ErrTruncated, last)
	})
}

// analyze analyses the recording d holds: trace when not nil (the file
// written, read from its start), else read back through d (the directory
// opened when the recording began, whatever its path names now): the
// flight recorder's segments named (oldest first) when there are any, or
// its trace.vpt. also, when not nil, sees every record too.
func (d *Dir) analyze(trace io.ReaderAt, segments []string, opts analysis.Options, also func(event.Record) error) (*analysis.Result, error) {
	if trace != nil {
		src := &source{name: d.file(TraceFile), br: bufio.NewReaderSize(io.NewSectionReader(trace, 0, math.MaxInt64), 1<<20)}
		return src.analyze(opts, also)
	}
	if len(segments) == 0 {
		f, err := d.openTrace(TraceFile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		src := &source{name: d.file(TraceFile), br: bufio.NewReaderSize(f, 1<<20)}
		return src.analyze(opts, also)
	}
	paths := make([]string, len(segments))
	for i, name := range segments {
		paths[i] = d.file(name)
	}
	open := func(path string) (*os.File, error) { return d.openTrace(filepath.Base(path)) }
	a := analysis.New(opts)
	add := a.Add
	if also != nil {
		add = func(rec event.Record) error {
			if err := also(rec); err != nil {
				return err
			}
			return a.Add(rec)
		}
	}
	return finishSegments(a, replaySegmentFiles(paths, open, add), paths[len(paths)-1])
}
