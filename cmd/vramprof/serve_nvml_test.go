//go:build linux

package main

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/nvml"
	"github.com/vramprof/vramprof/probes/probetest"
	"github.com/vramprof/vramprof/report/exporter"
)

// fakeNVML is an nvml.Library of fixed devices, standing in for a driver
// this machine does not have.
type fakeNVML struct{ devices []fakeGPU }

type fakeGPU struct {
	name, uuid string
	mem        nvml.Memory
	procs      []nvml.Process
}

func (f *fakeNVML) Init() error               { return nil }
func (f *fakeNVML) Shutdown() error           { return nil }
func (f *fakeNVML) DeviceCount() (int, error) { return len(f.devices), nil }
func (f *fakeNVML) Device(i int) (nvml.Device, error) {
	return &f.devices[i], nil
}

func (g *fakeGPU) Name() (string, error)                     { return g.name, nil }
func (g *fakeGPU) UUID() (string, error)                     { return g.uuid, nil }
func (g *fakeGPU) PCIBusID() (string, error)                 { return "", nvml.ErrNotSupported }
func (g *fakeGPU) MemoryInfo() (nvml.Memory, error)          { return g.mem, nil }
func (g *fakeGPU) ComputeProcesses() ([]nvml.Process, error) { return g.procs, nil }
func (g *fakeGPU) GraphicsProcesses() ([]nvml.Process, error) {
	return nil, nil
}

// nvmlGauges returns name's values by gpu (NVML index).
func nvmlGauges(fams map[string]*dto.MetricFamily, name string) map[string]float64 {
	out := map[string]float64{}
	if f := fams[name]; f != nil {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "gpu" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// nvmlReason returns vramprof_nvml_available's value and reason label; ok
// is false when the metric is absent.
func nvmlReason(fams map[string]*dto.MetricFamily) (v float64, reason string, ok bool) {
	f := fams[exporter.MetricNVMLAvailable]
	if f == nil || len(f.Metric) != 1 {
		return 0, "", false
	}
	for _, l := range f.Metric[0].Label {
		if l.GetName() == "reason" {
			reason = l.GetValue()
		}
	}
	return f.Metric[0].GetGauge().GetValue(), reason, true
}

// TestServeNVMLSampler: serve's NVML sampler (startNVML) over a fake
// library of two devices fills the exporter's device gauges with the
// library's figures, and a traced process's NVML use with its own.
func TestServeNVMLSampler(t *testing.T) {
	const gib = uint64(1) << 30
	lib := &fakeNVML{devices: []fakeGPU{
		{name: "GPU Zero", uuid: "GPU-0000", mem: nvml.Memory{Total: 16 * gib, Used: 3 * gib, Free: 13 * gib},
			procs: []nvml.Process{{PID: 4242, UsedBytes: 2 * gib}}},
		{name: "GPU One", uuid: "GPU-1111", mem: nvml.Memory{Total: 24 * gib, Reserved: gib / 2, Used: gib, Free: 22*gib + gib/2}},
	}}
	x := exporter.New(exporter.Options{PerProcess: true, Alive: func(uint32, uint64) bool { return true }})
	x.SetHeader(&event.Header{Mode: "serve"})
	require.NoError(t, x.Write(&event.Process{PID: 4242, Command: []string{"/usr/bin/trainer"}}))
	stop, err := startNVML("auto", nvml.Options{Library: lib}, x.Write)
	require.NoError(t, err)
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()

	var fams map[string]*dto.MetricFamily
	deadline := time.Now().Add(10 * time.Second)
	for {
		fams = scrapeMetrics(t, srv.URL)
		if len(nvmlGauges(fams, exporter.MetricDeviceUsedBytes)) == 2 {
			break
		}
		require.True(t, time.Now().Before(deadline), "no device gauges after 10 s")
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, stop())

	v, reason, ok := nvmlReason(fams)
	require.True(t, ok)
	assert.Equal(t, float64(1), v)
	assert.Empty(t, reason)
	assert.Equal(t, map[string]float64{"0": float64(16 * gib), "1": float64(24 * gib)}, nvmlGauges(fams, exporter.MetricDeviceTotalBytes))
	assert.Equal(t, map[string]float64{"0": float64(3 * gib), "1": float64(gib)}, nvmlGauges(fams, exporter.MetricDeviceUsedBytes))
	assert.Equal(t, map[string]float64{"0": float64(13 * gib), "1": float64(22*gib + gib/2)}, nvmlGauges(fams, exporter.MetricDeviceFreeBytes))
	used, ok := metricValue(fams, exporter.MetricNVMLProcessUsedBytes, "4242", "gpu", "0", "UUID", "GPU-0000", "command", "trainer")
	require.True(t, ok)
	assert.Equal(t, float64(2*gib), used)

	off := exporter.New(exporter.Options{})
	stopOff, err := startNVML("off", nvml.Options{Library: lib}, off.Write)
	require.NoError(t, err)
	require.NoError(t, stopOff())
	srvOff := httptest.NewServer(off.Handler())
	defer srvOff.Close()
	_, _, ok = nvmlReason(scrapeMetrics(t, srvOff.URL))
	assert.False(t, ok, "--nvml off: no NVML metric")
}

// realNVMLDir returns the folder of NVIDIA's libnvidia-ml.so.1 (Debian's
// libnvidia-ml1, fetched by testdata/nvidia/fetch.sh).
func realNVMLDir(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(probetest.Root(), "testdata", "nvidia", "fetch.sh"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		skipOrFail(t, "testdata/nvidia/fetch.sh: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if filepath.Base(l) == nvml.DefaultLibraryPath {
			return filepath.Dir(l)
		}
	}
	t.Fatalf("fetch.sh printed no %s path:\n%s", nvml.DefaultLibraryPath, out)
	return ""
}

// TestServeNVMLUnavailable runs `vramprof serve` where NVML has no driver
// (NVIDIA's real library, this machine has no GPU) and where it has no
// library: /metrics says NVML is unavailable and why, and serves no device
// figure (a missing figure must not read as 0 bytes). With --nvml off there
// is no NVML metric at all.
func TestServeNVMLUnavailable(t *testing.T) {
	probetest.RequirePrivilege(t)
	if _, err := os.Stat("/proc/driver/nvidia"); err == nil {
		t.Skip("the NVIDIA driver is loaded here: the no-driver path cannot be tested")
	}
	dir := realNVMLDir(t)
	for _, tc := range []struct {
		name, libPath, reason string
		args                  []string
	}{
		{name: "no driver", libPath: dir, reason: "NVML unavailable: nvmlInit: Driver Not Loaded"},
		{name: "no library", libPath: t.TempDir(), reason: "NVML unavailable: nvmlInit: libnvidia-ml.so.1: cannot open shared object file"},
		{name: "off", libPath: dir, args: []string{"--nvml", "off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := freeLoopback(t)
			_, stop := startDaemon(t, []string{"LD_LIBRARY_PATH=" + tc.libPath}, "vramprof: serving http://"+addr,
				append([]string{"serve", "--listen", addr}, tc.args...)...)
			fams := scrapeMetrics(t, "http://"+addr)
			v, reason, ok := nvmlReason(fams)
			if tc.reason == "" {
				assert.False(t, ok, "--nvml off: no %s", exporter.MetricNVMLAvailable)
			} else if assert.True(t, ok, exporter.MetricNVMLAvailable) {
				assert.Equal(t, float64(0), v)
				assert.True(t, strings.HasPrefix(reason, tc.reason), "reason %q, want %q...", reason, tc.reason)
			}
			for _, name := range []string{exporter.MetricDeviceTotalBytes, exporter.MetricDeviceUsedBytes,
				exporter.MetricDeviceFreeBytes, exporter.MetricNVMLProcessUsedBytes} {
				assert.Nil(t, fams[name], "%s without NVML", name)
			}
			stop()
		})
	}
}
