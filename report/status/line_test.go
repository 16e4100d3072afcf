//go:build linux

package status

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/vramprof/vramprof/probes/event"
)

// mustLive returns a Live that has seen one 10 MiB allocation.
func mustLive(tb testing.TB) *Live {
	tb.Helper()
	l := NewLive()
	l.Observe(&event.Event{Kind: event.KindAlloc, PID: 1, Addr: 0x1000, Size: 10 * stMiB, Layer: event.LayerSegment})
	live, peak := l.Bytes()
	require.Equal(tb, uint64(10*stMiB), live)
	require.Equal(tb, uint64(10*stMiB), peak)
	return l
}

func fixedCounts() Counts { return Counts{Events: 100, Lost: 2, Procs: 1} }

// TestLinePlain: off a terminal, a whole line every interval, each with
// the prefix and a line ending, and nothing more at Stop.
func TestLinePlain(t *testing.T) {
	var buf lockedBuffer
	s := Start(Options{Out: &buf, Every: 10 * time.Millisecond, Start: time.Now(), Counts: fixedCounts, Live: mustLive(t)})
	require.Eventually(t, func() bool { return strings.Count(buf.String(), "\n") >= 2 }, 10*time.Second, time.Millisecond,
		"two lines, one every 10ms")
	s.Stop()
	s.Stop() // twice: a no-op
	(*Line)(nil).Stop()

	out := buf.String()
	assert.NotContains(t, out, "\r")
	assert.NotContains(t, out, "\x1b")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.GreaterOrEqual(t, len(lines), 2, "a line every 10ms: %q", out)
	for i, l := range lines {
		// 10 MiB live and peak, from the one allocation; events, lost and
		// processes from the counters.
		assert.Regexp(t, `^vramprof: \d+\.\ds  100 events \(\d+(\.\dk)?/s\)  live 10\.00 MiB  peak 10\.00 MiB  lost 2  1 process$`, l)
		if i > 0 {
			assert.Contains(t, l, "(0/s)", "no new events after the first interval: %q", l)
		}
	}
}

// TestLineBadEnv: a bad EveryEnv is said once, and PlainEvery kept.
func TestLineBadEnv(t *testing.T) {
	t.Setenv(EveryEnv, "fast")
	var buf bytes.Buffer
	s := Start(Options{Out: &buf, Start: time.Now(), Counts: fixedCounts, Live: NewLive()})
	assert.Equal(t, PlainEvery, s.every)
	s.Stop()
	assert.Equal(t, `vramprof: VRAMPROF_STATUS_EVERY="fast" is not a positive duration (like 10s); using 10s`+"\n", buf.String())
}

// openPTY opens a pseudo-terminal of rows x cols and returns its master and
// slave ends, closed at cleanup.
func openPTY(t *testing.T, rows, cols uint16) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no pseudo-terminal (/dev/ptmx): %v", err)
		}
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0), "unlockpt")
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	require.NoError(t, err, "ptsname")
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}))
	// Raw output: what the line writes reaches the master unchanged.
	tio, err := unix.IoctlGetTermios(int(s.Fd()), unix.TCGETS)
	require.NoError(t, err)
	tio.Oflag &^= unix.OPOST
	require.NoError(t, unix.IoctlSetTermios(int(s.Fd()), unix.TCSETS, tio))
	return m, s
}

// drawOnTTY runs a line on a pseudo-terminal of rows x cols until the
// terminal has received a whole status line, stops it and returns what the
// terminal received.
func drawOnTTY(t *testing.T, rows, cols uint16, shared bool) string {
	t.Helper()
	master, slave := openPTY(t, rows, cols)
	var got lockedBuffer
	readErr := make(chan error, 1)
	go func() { // the terminal's side, read as it comes
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			got.Write(buf[:n])
			if err != nil {
				readErr <- err
				return
			}
		}
	}()
	s := Start(Options{Out: slave, Shared: shared, Start: time.Now(), Counts: fixedCounts, Live: mustLive(t)})
	require.Equal(t, TTYEvery, s.every, "a terminal redraws at its own pace")
	require.Eventually(t, func() bool { return strings.Contains(got.String(), " events") }, 10*time.Second, time.Millisecond,
		"a status line drawn")
	s.Stop()
	require.NoError(t, slave.Close())
	require.ErrorIs(t, <-readErr, syscall.EIO, "the terminal's read ends when its last writer closes")
	return got.String()
}

// lockedBuffer is a bytes.Buffer that a line writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLineTTY: on a terminal of its own the line is redrawn in place and
// cleared at Stop; sharing the terminal, it owns the bottom row below a
// scroll region, reset at Stop. A narrow terminal gets the line cut to its
// width less one.
func TestLineTTY(t *testing.T) {
	t.Parallel()
	t.Run("own", func(t *testing.T) {
		t.Parallel()
		out := drawOnTTY(t, 24, 200, false)
		require.True(t, strings.HasPrefix(out, "\r\x1b[K"), "%q", out)
		require.True(t, strings.HasSuffix(out, "\r\x1b[K"), "cleared at Stop: %q", out)
		line := strings.TrimSuffix(strings.TrimPrefix(out, "\r\x1b[K"), "\r\x1b[K")
		assert.NotContains(t, line, "\x1b")
		assert.True(t, strings.HasSuffix(line, "live 10.00 MiB  peak 10.00 MiB  lost 2  1 process"), "%q", line)
	})
	t.Run("shared", func(t *testing.T) {
		t.Parallel()
		out := drawOnTTY(t, 24, 200, true)
		const setup, reset = "\x1bD\x1b7\x1b[1;23r\x1b8\x1b[1A", "\x1b7\x1b[r\x1b8\x1b7\x1b[24;1H\x1b[K\x1b8"
		require.True(t, strings.HasPrefix(out, setup+"\x1b7\x1b[24;1H\x1b[K"), "the region (rows 1-23), then the bottom row: %q", out)
		require.True(t, strings.HasSuffix(out, "\x1b8"+reset), "the region reset and the row cleared at Stop: %q", out)
		line := strings.TrimSuffix(strings.TrimPrefix(out, setup+"\x1b7\x1b[24;1H\x1b[K"), "\x1b8"+reset)
		assert.True(t, strings.HasSuffix(line, "live 10.00 MiB  peak 10.00 MiB  lost 2  1 process"), "%q", line)
	})
	t.Run("narrow", func(t *testing.T) {
		t.Parallel()
		out := drawOnTTY(t, 24, 40, false)
		line := strings.TrimSuffix(strings.TrimPrefix(out, "\r\x1b[K"), "\r\x1b[K")
		assert.Len(t, line, 39, "cut to the width less one: %q", line)
	})
}
