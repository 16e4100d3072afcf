//go:build linux

package probes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/vramprof/vramprof/probes/event"
)

// reader reads the events ring buffer: one ring buffer record reused for
// every read (ReadInto), decoded into one rawRecord, also reused. It
// counts what it cannot pass on: samples shorter than their header says
// (short) and records of a kind user space does not know (unknown). The
// BPF side counts the rest of what is lost (lost, unpaired). It does not
// own the ring buffer (the loader does). Not safe for concurrent use,
// except its counters.
type reader struct {
	ring ring
	rec  ringbuf.Record
	raw  rawRecord
	// The BPF side's counters: failed reserves (the ring buffer was
	// full) and returns whose entry was not seen.
	lostVar, unpairedVar variable
	short                atomic.Uint64
	unknown              atomic.Uint64
	// consumed counts the ring buffer bytes of the records read: their
	// ring header and padded sample. Records the BPF side discarded, which
	// the ring reader skips, are not counted: a position reached through
	// this count is then reached late, never early (see Session.markAt).
	consumed uint64
}

// ring is the part of *ringbuf.Reader the reader uses; tests give it a fake.
type ring interface {
	ReadInto(rec *ringbuf.Record) error
	SetDeadline(t time.Time)
	AvailableBytes() int
}

// variable is the part of *ebpf.Variable the reader uses (a BPF global
// counter); tests give it a fake.
type variable interface {
	Get(out any) error
}

func newReader(l *loader) *reader {
	return &reader{ring: l.ring, lostVar: l.objs.Lost, unpairedVar: l.objs.Unpaired}
}

// setDeadline sets when the next read gives up on an empty ring.
func (rd *reader) setDeadline(t time.Time) { rd.ring.SetDeadline(t) }

// read waits, until the deadline, for the next record and decodes it. It
// returns nil and no error for a sample it could not decode (counted as
// short), os.ErrDeadlineExceeded when the ring stayed empty, and
// ringbuf.ErrClosed once the ring is closed. The record is valid until the
// next read.
func (rd *reader) read() (*rawRecord, error) {
	if err := rd.ring.ReadInto(&rd.rec); err != nil {
		return nil, err
	}
	rd.consumed += ringRecordBytes(len(rd.rec.RawSample))
	if err := decodeRecord(rd.rec.RawSample, &rd.raw); err != nil {
		rd.short.Add(1)
		return nil, nil
	}
	return &rd.raw, nil
}

// ringRecordBytes is the ring buffer space of a record of n bytes: the
// ring's 8-byte header, and the sample padded to 8 bytes.
func ringRecordBytes(n int) uint64 { return 8 + uint64(n+7)&^7 }

// position returns the ring buffer position, in consumed's terms, that
// the producer has reached: every record reserved before the call lies
// before it.
func (rd *reader) position() uint64 { return rd.consumed + uint64(rd.ring.AvailableBytes()) }

// countUnknown counts a record of a kind user space does not know.
func (rd *reader) countUnknown() { rd.unknown.Add(1) }

// lost returns how many records are lost so far: the BPF side's lost and
// unpaired records, and the short and unknown ones read. Their sum is the
// lost_events figure of every output.
func (rd *reader) lost() (event.LostCauses, error) {
	var c event.LostCauses
	if err := rd.lostVar.Get(&c.RingFull); err != nil {
		return c, fmt.Errorf("read lost counter: %w", err)
	}
	if err := rd.unpairedVar.Get(&c.Unpaired); err != nil {
		return c, fmt.Errorf("read unpaired counter: %w", err)
	}
	c.Malformed = rd.short.Load() + rd.unknown.Load()
	return c, nil
}

// Run reads records until ctx is done or every traced process has exited,
// then drains what is left in the ring buffer and writes the final Lost
// record. It does not write event.End: the caller knows why it stopped.
func (s *Session) Run(ctx context.Context) error {
	raiseReaderPriority()
	lastFlush := time.Now()
	lastTick := lastFlush
	for {
		if ctx.Err() != nil || s.procs.allExited() {
			return s.drain()
		}
		s.rd.setDeadline(time.Now().Add(s.opts.Poll))
		before := MonotonicNow()
		ringErr, err := s.readBatch()
		if err != nil {
			return err
		}
		switch err := ringErr; {
		case err == nil:
			// A whole batch read: the ring may hold more.
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The ring was empty: every record of a process already known
			// to have exited has been read, and so has every call that
			// returned before the batch began.
			s.forgetExited(false)
			if s.mark != 0 {
				// Read before the ring was emptied: it holds.
				s.order.setMark(s.mark)
			}
			s.takeMark()
			s.order.advance(before)
			if err := s.release(false); err != nil {
				return err
			}
		case errors.Is(err, ringbuf.ErrClosed):
			return s.release(true)
		default:
			return fmt.Errorf("read ring buffer: %w", err)
		}
		if now := time.Now(); now.Sub(lastTick) >= s.opts.Poll {
			lastTick = now
			if err := s.tick(); err != nil {
				return err
			}
			if s.mark == 0 {
				s.takeMark() // see takeMark: the ring may not be empty for long
			}
			if now.Sub(lastFlush) >= s.opts.FlushEvery {
				lastFlush = now
				if err := s.opts.Sink.Flush(); err != nil {
					return fmt.Errorf("flush trace: %w", err)
				}
			}
		}
	}
}

// batchRecords is how many records Run reads between its checks of the
// context, the clock and the processes: those cost more than handling a
// record does (the clock is a system call), and at full rate the ring is
// rarely empty. 512 records take well under a poll at any rate the reader
// keeps up with, so ticks stay on time.
const batchRecords = 512

// readBatch reads and handles up to batchRecords records, waiting for each
// until the deadline set before it, or up to a process's exit. ringErr is
// nil once it has read them, else the ring's error that stopped it: os.ErrDeadlineExceeded once
// the ring stayed empty up to the deadline (at once when that is past),
// ringbuf.ErrClosed once the ring is closed. err is the error of handling
// a record.
func (s *Session) readBatch() (ringErr, err error) {
	for range batchRecords {
		r, ringErr := s.rd.read()
		if ringErr != nil {
			return ringErr, nil
		}
		exit := false
		if r != nil { // nil: short, counted
			exit = r.kind == recExit
			if err := s.handle(r); err != nil {
				return nil, err
			}
		}
		if s.mark != 0 && s.rd.consumed >= s.markAt {
			// Behind, the ring never empty: every record in the ring
			// when the mark was read has been read now, so it holds.
			s.order.setMark(s.mark)
			s.mark = 0
			s.forgetExited(true)
			if err := s.release(false); err != nil {
				return nil, err
			}
		}
		if exit {
			// Run sees at once whether every target has gone, rather
			// than waiting on an empty ring for the deadline.
			return nil, nil
		}
	}
	return nil, nil
}

// ReaderNice is the nice value of the thread that reads the ring buffer
// (Session.Run). The ring fills when the reader falls behind the traced
// threads, and every record then refused is lost: with six busy loops on
// this 2-core host, 16 threads of churn_threads lost 77210 to 194753 of
// their 336000 records in 3 runs of 4 at nice 0, and none at -10 (a share
// of the CPU 9.3 times a nice-0 thread's while it has records to read; it
// sleeps in epoll otherwise). A variable for tests.
var ReaderNice = -10

// raiseReaderPriority locks the calling goroutine to its thread for good
// and gives that thread ReaderNice: the thread ends with the goroutine
// (never unlocked), so no other goroutine runs at that priority, and
// threads the runtime starts meanwhile come from its template thread, not
// from this one. Processes vramprof starts are forked by other threads. A
// kernel that refuses (no CAP_SYS_NICE) leaves it at the default.
func raiseReaderPriority() {
	runtime.LockOSThread()
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), ReaderNice)
}

// drain reads what the ring buffer still holds without waiting for more.
func (s *Session) drain() error {
	for {
		s.rd.setDeadline(time.Now())
		r, err := s.rd.read()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ringbuf.ErrClosed) {
				break
			}
			return fmt.Errorf("drain ring buffer: %w", err)
		}
		if r == nil {
			continue // short: counted
		}
		if err := s.handle(r); err != nil {
			return err
		}
	}
	// Every call traced has returned, or never will (its process exited,
	// or the session stops): nothing can arrive before what is held.
	if err := s.release(true); err != nil {
		return err
	}
	if err := s.writeLost(true); err != nil {
		return err
	}
	return s.opts.Sink.Flush()
}

// writeLost writes a Lost record when the total changed (or always, when
// final), so every output carries the count, even when it is zero.
func (s *Session) writeLost(final bool) error {
	causes, err := s.rd.lost()
	if err != nil {
		return err
	}
	total := causes.RingFull + causes.Unpaired + causes.Malformed
	late := s.order.late
	s.stats.Lost.Store(total)
	s.stats.Late.Store(late)
	if total == s.lastLost && late == s.lastLate && !final {
		return nil
	}
	s.lastLost, s.lastLate = total, late
	if err := s.opts.Sink.Write(&event.Lost{Time: MonotonicNow(), Total: total, Late: late, Causes: causes}); err != nil {
		return fmt.Errorf("write lost record: %w", err)
	}
	return nil
}
