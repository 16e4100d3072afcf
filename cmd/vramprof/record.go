//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/vramprof/vramprof/probes"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report"
)

// recording is a live session writing its trace into an output directory.
// It owns the session, the trace file and its writer; finish (or abort)
// releases them.
type recording struct {
	dir        string
	createdDir bool
	file       *os.File
	buf        *bufio.Writer
	w          *event.Writer
	session    *probes.Session
}

// startRecording prepares dir, opens its trace and loads the probes.
func startRecording(dir string, h *event.Header) (*recording, error) {
	// Privilege first: without it, nothing else matters, and it is the
	// error worth reading.
	if err := probes.CheckPrivileges(); err != nil {
		return nil, err
	}
	created, err := ensureDir(dir)
	if err != nil {
		return nil, err
	}
	r := &recording{dir: dir, createdDir: created}
	r.file, err = os.OpenFile(filepath.Join(dir, traceFile), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		r.abort()
		return nil, fmt.Errorf("%w: %s: %w", errOutputDir, dir, err)
	}
	r.buf = bufio.NewWriterSize(r.file, 1<<20)
	h.Tool = "vramprof " + version
	h.Start = probes.MonotonicNow()
	h.WallTime = time.Now().UnixNano()
	h.Host, _ = os.Hostname()
	r.w, err = event.NewWriter(r.buf, h)
	if err != nil {
		r.abort()
		return nil, fmt.Errorf("write trace header: %w", err)
	}
	r.session, err = probes.NewSession(probes.Options{Sink: traceSink{r}})
	if err != nil {
		r.abort()
		return nil, err
	}
	return r, nil
}

// traceSink flushes through to the file, so that "a crash loses at most the
// last second" holds for the bytes on disk, not only in our buffers.
type traceSink struct{ r *recording }

func (s traceSink) Write(rec event.Record) error { return s.r.w.Write(rec) }

func (s traceSink) Flush() error {
	if err := s.r.w.Flush(); err != nil {
		return err
	}
	return s.r.buf.Flush()
}

// abort releases everything and removes what was created: no partial
// output is left behind as if it were whole.
func (r *recording) abort() {
	if r.session != nil {
		_ = r.session.Close()
	}
	if r.file != nil {
		_ = r.file.Close()
		_ = os.Remove(r.file.Name())
	}
	if r.createdDir {
		_ = os.Remove(r.dir) // only if empty
	}
}

// finish closes the session, ends the trace, replays it into the outputs and
// prints the summary to out.
func (r *recording) finish(end *event.End, out io.Writer) error {
	closeErr := r.session.Close()
	end.Time = probes.MonotonicNow()
	if err := r.w.Write(end); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	if err := r.w.Close(); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	if err := r.buf.Flush(); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	if err := r.file.Close(); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	if closeErr != nil {
		return closeErr
	}
	return produce(r.dir, filepath.Join(r.dir, traceFile), out)
}

// produce analyses a trace, writes the outputs into dir and the summary to
// out.
func produce(dir, tracePath string, out io.Writer) error {
	res, err := analyze(tracePath)
	if err != nil {
		return err // a trace we just closed cannot be cut short
	}
	if err := writeOutputs(dir, res); err != nil {
		return err
	}
	if err := report.WriteSummary(out, res); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	fmt.Fprintf(out, "\nwrote %s: %s, %s, %s, %s\n", dir, traceFile, profileFile, jsonFile, mdFile)
	fmt.Fprintf(out, "open the profile: go tool pprof -http=: %s\n", filepath.Join(dir, profileFile))
	return nil
}

// defaultDir is the default output directory, ./vramprof-<pid>-<time>.
func defaultDir(pid int) string {
	return fmt.Sprintf("vramprof-%d-%s", pid, time.Now().Format("20060102-150405"))
}

// runUntil runs the session until ctx is done or every target exited.
func (r *recording) run(ctx context.Context) error {
	return r.session.Run(ctx)
}
