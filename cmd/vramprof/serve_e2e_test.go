//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
	"github.com/vramprof/vramprof/report/exporter"
)

// TestServe runs `vramprof serve` on a loopback port while longrun runs its
// traced phase, then reads longrun's figures three ways: /metrics parsed
// with expfmt, `go tool pprof` fetching the inuse profile over HTTP, and a
// real Prometheus server scraping serve and answering /api/v1/query. Each
// must equal longrun's truth (written by the scenario, not by vramprof).
// serve traces every CUDA process on the host, other tests' too: only
// longrun's PID is looked at. One serve run for all three, kept short.
func TestServe(t *testing.T) {
	probetest.RequirePrivilege(t)
	// Long enough for a slow Prometheus start on a loaded machine: the
	// figures are asked of it while longrun still runs.
	lrCmd := exec.Command(probetest.Bin(t, "longrun"))
	lrCmd.Env = append(os.Environ(), "LONGRUN_MAX_SECONDS=120")
	lr := startLongrunCmd(t, lrCmd)

	addr := freeLoopback(t)
	stderr, stop := startDaemon(t, nil, "vramprof: serving http://"+addr, "serve", "--listen", addr, "--per-process")
	require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1))
	lr.expect(t, "done")
	truth := probetest.MustReadTruth(t, lr.truth)
	want := truth.Totals
	base := "http://" + addr
	pid := strconv.Itoa(lr.pid)

	// The last events reach serve up to a reorder window after "done", and
	// not necessarily together: the last call is the unknown free of
	// drop_preloaded, so wait for it as well as for the frees.
	var fams map[string]*dto.MetricFamily
	deadline := time.Now().Add(15 * time.Second)
	for {
		fams = scrapeMetrics(t, base)
		frees, _ := metricValue(fams, exporter.MetricFrees, pid)
		unknown, _ := metricValue(fams, exporter.MetricUnknownFrees, pid)
		if frees == float64(want.Frees) && unknown == float64(want.UnknownFrees) {
			break
		}
		require.True(t, time.Now().Before(deadline), "pid %d's frees and unknown frees never reached %d and %d; stderr:\n%s", lr.pid, want.Frees, want.UnknownFrees, stderr.String())
		time.Sleep(100 * time.Millisecond)
	}

	t.Run("metrics", func(t *testing.T) {
		for _, tc := range []struct {
			metric string
			want   uint64
		}{
			{exporter.MetricLiveBytes, want.LiveBytesAtEnd}, // summed over devices
			{exporter.MetricProcessPeakBytes, want.PeakBytes},
			{exporter.MetricAllocations, want.Allocations},
			{exporter.MetricFrees, want.Frees},
			{exporter.MetricAllocatedBytes, want.AllocatedBytes},
			{exporter.MetricFailedAllocations, want.FailedAllocations},
			{exporter.MetricUnknownFrees, want.UnknownFrees},
			{exporter.MetricProcessExited, 0},
		} {
			v, ok := metricValue(fams, tc.metric, pid)
			if assert.True(t, ok, "%s{pid=%q} missing", tc.metric, pid) {
				assert.Equal(t, float64(tc.want), v, "%s{pid=%q}", tc.metric, pid)
			}
		}
		v, ok := metricValue(fams, exporter.MetricLiveBytes, pid, "command", "longrun")
		assert.True(t, ok, "label command=longrun")
		assert.Equal(t, float64(want.LiveBytesAtEnd), v)
		t.Logf("pid %d: live %d B, peak %d B, %d allocations, %d frees (truth)", lr.pid,
			want.LiveBytesAtEnd, want.PeakBytes, want.Allocations, want.Frees)
	})

	t.Run("pprof", func(t *testing.T) {
		for _, tc := range []struct {
			path, sample string
			want         uint64
		}{
			{"/debug/pprof/inuse?pid=" + pid, "inuse_space", want.LiveBytesAtEnd},
			{"/pprof/peak?pid=" + pid, "peak_space", want.PeakBytes},
			{"/debug/pprof/alloc?pid=" + pid, "alloc_space", want.AllocatedBytes},
		} {
			got := pprofTotal(t, base+tc.path, tc.sample)
			assert.Equal(t, tc.want, got, "go tool pprof %s%s, %s", base, tc.path, tc.sample)
		}
	})

	t.Run("prometheus", func(t *testing.T) {
		prom := startPrometheus(t, addr)
		for _, tc := range []struct {
			query string
			want  uint64
		}{
			{fmt.Sprintf(`sum(%s{pid=%q})`, exporter.MetricLiveBytes, pid), want.LiveBytesAtEnd},
			{fmt.Sprintf(`%s{pid=%q}`, exporter.MetricProcessPeakBytes, pid), want.PeakBytes},
			{fmt.Sprintf(`%s{pid=%q}`, exporter.MetricAllocations, pid), want.Allocations},
		} {
			got := promQuery(t, prom, tc.query)
			assert.Equal(t, float64(tc.want), got, "%s", tc.query)
		}
	})

	t.Run("exited", func(t *testing.T) {
		// longrun exits 0 on SIGTERM; serve notices within its sweep
		// and keeps the final figures for the grace period.
		require.NoError(t, lr.cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, <-lr.exit)
		deadline := time.Now().Add(10 * time.Second)
		for {
			fams := scrapeMetrics(t, base)
			if v, _ := metricValue(fams, exporter.MetricProcessExited, pid); v == 1 {
				live, _ := metricValue(fams, exporter.MetricLiveBytes, pid)
				assert.Equal(t, float64(want.LiveBytesAtEnd), live, "final figures kept")
				return
			}
			require.True(t, time.Now().Before(deadline), "pid %d never reported exited", lr.pid)
			time.Sleep(200 * time.Millisecond)
		}
	})

	stop()
}

// freeLoopback returns a 127.0.0.1 address with a port free a moment ago.
func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// scrapeMetrics fetches base/metrics and returns its families by name.
func scrapeMetrics(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// metricValue sums name's series whose pid label is pid and whose other
// labels match the given name, value pairs; ok is false when none does.
func metricValue(fams map[string]*dto.MetricFamily, name, pid string, labels ...string) (sum float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	want := map[string]string{"pid": pid}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		ok = true
		sum += m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
	}
	return sum, ok
}

// pprofTotal runs `go tool pprof -raw URL` and sums the sample type's
// column over the samples it prints.
func pprofTotal(t *testing.T, u, sample string) uint64 {
	t.Helper()
	cmd := exec.Command("go", "tool", "pprof", "-raw", u)
	cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+t.TempDir())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go tool pprof -raw %s:\n%s", u, stderr.String())
	// -raw prints "Samples:", a header line naming the sample types
	// ("alloc_objects/count alloc_space/bytes ..."), then per sample a line
	// of values, a colon and location IDs, followed by its label lines
	// ("api:[cudaMalloc] ...", "bytes:[1048576 bytes]"); "Locations" ends
	// them.
	col := -1
	var total uint64
	inSamples := false
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSpace(line)
		switch {
		case line == "Samples:":
			inSamples = true
		case !inSamples:
		case line == "Locations":
			inSamples = false
		case col < 0:
			for i, f := range strings.Fields(line) {
				if strings.HasPrefix(f, sample+"/") {
					col = i
				}
			}
			require.GreaterOrEqual(t, col, 0, "no %s column in %q", sample, line)
		default:
			vals, _, ok := strings.Cut(line, ":")
			f := strings.Fields(vals)
			if !ok || len(f) <= col {
				continue // a label line
			}
			n, err := strconv.ParseUint(f[col], 10, 64)
			if err != nil {
				continue // a label line
			}
			total += n
		}
	}
	require.GreaterOrEqual(t, col, 0, "no samples in:\n%s", out)
	return total
}

// startPrometheus runs Debian's Prometheus scraping target every 500 ms,
// on loopback with its own storage in a temp dir, and returns its base URL.
// Without the prometheus binary the test skips, or fails with CI=true.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		msg := "needs Debian's prometheus (apt-get install prometheus; .ci/run installs it)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "; CI=true: the Prometheus test must run")
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: vramprof
    static_configs:
      - targets: [%q]
`, target)), 0o644))
	listen := freeLoopback(t)
	out := &syncBuffer{}
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Dir = dir
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	base := "http://" + listen
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		select {
		case <-exited:
			t.Fatalf("prometheus exited:\n%s", out.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "prometheus not ready:\n%s", out.String())
		time.Sleep(100 * time.Millisecond)
	}
}

// promQuery asks Prometheus's HTTP API for query's single value, waiting
// until a scrape has brought one.
func promQuery(t *testing.T, base, query string) float64 {
	t.Helper()
	deadline := time.Now().Add(40 * time.Second)
	for {
		resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(query))
		require.NoError(t, err)
		var r struct {
			Status string `json:"status"`
			Data   struct {
				Result []struct {
					Value [2]any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, "success", r.Status, query)
		if len(r.Data.Result) == 1 {
			s, ok := r.Data.Result[0].Value[1].(string)
			require.True(t, ok, "value of %s", query)
			v, err := strconv.ParseFloat(s, 64)
			require.NoError(t, err)
			return v
		}
		require.True(t, time.Now().Before(deadline), "no single result for %s: %+v", query, r.Data.Result)
		time.Sleep(200 * time.Millisecond)
	}
}
