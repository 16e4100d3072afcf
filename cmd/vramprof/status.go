//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/vramprof/vramprof/analysis/ledger"
	"github.com/vramprof/vramprof/probes"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report/units"
)

// The live status of `run` and `attach` goes to stderr: on a terminal, one
// line redrawn in place twice a second; otherwise a plain line every
// statusPlainEvery, so that a CI log shows progress without drowning in it.
// -q turns it off.
//
// On a terminal, `attach` redraws the line where the cursor is (carriage
// return, clear to end of line). `run` shares the terminal with the
// command, whose output would land after the status text ("...1
// processepoch 1/4"): there the status owns the bottom row. A scroll region
// (DECSTBM) keeps the command's output in the rows above; each redraw saves
// the cursor (DECSC), writes the bottom row and restores the cursor
// (DECRC), in one write, so the command's text always continues where it
// left off. A resize (SIGWINCH) sets the region up again for the new
// height; stop resets the region and clears the row. A terminal of fewer
// than statusRegionRows rows gets the carriage-return line.
const (
	// statusTTYEvery is fast enough to look live, slow enough not to
	// flicker or cost anything.
	statusTTYEvery = 500 * time.Millisecond
	// statusPlainEvery keeps a long job's log readable: a one-hour run
	// writes 360 lines.
	statusPlainEvery = 10 * time.Second
	// statusEveryEnv overrides statusPlainEvery (a Go duration): tests use
	// it to see plain lines without waiting ten seconds.
	statusEveryEnv = "VRAMPROF_STATUS_EVERY"
	// statusRegionRows is the fewest rows a scroll region is set up in: one
	// for the status, two for the command.
	statusRegionRows = 3
)

// statusFigures are the numbers one status line shows.
type statusFigures struct {
	elapsed time.Duration
	events  uint64  // records traced so far
	rate    float64 // events per second over the last interval
	live    uint64  // device bytes live now (segment layer)
	peak    uint64  // the most device bytes live at once so far
	lost    uint64
	procs   int64 // processes traced now
	// nvmlUsed is the device memory NVML last reported used, summed over
	// devices; shown only when nvmlSeen.
	nvmlUsed uint64
	nvmlSeen bool
}

// formatStatus renders one status line, without prefix or line ending:
//
//	12.5s  8160 events (650/s)  live 1.50 GiB  peak 2.00 GiB  lost 0  1 process  NVML used 3.10 GiB
func formatStatus(f statusFigures) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %d events (%s)  live %s  peak %s  lost %d  %d process",
		elapsedText(f.elapsed), f.events, rateText(f.rate),
		units.Bytes(f.live), units.Bytes(f.peak), f.lost, f.procs)
	if f.procs != 1 {
		b.WriteString("es")
	}
	if f.nvmlSeen {
		fmt.Fprintf(&b, "  NVML used %s", units.Bytes(f.nvmlUsed))
	}
	return b.String()
}

// elapsedText renders a run's age: "0.5s", "59.9s", "2m05s", "1h02m05s".
func elapsedText(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Truncate(100*time.Millisecond).Seconds())
	}
	s := int64(d / time.Second)
	if s < 3600 {
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm%02ds", s/3600, s/60%60, s%60)
}

// rateText renders events per second: "0/s", "650/s", "12.3k/s", "1.5M/s".
func rateText(r float64) string {
	switch {
	case r < 999.5:
		return fmt.Sprintf("%.0f/s", r)
	case r < 999.5e3:
		return fmt.Sprintf("%.1fk/s", r/1e3)
	default:
		return fmt.Sprintf("%.1fM/s", r/1e6)
	}
}

// liveBytes follows the device memory live in the traced processes as the
// records go to the trace, for the status line only: the outputs come from
// the analysis of the trace, never from here. The live memory model is the
// analysis's own (analysis/ledger): the same rules (segment layer, nested
// calls not counted again, physical memory live until released and
// unmapped, an exited process's memory gone from the all-process figures)
// at O(1) per record. It also keeps NVML's latest per-device figures.
//
// observe is called by one goroutine at a time (the trace's mutex
// serializes the session's reader and the NVML sampler); figures is safe
// for concurrent use.
type liveBytes struct {
	ledger   *ledger.Ledger
	nvml     map[int32]uint64
	live     atomic.Uint64
	peak     atomic.Uint64
	nvmlUsed atomic.Uint64
	nvmlSeen atomic.Bool
}

func newLiveBytes() *liveBytes {
	return &liveBytes{ledger: ledger.New(), nvml: make(map[int32]uint64)}
}

// observe applies one record.
func (l *liveBytes) observe(rec event.Record) {
	switch r := rec.(type) {
	case *event.Event, *event.Process:
		l.ledger.Apply(rec)
		lv := l.ledger.ScopeLevel(ledger.DeviceScope)
		l.live.Store(lv.Bytes)
		l.peak.Store(lv.Peak)
	case *event.Sample:
		l.nvml[r.Device] = r.UsedBytes
		var sum uint64
		for _, used := range l.nvml {
			sum += used
		}
		l.nvmlUsed.Store(sum)
		l.nvmlSeen.Store(true)
	}
}

// statusLine draws the live status line until stopped. Stop it before anything
// else is printed to its writer: it clears the line it drew.
type statusLine struct {
	out   io.Writer
	tty   int // the terminal's fd, or -1 when out is not a terminal
	every time.Duration
	start time.Time
	stats *probes.Stats
	live  *liveBytes

	stopOnce sync.Once
	quit     chan struct{}
	done     chan struct{}

	// shared: the traced command writes to the same terminal (run), so
	// the status keeps to the bottom row (a scroll region) when it can.
	shared bool

	// Touched only by the drawing goroutine, then by stop after it ended.
	lastEvents uint64
	lastTime   time.Time
	drawn      bool
	// rows is the terminal's height while a scroll region is set up, 0
	// when none is.
	rows int
}

// startStatus starts drawing the status of rec on stderr. shared says the
// traced command writes to the same terminal (run). It returns nil when
// quiet; a nil *statusLine stops as a no-op.
func startStatus(rec *recording, quiet, shared bool) *statusLine {
	if quiet || rec.live == nil {
		return nil
	}
	s := &statusLine{
		out:    os.Stderr,
		tty:    -1,
		every:  statusPlainEvery,
		start:  rec.started,
		stats:  rec.session.Stats(),
		live:   rec.live,
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
		shared: shared,
	}
	if fd := int(os.Stderr.Fd()); isTerminal(fd) {
		s.tty, s.every = fd, statusTTYEvery
	} else if v := os.Getenv(statusEveryEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			fmt.Fprintf(os.Stderr, "vramprof: %s=%q is not a positive duration (like 10s); using %s\n", statusEveryEnv, v, statusPlainEvery)
		} else {
			s.every = d
		}
	}
	s.lastTime = s.start
	go s.loop()
	return s
}

func (s *statusLine) loop() {
	defer close(s.done)
	t := time.NewTicker(s.every)
	defer t.Stop()
	var winch chan os.Signal // nil (never ready) unless a region may be set up
	if s.tty >= 0 && s.shared {
		winch = make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
	}
	for {
		select {
		case <-s.quit:
			return
		case <-winch:
			if s.rows > 0 {
				// Clear the old status row (clamped to the bottom when the
				// terminal shrank); the next draw sets the region up for
				// the new size.
				fmt.Fprintf(s.out, "\x1b7\x1b[%d;1H\x1b[K\x1b8", s.rows)
				s.rows = 0
				s.draw(time.Now())
			}
		case now := <-t.C:
			s.draw(now)
		}
	}
}

// figures reads the counters at now; the rate is over the time since the
// previous call.
func (s *statusLine) figures(now time.Time) statusFigures {
	f := statusFigures{
		elapsed:  now.Sub(s.start),
		events:   s.stats.Events.Load(),
		live:     s.live.live.Load(),
		peak:     s.live.peak.Load(),
		lost:     s.stats.Lost.Load(),
		procs:    s.stats.Targets.Load(),
		nvmlUsed: s.live.nvmlUsed.Load(),
		nvmlSeen: s.live.nvmlSeen.Load(),
	}
	if dt := now.Sub(s.lastTime).Seconds(); dt > 0 && f.events >= s.lastEvents {
		f.rate = float64(f.events-s.lastEvents) / dt
	}
	s.lastEvents, s.lastTime = f.events, now
	return f
}

func (s *statusLine) draw(now time.Time) {
	line := formatStatus(s.figures(now))
	if s.tty < 0 {
		fmt.Fprintf(s.out, "vramprof: %s\n", line)
		return
	}
	// A line wider than the terminal wraps, and the carriage return then
	// redraws only its last row (or, in a region, the wrap would scroll):
	// cut it to fit.
	cols, rows, err := term.GetSize(s.tty)
	if err == nil && cols > 1 && len(line) >= cols {
		line = line[:cols-1]
	}
	s.drawn = true
	if !s.shared || err != nil || rows < statusRegionRows {
		if s.rows > 0 { // shrunk below the fewest rows: back to the line
			s.resetRegion()
		}
		fmt.Fprintf(s.out, "\r\x1b[K%s", line)
		return
	}
	var b strings.Builder
	if s.rows == 0 {
		// Make room for the status row: an index (IND, a line feed that
		// keeps the column, unlike "\n" through the terminal's ONLCR)
		// scrolls the screen when the cursor is on the bottom row, and
		// moving back up lands on the same text row and column either way:
		// a line the command left unfinished goes on where it stopped.
		// Setting the region homes the cursor: save and restore it around.
		s.rows = rows
		fmt.Fprintf(&b, "\x1bD\x1b7\x1b[1;%dr\x1b8\x1b[1A", s.rows-1)
	}
	fmt.Fprintf(&b, "\x1b7\x1b[%d;1H\x1b[K%s\x1b8", s.rows, line)
	_, _ = io.WriteString(s.out, b.String()) // one write: never split by the command's output
}

// resetRegion gives the whole terminal back to the command and clears the
// status row; the cursor stays where the command's output left it.
func (s *statusLine) resetRegion() {
	fmt.Fprintf(s.out, "\x1b7\x1b[r\x1b8\x1b7\x1b[%d;1H\x1b[K\x1b8", s.rows)
	s.rows = 0
}

// stop ends the status line and waits for its goroutine; on a terminal it
// clears the line, so that what is printed next starts on a clean line.
// Safe to call more than once, and on nil.
func (s *statusLine) stop() {
	if s == nil {
		return
	}
	s.stopOnce.Do(func() {
		close(s.quit)
		<-s.done
		switch {
		case s.rows > 0:
			s.resetRegion()
		case s.drawn:
			fmt.Fprint(s.out, "\r\x1b[K")
		}
	})
}
