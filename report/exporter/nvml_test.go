package exporter

import (
	"net/http/httptest"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

const GiB = uint64(1) << 30

// labelsOf returns m's labels by name.
func labelsOf(m *dto.Metric) map[string]string {
	got := map[string]string{}
	for _, l := range m.Label {
		got[l.GetName()] = l.GetValue()
	}
	return got
}

// deviceSeries returns name's gauge value per gpu label.
func deviceSeries(fams map[string]*dto.MetricFamily, name string) map[string]float64 {
	out := map[string]float64{}
	if f := fams[name]; f != nil {
		for _, m := range f.Metric {
			out[labelsOf(m)["gpu"]] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestNVMLMetrics feeds the records an NVML sampler writes (status, two
// devices, their samples with per-process use) and reads them back from
// /metrics: the device gauges give the last sample's figures, and each
// traced process its own use per device. When sampling then fails, the
// device figures go and vramprof_nvml_available says why.
func TestNVMLMetrics(t *testing.T) {
	x := New(Options{PerProcess: true, Alive: func(uint32, uint64) bool { return true }})
	x.SetHeader(&event.Header{Mode: "serve"})
	feed(t, x, 4242, 0, 5)
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()

	fams := scrape(t, srv.URL)
	for _, name := range []string{MetricNVMLAvailable, MetricDeviceTotalBytes, MetricDeviceUsedBytes, MetricNVMLProcessUsedBytes} {
		assert.Nil(t, fams[name], "%s: no NVML record yet (--nvml off)", name)
	}

	records := []event.Record{
		&event.NVMLStatus{Time: 1, Available: true},
		&event.DeviceInfo{Index: 0, Name: "NVIDIA A100-SXM4-40GB", UUID: "GPU-a", TotalBytes: 40 * GiB, Time: 1, PCIBusID: "00000000:07:00.0"},
		&event.DeviceInfo{Index: 1, Name: "NVIDIA A100-SXM4-40GB", UUID: "GPU-b", TotalBytes: 40 * GiB, Time: 1, PCIBusID: "00000000:0F:00.0"},
		// An older sample of device 0: replaced by the next one.
		&event.Sample{Time: 2, Device: 0, TotalBytes: 40 * GiB, UsedBytes: 1 * GiB, FreeBytes: 39 * GiB},
		&event.Sample{Time: 3, Device: 0, TotalBytes: 40 * GiB, UsedBytes: 3 * GiB, FreeBytes: 37 * GiB,
			Processes: []event.ProcessUsage{{PID: 4242, UsedBytes: 600 * MiB}, {PID: 99, UsedBytes: 2 * GiB}}},
		&event.Sample{Time: 3, Device: 1, TotalBytes: 40 * GiB, UsedBytes: 5 * GiB, FreeBytes: 35 * GiB,
			// Listed as compute and as graphics: one series, the sum.
			Processes: []event.ProcessUsage{{PID: 4242, UsedBytes: 100 * MiB}, {PID: 4242, UsedBytes: 28 * MiB}}},
	}
	for _, r := range records {
		require.NoError(t, x.Write(r))
	}
	fams = scrape(t, srv.URL)
	require.NotNil(t, fams[MetricNVMLAvailable])
	require.Len(t, fams[MetricNVMLAvailable].Metric, 1)
	m := fams[MetricNVMLAvailable].Metric[0]
	assert.Equal(t, float64(1), m.GetGauge().GetValue())
	assert.Equal(t, "", labelsOf(m)["reason"])
	assert.Equal(t, map[string]float64{"0": float64(40 * GiB), "1": float64(40 * GiB)}, deviceSeries(fams, MetricDeviceTotalBytes))
	assert.Equal(t, map[string]float64{"0": float64(3 * GiB), "1": float64(5 * GiB)}, deviceSeries(fams, MetricDeviceUsedBytes))
	assert.Equal(t, map[string]float64{"0": float64(37 * GiB), "1": float64(35 * GiB)}, deviceSeries(fams, MetricDeviceFreeBytes))
	for _, m := range fams[MetricDeviceUsedBytes].Metric {
		l := labelsOf(m)
		assert.Equal(t, "NVIDIA A100-SXM4-40GB", l["modelName"])
		assert.Equal(t, map[string]string{"0": "GPU-a", "1": "GPU-b"}[l["gpu"]], l["UUID"])
		assert.Equal(t, map[string]string{"0": "00000000:07:00.0", "1": "00000000:0F:00.0"}[l["gpu"]], l["pci_bus_id"])
	}
	v, ok := value(fams, MetricNVMLProcessUsedBytes, 4242, "gpu", "0", "UUID", "GPU-a", "command", "trainer")
	require.True(t, ok)
	assert.Equal(t, float64(600*MiB), v)
	v, ok = value(fams, MetricNVMLProcessUsedBytes, 4242, "gpu", "1")
	require.True(t, ok)
	assert.Equal(t, float64(128*MiB), v)
	_, ok = value(fams, MetricNVMLProcessUsedBytes, 99)
	assert.False(t, ok, "pid 99 is not traced")

	// Sampling fails: no stale device figure is served as current.
	const reason = "NVML unavailable: nvmlDeviceGetMemoryInfo: GPU is lost"
	require.NoError(t, x.Write(&event.NVMLStatus{Time: 4, Reason: reason}))
	fams = scrape(t, srv.URL)
	m = fams[MetricNVMLAvailable].Metric[0]
	assert.Equal(t, float64(0), m.GetGauge().GetValue())
	assert.Equal(t, reason, labelsOf(m)["reason"])
	for _, name := range []string{MetricDeviceTotalBytes, MetricDeviceUsedBytes, MetricDeviceFreeBytes, MetricNVMLProcessUsedBytes} {
		assert.Nil(t, fams[name], "%s while NVML is unavailable", name)
	}
}

// TestNVMLProcessesNote: a GPU whose processes NVML does not list keeps its
// device gauges and says why there is no per-process series, in one line;
// a GPU whose processes it lists says so with 1 and no reason.
func TestNVMLProcessesNote(t *testing.T) {
	x := New(Options{PerProcess: true, Alive: func(uint32, uint64) bool { return true }})
	x.SetHeader(&event.Header{Mode: "serve"})
	feed(t, x, 4242, 0, 5)
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()

	const note = "per-process figures not available: nvmlDeviceGetComputeRunningProcesses: Not Supported (NVML lists no processes on MIG partitions and vGPU guests); the device's figures are NVML's"
	for _, r := range []event.Record{
		&event.NVMLStatus{Time: 1, Available: true},
		&event.DeviceInfo{Index: 0, Name: "NVIDIA A100-SXM4-40GB", UUID: "GPU-a", TotalBytes: 40 * GiB, Time: 1},
		&event.DeviceInfo{Index: 1, Name: "NVIDIA A100-SXM4-40GB", UUID: "GPU-b", TotalBytes: 40 * GiB, Time: 1},
		&event.Sample{Time: 2, Device: 0, TotalBytes: 40 * GiB, UsedBytes: 3 * GiB, FreeBytes: 37 * GiB,
			Processes: []event.ProcessUsage{{PID: 4242, UsedBytes: 600 * MiB}}},
		&event.Sample{Time: 2, Device: 1, TotalBytes: 40 * GiB, UsedBytes: 5 * GiB, FreeBytes: 35 * GiB},
		// The sampler finds out at its first process list, and writes the
		// device's description again.
		&event.DeviceInfo{Index: 1, Name: "NVIDIA A100-SXM4-40GB", UUID: "GPU-b", TotalBytes: 40 * GiB, Time: 2, ProcessesNote: note},
	} {
		require.NoError(t, x.Write(r))
	}
	fams := scrape(t, srv.URL)
	assert.Equal(t, map[string]float64{"0": 1, "1": 0}, deviceSeries(fams, MetricNVMLProcessesAvailable))
	reasons := map[string]string{}
	for _, m := range fams[MetricNVMLProcessesAvailable].GetMetric() {
		l := labelsOf(m)
		reasons[l["gpu"]] = l["reason"]
		assert.Equal(t, map[string]string{"0": "GPU-a", "1": "GPU-b"}[l["gpu"]], l["UUID"])
	}
	assert.Equal(t, map[string]string{"0": "", "1": note}, reasons)
	assert.Equal(t, map[string]float64{"0": float64(40 * GiB), "1": float64(40 * GiB)}, deviceSeries(fams, MetricDeviceTotalBytes),
		"the device figures stay")
	assert.Equal(t, map[string]float64{"0": float64(3 * GiB), "1": float64(5 * GiB)}, deviceSeries(fams, MetricDeviceUsedBytes))
}
