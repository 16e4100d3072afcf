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

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
)

const (
	stGiB = 1 << 30
	stMiB = 1 << 20
)

func TestFormatStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    statusFigures
		want string
	}{
		{
			name: "nothing yet",
			want: "0.0s  0 events (0/s)  live 0 B  peak 0 B  lost 0  0 processes",
		},
		{
			name: "one process",
			f:    statusFigures{elapsed: 12500 * time.Millisecond, events: 8160, rate: 650, live: 1536 * stMiB, peak: 2 * stGiB, procs: 1},
			want: "12.5s  8160 events (650/s)  live 1.50 GiB  peak 2.00 GiB  lost 0  1 process",
		},
		{
			name: "nvml sampled",
			f: statusFigures{elapsed: 59960 * time.Millisecond, events: 10, rate: 999.4, live: 512, peak: 4096,
				procs: 1, nvmlUsed: 3*stGiB + 100*stMiB, nvmlSeen: true},
			want: "59.9s  10 events (999/s)  live 512 B  peak 4.00 KiB  lost 0  1 process  NVML used 3.10 GiB",
		},
		{
			name: "nvml sampled, nothing used",
			f:    statusFigures{elapsed: time.Second, procs: 1, nvmlSeen: true},
			want: "1.0s  0 events (0/s)  live 0 B  peak 0 B  lost 0  1 process  NVML used 0 B",
		},
		{
			name: "minutes",
			f:    statusFigures{elapsed: 2*time.Minute + 5900*time.Millisecond, events: 1000, rate: 999.6, procs: 2},
			want: "2m05s  1000 events (1.0k/s)  live 0 B  peak 0 B  lost 0  2 processes",
		},
		{
			name: "hours, losing events",
			f: statusFigures{elapsed: time.Hour + 2*time.Minute + 5*time.Second, events: 123456789, rate: 12345.6,
				live: 80 * stGiB, peak: 81 * stGiB, lost: 17, procs: 3},
			want: "1h02m05s  123456789 events (12.3k/s)  live 80.00 GiB  peak 81.00 GiB  lost 17  3 processes",
		},
		{
			name: "millions a second",
			f:    statusFigures{elapsed: 25 * time.Hour, events: 1 << 40, rate: 1.5e6, procs: 1},
			want: "25h00m00s  1099511627776 events (1.5M/s)  live 0 B  peak 0 B  lost 0  1 process",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, formatStatus(tc.f))
		})
	}
}

// TestLiveBytes feeds records to the status line's tracker and checks live
// and peak after each, by the analysis's rules for device totals.
func TestLiveBytes(t *testing.T) {
	ev := func(kind event.Kind, pid uint32, addr, size uint64) *event.Event {
		return &event.Event{Kind: kind, PID: pid, Addr: addr, Size: size, Layer: event.LayerSegment}
	}
	nested := ev(event.KindAlloc, 1, 0x9000, 7*stMiB)
	nested.Flags = event.FlagNested
	failed := ev(event.KindAlloc, 1, 0, 5*stMiB)
	failed.Ret = 2
	block := ev(event.KindAlloc, 1, 0xa000, 9*stMiB)
	block.Layer = event.LayerBlock
	unknownLayer := ev(event.KindAlloc, 1, 0xb000, 3*stMiB)
	unknownLayer.Layer = event.LayerUnknown

	l := newLiveBytes()
	for _, step := range []struct {
		name       string
		rec        event.Record
		live, peak uint64
	}{
		{"alloc", ev(event.KindAlloc, 1, 0x1000, 10*stMiB), 10 * stMiB, 10 * stMiB},
		{"nested driver call: counted by its outer call", nested, 10 * stMiB, 10 * stMiB},
		{"failed alloc: never live", failed, 10 * stMiB, 10 * stMiB},
		{"block layer: inside segments already counted", block, 10 * stMiB, 10 * stMiB},
		{"same address, other process", ev(event.KindAlloc, 2, 0x1000, 20*stMiB), 30 * stMiB, 30 * stMiB},
		{"unset layer is a segment", unknownLayer, 33 * stMiB, 33 * stMiB},
		{"physical handle equal to a pointer", ev(event.KindCreate, 1, 0x1000, 2*stMiB), 35 * stMiB, 35 * stMiB},
		{"free", ev(event.KindFree, 2, 0x1000, 0), 15 * stMiB, 35 * stMiB},
		{"free of memory from before tracing", ev(event.KindFree, 1, 0x5000, 0), 15 * stMiB, 35 * stMiB},
		{"missed free: the old allocation goes", ev(event.KindAlloc, 1, 0x1000, 4*stMiB), 9 * stMiB, 35 * stMiB},
		{"release", ev(event.KindRelease, 1, 0x1000, 0), 7 * stMiB, 35 * stMiB},
		{"pinned host memory is not device memory", ev(event.KindHostAlloc, 1, 0x7000, 64*stMiB), 7 * stMiB, 35 * stMiB},
		{"free the rest", ev(event.KindFree, 1, 0x1000, 0), 3 * stMiB, 35 * stMiB},
		{"double free", ev(event.KindFree, 1, 0x1000, 0), 3 * stMiB, 35 * stMiB},
	} {
		l.observe(step.rec)
		assert.Equal(t, step.live, l.live.Load(), "live after %s", step.name)
		assert.Equal(t, step.peak, l.peak.Load(), "peak after %s", step.name)
	}

	assert.False(t, l.nvmlSeen.Load(), "no NVML sample yet")
	l.observe(&event.Sample{Device: 0, UsedBytes: 3 * stGiB})
	l.observe(&event.Sample{Device: 1, UsedBytes: 1 * stGiB})
	l.observe(&event.Sample{Device: 0, UsedBytes: 2 * stGiB})
	assert.True(t, l.nvmlSeen.Load())
	assert.Equal(t, uint64(3*stGiB), l.nvmlUsed.Load(), "latest sample of each device, summed")
}

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
	r := vramprof(t, execOpts{env: []string{statusEveryEnv + "=100ms"}, dir: tmp}, "run", "-o", dir, "--", probetest.Bin(t, "demo"))
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
	m := statusLineRE.FindStringSubmatch(formatStatus(statusFigures{peak: n}))
	return m[5]
}

// TestStatusBadInterval: a bad override is said once, and the default kept.
func TestStatusBadInterval(t *testing.T) {
	probetest.RequirePrivilege(t)
	t.Parallel()
	tmp := t.TempDir()
	r := vramprof(t, execOpts{env: []string{statusEveryEnv + "=fast"}, dir: tmp}, "run", "-o", filepath.Join(tmp, "out"), "--", probetest.Bin(t, "steady"))
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
			r := vramprof(t, execOpts{env: []string{statusEveryEnv + "=50ms"}, dir: tmp}, "run", flag, "-o", dir, "--", probetest.Bin(t, "steady"))
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
		assert.Equal(t, exitToolError, r.code)
		assert.Contains(t, r.stderr, "vramprof: ", "errors are still printed")
	})
	t.Run("attach-q", func(t *testing.T) {
		t.Parallel()
		lr := startLongrun(t)
		tmp := t.TempDir()
		dir := filepath.Join(tmp, "out")
		r := vramprof(t, execOpts{env: []string{statusEveryEnv + "=50ms"}, dir: tmp},
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
	r := vramprof(t, execOpts{env: []string{statusEveryEnv + "=100ms"}, dir: tmp},
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
			out, code := runOnTTYSize(t, tc.rows, tc.cols, false, []string{statusEveryEnv + "=10ms"}, "run", "-o", "out", "--", probetest.Bin(t, "demo"))
			require.Equal(t, 0, code, "terminal:\n%q", out)
			var draws []string
			var rest string
			if tc.rows < statusRegionRows {
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

// TestLiveBytesAgreesWithAnalysis replays a VMM stream, as PyTorch's
// expandable segments make one, record by record: after each, the status
// line's live and peak equal the analysis's device totals for the stream
// so far. The physical memory released before its unmap stays live until
// the unmap, in both. The expected levels are the arithmetic of the calls.
func TestLiveBytesAgreesWithAnalysis(t *testing.T) {
	const h1, h2, va = 0xa1, 0xa2, 0x7f0000000000
	call := func(kind event.Kind, api event.API, addr, size uint64) *event.Event {
		return &event.Event{Kind: kind, API: api, PID: 10, Addr: addr, Size: size, Layer: event.LayerSegment}
	}
	mapOf := func(addr, size, handle uint64) *event.Event {
		e := call(event.KindMap, event.APICuMemMap, addr, size)
		e.Stream = handle
		return e
	}
	recs := []struct {
		name       string
		rec        event.Record
		live, peak uint64
	}{
		{"process", &event.Process{PID: 10, Command: []string{"train"}}, 0, 0},
		{"reserve: address space only", call(event.KindReserve, event.APICuMemAddressReserve, va, 64*stMiB), 0, 0},
		{"create h1", call(event.KindCreate, event.APICuMemCreate, h1, 20*stMiB), 20 * stMiB, 20 * stMiB},
		{"map h1", mapOf(va, 20*stMiB, h1), 20 * stMiB, 20 * stMiB},
		{"create h2", call(event.KindCreate, event.APICuMemCreate, h2, 2*stMiB), 22 * stMiB, 22 * stMiB},
		{"map h2", mapOf(va+20*stMiB, 2*stMiB, h2), 22 * stMiB, 22 * stMiB},
		{"cudaMalloc", call(event.KindAlloc, event.APICudaMalloc, 0x1000, 8*stMiB), 30 * stMiB, 30 * stMiB},
		{"release h1 while mapped: still live", call(event.KindRelease, event.APICuMemRelease, h1, 0), 30 * stMiB, 30 * stMiB},
		{"release h2 while mapped: still live", call(event.KindRelease, event.APICuMemRelease, h2, 0), 30 * stMiB, 30 * stMiB},
		{"unmap h1's range: h1 freed", call(event.KindUnmap, event.APICuMemUnmap, va, 20*stMiB), 10 * stMiB, 30 * stMiB},
		{"unmap h2's range: h2 freed", call(event.KindUnmap, event.APICuMemUnmap, va+20*stMiB, 2*stMiB), 8 * stMiB, 30 * stMiB},
	}
	l := newLiveBytes()
	for i, step := range recs {
		if e, ok := step.rec.(*event.Event); ok {
			e.Time = uint64(i+1) * 1000
		}
		l.observe(step.rec)
		a := analysis.New(analysis.Options{})
		require.NoError(t, a.Add(&event.Header{Version: 1, PID: 10, Start: 1}))
		for _, r := range recs[:i+1] {
			require.NoError(t, a.Add(r.rec))
		}
		res := a.Finish()
		assert.Equal(t, step.live, l.live.Load(), "status live after %s", step.name)
		assert.Equal(t, step.peak, l.peak.Load(), "status peak after %s", step.name)
		assert.Equal(t, step.live, res.Totals.LiveBytesAtEnd, "analysis live after %s", step.name)
		assert.Equal(t, step.peak, res.Totals.PeakBytes, "analysis peak after %s", step.name)
	}
}
