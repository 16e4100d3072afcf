//go:build linux

package probes

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
)

// startManyLibs starts the many_libs target (400 mapped libraries plus the
// CUDA runtime, calling cudaMalloc every millisecond) and returns its PID.
func startManyLibs(tb testing.TB) int {
	tb.Helper()
	bin := probetest.Bin(tb, "many_libs")
	cmd := exec.Command(bin, filepath.Join(filepath.Dir(probetest.Lib(tb, "libcudart.so.12")), "many"))
	out, err := cmd.StdoutPipe()
	require.NoError(tb, err)
	require.NoError(tb, cmd.Start())
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(tb, err)
	f := strings.Fields(line)
	require.Len(tb, f, 3, "ready line %q", line)
	libs, _ := strconv.Atoi(f[2])
	require.Equal(tb, 400, libs)
	return cmd.Process.Pid
}

// BenchmarkAttach measures how long `vramprof attach` takes from nothing to
// live probes on a process with 400+ mapped libraries: loading the BPF
// objects, reading the maps, screening every mapped file and attaching to
// the CUDA runtime. Each iteration then checks that events really flow.
func BenchmarkAttach(b *testing.B) {
	probetest.RequirePrivilege(b)
	pid := startManyLibs(b)
	var total time.Duration
	for b.Loop() {
		w, err := event.NewWriter(io.Discard, &event.Header{Mode: "attach"})
		require.NoError(b, err)
		start := time.Now()
		s, err := NewSession(Options{Sink: traceSink{w, new(int)}})
		require.NoError(b, err)
		require.NoError(b, s.Attach(pid, false))
		total += time.Since(start)

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		require.NoError(b, s.Run(ctx))
		cancel()
		require.Positive(b, s.Stats().Events.Load(), "no events after attach")
		require.NoError(b, s.Close())
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/attach")
}
