//go:build linux

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/vramprof/vramprof/probes/probetest"
	"github.com/vramprof/vramprof/report/status"
)

// statusLine matches one formatted status line.
var statusLineRE = regexp.MustCompile(`^(\d+\.\ds|\d+m\d\ds|\d+h\d\dm\d\ds)  (\d+) events \((\d+|\d+\.\dk|\d+\.\dM)/s\)  ` +
	`live (\d+ B|\d+\.\d\d [KMGTPE]iB)  peak (\d+ B|\d+\.\d\d [KMGTPE]iB)  lost (\d+)  (\d+) process(es)?` +
	`(  NVML used (\d+ B|\d+\.\d\d [KMGTPE]iB))?$`)

// TestStatusPlainLines runs a 2 s scenario with stderr not a terminal and
// the plain-line interval set small: status lines appear among the
// command's output, each whole on its own line, and the summary follows.
func TestStatusPlainLines(t *testing.T) {
	probetest.RequirePrivilege(t)
	t.Parallel()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "out")
	r := vramprof(t, execOpts{env: []string{status.EveryEnv + "=100ms"}, dir: tmp}, "run", "-o", dir, "--", probetest.Bin(t, "demo"))
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	assert.NotContains(t, r.stderr, "\r", "no carriage returns when not a terminal")
	assert.NotContains(t, r.stderr, "\x1b", "no escape sequences when not a terminal")

	var status []string
	for _, l := range r.stderrLines() {
		if s, ok := strings.CutPrefix(l, "vramprof: "); ok && statusLineRE.MatchString(s) {
			status = append(status, s)
		}
	}
	require.GreaterOrEqual(t, len(status), 5, "status lines every 100ms of a 2 s run; stderr:\n%s", r.stderr)
	last := statusLineRE.FindStringSubmatch(status[len(status)-1])
	n, err := strconv.ParseUint(last[2], 10, 64)
	require.NoError(t, err)
	assert.Positive(t, n, "events counted")
	assert.Equal(t, "1", last[7], "processes traced")
	assert.Equal(t, "0", last[6], "lost")
	assert.NotEqual(t, "0 B", last[5], "peak seen")

	// The summary comes after the last status line, and its peak is the
	// one the status line converged to (both in 7.52 GiB form).
	rep := mustReadReport(t, filepath.Join(dir, "report.json"))
	peak := val(t, "peak_bytes", rep.Totals.PeakBytes)
	assert.Equal(t, formatStatusBytes(peak), last[5], "the status line's peak is the report's")
	iLast := strings.LastIndex(r.stderr, status[len(status)-1])
	iSummary := strings.Index(r.stderr, "peak:")
	assert.Greater(t, iSummary, iLast, "summary after the last status line")
}

// formatStatusBytes is how the status line shows n bytes.
func formatStatusBytes(n uint64) string {
	m := statusLineRE.FindStringSubmatch(status.Format(status.Figures{Peak: n}))
	return m[5]
}

// TestStatusBadInterval: a bad override is said once, and the default kept.
func TestStatusBadInterval(t *testing.T) {
	probetest.RequirePrivilege(t)
	t.Parallel()
	tmp := t.TempDir()
	r := vramprof(t, execOpts{env: []string{status.EveryEnv + "=fast"}, dir: tmp}, "run", "-o", filepath.Join(tmp, "out"), "--", probetest.Bin(t, "steady"))
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	assert.Equal(t, 1, strings.Count(r.stderr, `VRAMPROF_STATUS_EVERY="fast" is not a positive duration (like 10s); using 10s`), r.stderr)
}

// TestQuiet: -q and --quiet print nothing on success (no status, no
// summary, no banner), and still write every output.
func TestQuiet(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, flag := range []string{"-q", "--quiet"} {
		t.Run("run"+flag, func(t *testing.T) {
			t.Parallel()
			tmp := t.TempDir()
			dir := filepath.Join(tmp, "out")
			r := vramprof(t, execOpts{env: []string{status.EveryEnv + "=50ms"}, dir: tmp}, "run", flag, "-o", dir, "--", probetest.Bin(t, "steady"))
			require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
			assert.Empty(t, r.stderr)
			assert.Empty(t, r.stdout, "steady prints nothing itself")
			assertDirHolds(t, dir, outputFiles)
		})
	}
	t.Run("run -q keeps the command's exit code and errors", func(t *testing.T) {
		t.Parallel()
		tmp := t.TempDir()
		r := vramprof(t, execOpts{env: []string{"FAKECUDA_CAPACITY=1073741824"}, dir: tmp},
			"run", "-q", "-o", filepath.Join(tmp, "out"), "--", probetest.Bin(t, "oom"))
		assert.Equal(t, 1, r.code, "oom exits 1")
		assert.NotContains(t, r.stderr, "vramprof", "only the command's own error message")
		assert.Contains(t, r.stderr, "CUDA out of memory")
		r = vramprof(t, execOpts{dir: tmp}, "run", "-q", "-o", filepath.Join(tmp, "out2"), "--", "/nonexistent/cmd")
		assert.Equal(t, 127, r.code, "a command that does not exist: 127, as a shell gives")
		assert.Contains(t, r.stderr, "vramprof: ", "errors are still printed")
	})
	t.Run("attach-q", func(t *testing.T) {
		t.Parallel()
		lr := startLongrun(t)
		tmp := t.TempDir()
		dir := filepath.Join(tmp, "out")
		r := vramprof(t, execOpts{env: []string{status.EveryEnv + "=50ms"}, dir: tmp},
			"attach", "-q", "-p", strconv.Itoa(lr.pid), "-o", dir, "--duration", "500ms")
		require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
		assert.Empty(t, r.stderr)
		assertDirHolds(t, dir, outputFiles)
	})
}

// TestStatusAttachPlain: attach shows the same plain lines, counting the
// process it traces.
func TestStatusAttachPlain(t *testing.T) {
	probetest.RequirePrivilege(t)
	t.Parallel()
	lr := startLongrun(t)
	tmp := t.TempDir()
	r := vramprof(t, execOpts{env: []string{status.EveryEnv + "=100ms"}, dir: tmp},
		"attach", "-p", strconv.Itoa(lr.pid), "-o", filepath.Join(tmp, "out"), "--duration", "600ms")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	var n int
	for _, l := range r.stderrLines() {
		if s, ok := strings.CutPrefix(l, "vramprof: "); ok {
			if m := statusLineRE.FindStringSubmatch(s); m != nil {
				n++
				assert.Equal(t, "1", m[7], "one process traced: %q", s)
				assert.Equal(t, "live 0 B", "live "+m[4], "memory allocated before attach is not live in the status: %q", s)
			}
		}
	}
	assert.GreaterOrEqual(t, n, 3, "status lines; stderr:\n%s", r.stderr)
}

// openPTY opens a pseudo-terminal of rows x cols and returns its master and
// slave ends, closed at cleanup.
func openPTY(t *testing.T, rows, cols uint16) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0), "unlockpt")
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	require.NoError(t, err, "ptsname")
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}))
	return m, s
}

// runOnTTY runs the binary with its stderr on a fresh pseudo-terminal of
// 24 rows and cols columns and returns what the terminal received and the
// exit code.
func runOnTTY(t *testing.T, cols uint16, env []string, args ...string) (string, int) {
	t.Helper()
	return runOnTTYSize(t, 24, cols, false, env, args...)
}

// runOnTTYSize is runOnTTY on a terminal of rows x cols; with both, the
// command's stdout goes to the terminal too (a person running it there).
func runOnTTYSize(t *testing.T, rows, cols uint16, both bool, env []string, args ...string) (string, int) {
	t.Helper()
	master, slave := openPTY(t, rows, cols)
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = t.TempDir()
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, slave
	if both {
		cmd.Stdout = slave
	}
	var (
		got  bytes.Buffer
		wg   sync.WaitGroup
		rerr error
	)
	require.NoError(t, cmd.Start())
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			got.Write(buf[:n])
			if err != nil {
				rerr = err
				return
			}
		}
	}()
	code := 0
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("vramprof on a terminal did not finish in a minute")
	}
	// With every writer gone (the child, and our copy), the master reads
	// EIO: everything written has been read.
	require.NoError(t, slave.Close())
	wg.Wait()
	require.ErrorIs(t, rerr, syscall.EIO)
	return got.String(), code
}

// TestStatusTTY runs a 2 s scenario with stderr on a pseudo-terminal. In
// `run` the command shares the terminal, so the status owns the bottom row:
// a scroll region is set up above it (DECSTBM), and each redraw about twice
// a second saves the cursor, writes the bottom row (cut to the terminal's
// width) and restores the cursor; at the end the region is reset and the
// row cleared before the summary. A terminal too short for a region (2
// rows) gets the line redrawn in place (carriage return, clear to end of
// line).
func TestStatusTTY(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tc := range []struct {
		name       string
		rows, cols uint16
	}{{"wide", 24, 200}, {"narrow", 24, 40}, {"short", 2, 200}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The environment's interval is for plain lines only.
			out, code := runOnTTYSize(t, tc.rows, tc.cols, false, []string{status.EveryEnv + "=10ms"}, "run", "-o", "out", "--", probetest.Bin(t, "demo"))
			require.Equal(t, 0, code, "terminal:\n%q", out)
			var draws []string
			var rest string
			if tc.rows < status.RegionRows {
				const redraw = "\r\x1b[K"
				parts := strings.Split(out, redraw)
				require.Greater(t, len(parts), 3, "several redraws; terminal:\n%q", out)
				assert.Empty(t, parts[0], "nothing before the first status line")
				draws, rest = parts[1:len(parts)-1], parts[len(parts)-1]
				for _, d := range draws {
					assert.NotContains(t, d, "\n", "a redraw never ends the line: %q", d)
				}
			} else {
				setup := "\x1bD\x1b7\x1b[1;23r\x1b8\x1b[1A"
				require.True(t, strings.HasPrefix(out, setup), "the region first (rows 1-23): %q", out)
				body, after, ok := strings.Cut(out[len(setup):], "\x1b7\x1b[r\x1b8\x1b7\x1b[24;1H\x1b[K\x1b8")
				require.True(t, ok, "the region reset and the row cleared at the end: %q", out)
				m := regexp.MustCompile("\x1b7\x1b\\[24;1H\x1b\\[K([^\x1b]*)\x1b8").FindAllStringSubmatch(body, -1)
				for _, d := range m {
					draws = append(draws, d[1])
				}
				assert.Equal(t, strings.Repeat("x", len(m)), regexp.MustCompile("\x1b7\x1b\\[24;1H\x1b\\[K[^\x1b]*\x1b8").ReplaceAllString(body, "x"),
					"nothing but redraws of the bottom row (the command's output is not on this terminal)")
				rest = after
			}
			assert.InDelta(t, 4, len(draws), 2, "a 2 s run redraws about every 500ms: %q", draws)
			for _, d := range draws {
				assert.Less(t, len(d), int(tc.cols), "fits the terminal: %q", d)
				if tc.cols == 200 {
					assert.Regexp(t, statusLineRE, d)
				} else {
					assert.Len(t, d, int(tc.cols)-1, "cut to the width: %q", d)
					assert.Regexp(t, `^\d+\.\ds  \d+ events \(`, d)
				}
			}
			// After the clear: the summary starts on a clean line.
			assert.True(t, strings.HasPrefix(rest, "vramprof: "+probetest.Bin(t, "demo")+" (run, "),
				"summary after the clear: %q", rest)
		})
	}
}

// TestStatusTTYQuiet: -q draws nothing on a terminal either.
func TestStatusTTYQuiet(t *testing.T) {
	probetest.RequirePrivilege(t)
	t.Parallel()
	out, code := runOnTTY(t, 80, nil, "run", "-q", "-o", "out", "--", probetest.Bin(t, "demo"))
	require.Equal(t, 0, code, "terminal:\n%q", out)
	assert.Empty(t, out)
}
