//go:build linux

package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// screen is the little of a VT100 that the status line and a program's
// plain output use: printable text with autowrap, CR, LF and IND (ESC D)
// (scrolling within the scroll region; rows scrolled off the top of the
// screen are kept in history), DECSC/DECRC (ESC 7, ESC 8), DECSTBM (CSI t;b r), CUP (CSI r;c
// H), CUU (CSI n A) and EL (CSI K). It shows what a person would see.
type screen struct {
	rows, cols     int
	cells          [][]rune
	r, c           int
	top, bot       int // the scroll region, 0-based, inclusive
	savedR, savedC int
	history        []string
}

func newScreen(rows, cols int) *screen {
	s := &screen{rows: rows, cols: cols, bot: rows - 1}
	s.cells = make([][]rune, rows)
	for i := range s.cells {
		s.cells[i] = blankRow(cols)
	}
	return s
}

func blankRow(cols int) []rune { return []rune(strings.Repeat(" ", cols)) }

func (s *screen) lineFeed() {
	if s.r != s.bot {
		if s.r < s.rows-1 {
			s.r++
		}
		return
	}
	if s.top == 0 {
		s.history = append(s.history, strings.TrimRight(string(s.cells[0]), " "))
	}
	copy(s.cells[s.top:s.bot], s.cells[s.top+1:s.bot+1])
	s.cells[s.bot] = blankRow(s.cols)
}

var csiRE = regexp.MustCompile(`^\x1b\[([0-9;]*)([A-Za-z])`)

// write feeds the terminal what a program wrote.
func (s *screen) write(t *testing.T, data string) {
	for len(data) > 0 {
		switch {
		case strings.HasPrefix(data, "\x1b7"):
			s.savedR, s.savedC, data = s.r, s.c, data[2:]
		case strings.HasPrefix(data, "\x1b8"):
			s.r, s.c, data = s.savedR, s.savedC, data[2:]
		case strings.HasPrefix(data, "\x1bD"): // IND: a line feed keeping the column
			s.lineFeed()
			data = data[2:]
		case strings.HasPrefix(data, "\x1b["):
			m := csiRE.FindStringSubmatch(data)
			require.NotNil(t, m, "an escape sequence this screen does not know: %q", data[:min(len(data), 12)])
			data = data[len(m[0]):]
			var p []int
			for f := range strings.SplitSeq(m[1], ";") {
				n, _ := strconv.Atoi(f)
				p = append(p, n)
			}
			arg := func(i, def int) int {
				if i < len(p) && p[i] > 0 {
					return p[i]
				}
				return def
			}
			switch m[2] {
			case "r":
				s.top, s.bot = arg(0, 1)-1, arg(1, s.rows)-1
				s.r, s.c = 0, 0
			case "H":
				s.r, s.c = min(arg(0, 1), s.rows)-1, min(arg(1, 1), s.cols)-1
			case "A":
				s.r = max(s.r-arg(0, 1), 0)
			case "K":
				require.Zero(t, arg(0, 0), "EL from the cursor only")
				for i := s.c; i < s.cols; i++ {
					s.cells[s.r][i] = ' '
				}
			default:
				t.Fatalf("CSI %s not known to this screen", m[0])
			}
		case data[0] == '\r':
			s.c, data = 0, data[1:]
		case data[0] == '\n':
			s.lineFeed()
			data = data[1:]
		default:
			ch, n := utf8.DecodeRuneInString(data)
			data = data[n:]
			if s.c == s.cols {
				s.c = 0
				s.lineFeed()
			}
			s.cells[s.r][s.c] = ch
			s.c++
		}
	}
}

// lines is everything shown: the history, then the screen's rows.
func (s *screen) lines() []string {
	out := append([]string(nil), s.history...)
	for _, row := range s.cells {
		out = append(out, strings.TrimRight(string(row), " "))
	}
	return out
}

// TestStatusSharedTerminal runs the demo with its output and vramprof's
// status on one terminal, as `make demo` does, and looks at the screen as
// a person would: each line the command printed is whole, on a row of its
// own (before: glued after the status text, "...lost 0  1 processepoch
// 1/4"), the status sat on the bottom row while it ran, and after the run
// the summary follows the command's output with no status left behind.
func TestStatusSharedTerminal(t *testing.T) {
	probetest.RequirePrivilege(t)
	t.Parallel()
	const rows, cols = 24, 120
	demo := probetest.Bin(t, "demo")
	out, code := runOnTTYSize(t, rows, cols, true, nil, "run", "-o", "out", "--", demo)
	require.Equal(t, 0, code, "terminal:\n%q", out)
	assert.Contains(t, out, "\x1b[1;23r", "a scroll region above the bottom row")

	// Replay the stream, looking at the screen after each status redraw.
	sc := newScreen(rows, cols)
	redraw := regexp.MustCompile(`\x1b7\x1b\[24;1H\x1b\[K[^\x1b]+\x1b8`) // not the final clear
	var shown int
	pos := 0
	for _, loc := range redraw.FindAllStringIndex(out, -1) {
		sc.write(t, out[pos:loc[1]])
		pos = loc[1]
		shown++
		ls := sc.lines()
		assert.Regexp(t, statusLineRE, ls[len(ls)-1], "the status on the bottom row")
		for _, l := range ls[:len(ls)-1] {
			assert.NotRegexp(t, `events \(`, l, "no status above the bottom row")
		}
	}
	assert.GreaterOrEqual(t, shown, 2, "the status was drawn while the demo ran")
	sc.write(t, out[pos:])

	ls := sc.lines()
	epoch := regexp.MustCompile(`^epoch (\d)/4  step +\d+  loss \d+\.\d{4}  vram \d+\.\d\d GiB used of \d+\.\d\d GiB$`)
	var epochs []int
	summary := -1
	for i, l := range ls {
		assert.False(t, strings.Contains(l, "events (") && strings.Contains(l, "epoch"), "status glued to the command's output: %q", l)
		assert.NotRegexp(t, statusLineRE, l, "no status left after the run")
		if m := epoch.FindStringSubmatch(l); m != nil {
			epochs = append(epochs, i)
			assert.Equal(t, strconv.Itoa(len(epochs)), m[1], "epochs in order")
		} else {
			assert.NotContains(t, l, "epoch", "a line of the demo cut or glued: %q", l)
		}
		if strings.HasPrefix(l, "vramprof: "+demo+" (run, ") {
			summary = i
		}
	}
	require.Len(t, epochs, 4, "the demo's four lines, whole; screen:\n%s", strings.Join(ls, "\n"))
	for i := 1; i < len(epochs); i++ {
		assert.Equal(t, epochs[i-1]+1, epochs[i], "one line after another, nothing between")
	}
	assert.Equal(t, epochs[3]+1, summary, "the summary right after the command's output; screen:\n%s", strings.Join(ls, "\n"))
	assert.Equal(t, "open the profile: go tool pprof -http=: "+fmt.Sprintf("%s/profile.pb.gz", "out"), lastNonEmpty(ls))
}

func lastNonEmpty(ls []string) string {
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i] != "" {
			return ls[i]
		}
	}
	return ""
}
