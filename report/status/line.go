package status

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/term"
)

// The line goes to stderr: on a terminal, one line redrawn in place every
// TTYEvery; otherwise a plain line every PlainEvery, so that a CI log shows
// progress without drowning in it.
//
// On a terminal, a line of its own (attach) is redrawn where the cursor is
// (carriage return, clear to end of line). A line that shares the terminal
// with the traced command (run), whose output would land after the status
// text ("...1 processepoch 1/4"), owns the bottom row instead. A scroll
// region (DECSTBM) keeps the command's output in the rows above; each
// redraw saves the cursor (DECSC), writes the bottom row and restores the
// cursor (DECRC), in one write, so the command's text always continues
// where it left off. A resize (SIGWINCH) sets the region up again for the
// new height; Stop resets the region and clears the row. A terminal of
// fewer than RegionRows rows gets the carriage-return line.
const (
	// TTYEvery is fast enough to look live, slow enough not to flicker or
	// cost anything.
	TTYEvery = 500 * time.Millisecond
	// PlainEvery keeps a long job's log readable: a one-hour run writes
	// 360 lines.
	PlainEvery = 10 * time.Second
	// EveryEnv overrides PlainEvery (a Go duration): tests use it to see
	// plain lines without waiting ten seconds.
	EveryEnv = "VRAMPROF_STATUS_EVERY"
	// RegionRows is the fewest rows a scroll region is set up in: one for
	// the status, two for the command.
	RegionRows = 3
)

// Counts are the session's counters a line shows.
type Counts struct {
	Events uint64 // records traced so far
	Lost   uint64 // records lost
	Procs  int64  // processes traced now
}

// Options say what a Line draws and where.
type Options struct {
	// Out is where the line goes. When it is a file on a terminal, the
	// line is redrawn in place; otherwise plain lines are written, every
	// Every.
	Out io.Writer
	// Every is the interval of plain lines; 0: EveryEnv when set (a bad
	// value is said on Out once), else PlainEvery.
	Every time.Duration
	// Shared says the traced command writes to the same terminal (run):
	// the line keeps to the bottom row when it can.
	Shared bool
	// Start is when recording began, for the clock.
	Start time.Time
	// Counts reads the session's counters; it must be safe for concurrent
	// use.
	Counts func() Counts
	// Live follows the live bytes and NVML's figures.
	Live *Live
}

// Line draws the live status line until stopped. Stop it before anything
// else is printed to its writer: it clears the line it drew.
type Line struct {
	out    io.Writer
	tty    int // the terminal's fd, or -1 when out is not a terminal
	every  time.Duration
	start  time.Time
	counts func() Counts
	live   *Live
	shared bool

	stopOnce sync.Once
	quit     chan struct{}
	done     chan struct{}

	// Touched only by the drawing goroutine, then by Stop after it ended.
	lastEvents uint64
	lastTime   time.Time
	drawn      bool
	// rows is the terminal's height while a scroll region is set up, 0
	// when none is.
	rows int
}

// Start starts drawing the line in a goroutine of its own. The Line must
// be stopped.
func Start(o Options) *Line {
	s := &Line{
		out:      o.Out,
		tty:      -1,
		every:    o.Every,
		start:    o.Start,
		counts:   o.Counts,
		live:     o.Live,
		shared:   o.Shared,
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
		lastTime: o.Start,
	}
	if f, ok := o.Out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		s.tty, s.every = int(f.Fd()), TTYEvery
	} else if s.every <= 0 {
		s.every = PlainEvery
		if v := os.Getenv(EveryEnv); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				fmt.Fprintf(s.out, "vramprof: %s=%q is not a positive duration (like 10s); using %s\n", EveryEnv, v, PlainEvery)
			} else {
				s.every = d
			}
		}
	}
	go s.loop()
	return s
}

func (s *Line) loop() {
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
func (s *Line) figures(now time.Time) Figures {
	c := s.counts()
	f := Figures{Elapsed: now.Sub(s.start), Events: c.Events, Lost: c.Lost, Procs: c.Procs}
	f.Live, f.Peak = s.live.Bytes()
	f.NVMLUsed, f.NVMLSeen = s.live.NVMLUsed()
	if dt := now.Sub(s.lastTime).Seconds(); dt > 0 && f.Events >= s.lastEvents {
		f.Rate = float64(f.Events-s.lastEvents) / dt
	}
	s.lastEvents, s.lastTime = f.Events, now
	return f
}

func (s *Line) draw(now time.Time) {
	line := Format(s.figures(now))
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
	if !s.shared || err != nil || rows < RegionRows {
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
func (s *Line) resetRegion() {
	fmt.Fprintf(s.out, "\x1b7\x1b[r\x1b8\x1b7\x1b[%d;1H\x1b[K\x1b8", s.rows)
	s.rows = 0
}

// Stop ends the line and waits for its goroutine; on a terminal it clears
// the line, so that what is printed next starts on a clean line. Safe to
// call more than once, and on nil.
func (s *Line) Stop() {
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
