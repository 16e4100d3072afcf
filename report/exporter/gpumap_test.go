package exporter

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

func nvmlDevs(names ...string) []nvmlDevice {
	var out []nvmlDevice
	for i, n := range names {
		out = append(out, nvmlDevice{info: event.DeviceInfo{Index: int32(i), Name: n, UUID: "GPU-" + string(rune('a'+i)) + "000"}})
	}
	return out
}

func TestGPUOf(t *testing.T) {
	same := nvmlDevs("A100", "A100", "A100", "A100")
	mixed := nvmlDevs("A100", "T4")
	for _, tc := range []struct {
		name        string
		env         string
		inContainer bool
		devs        []nvmlDevice
		device      int32
		want        string // UUID, "" for unknown
	}{
		{"no variables: NVML order", "", false, same, 2, "GPU-c000"},
		{"CUDA_VISIBLE_DEVICES indices", "CUDA_VISIBLE_DEVICES=3,1", false, same, 1, "GPU-b000"},
		{"CUDA_VISIBLE_DEVICES UUID prefix", "CUDA_VISIBLE_DEVICES=GPU-d", false, same, 0, "GPU-d000"},
		{"beyond the visible ones", "CUDA_VISIBLE_DEVICES=2", false, same, 1, ""},
		{"an invalid entry ends the list", "CUDA_VISIBLE_DEVICES=2,9,1", false, same, 1, ""},
		{"empty: no device", "CUDA_VISIBLE_DEVICES=", false, same, 0, ""},
		{"container toolkit's list", "NVIDIA_VISIBLE_DEVICES=GPU-c000,GPU-a000", true, same, 1, "GPU-a000"},
		{"toolkit list then CUDA's", "NVIDIA_VISIBLE_DEVICES=1,2,3\x00CUDA_VISIBLE_DEVICES=2", true, same, 0, "GPU-d000"},
		{"toolkit list outside a container: ignored", "NVIDIA_VISIBLE_DEVICES=3", false, same, 0, "GPU-a000"},
		{"all", "NVIDIA_VISIBLE_DEVICES=all", true, same, 3, "GPU-d000"},
		{"MIG: not told", "CUDA_VISIBLE_DEVICES=MIG-1234", false, same, 0, ""},
		{"mixed node, fastest first: not told", "", false, mixed, 0, ""},
		{"mixed node, PCI_BUS_ID order", "CUDA_DEVICE_ORDER=PCI_BUS_ID", false, mixed, 1, "GPU-b000"},
		{"unknown device", "", false, same, event.DeviceUnknown, ""},
		{"no NVML", "", false, nil, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := parseCUDAEnv([]byte("PATH=/bin\x00" + tc.env + "\x00SECRET=x"))
			g, ok := gpuOf(env, tc.inContainer, tc.device, tc.devs)
			assert.Equal(t, tc.want != "", ok)
			assert.Equal(t, tc.want, g.info.UUID)
		})
	}
}

// TestLiveBytesNameTheGPU: with NVML on, a process's live bytes on CUDA
// device 0 carry the gpu and UUID of the GPU that device is (its
// CUDA_VISIBLE_DEVICES=1 makes it NVML's 1), the labels
// DCGM_FI_DEV_FB_USED has: a query joins the two on them.
func TestLiveBytesNameTheGPU(t *testing.T) {
	x := New(Options{Alive: func(uint32, uint64) bool { return true }, Start: func(uint32) (uint64, error) { return 5, nil },
		Environ: func(uint32) ([]byte, error) { return []byte("CUDA_VISIBLE_DEVICES=1\x00"), nil }})
	for _, r := range []event.Record{
		&event.NVMLStatus{Time: 1, Available: true},
		&event.DeviceInfo{Index: 0, Name: "A100", UUID: "GPU-a"},
		&event.DeviceInfo{Index: 1, Name: "A100", UUID: "GPU-b"},
		&event.Sample{Time: 2, Device: 0},
		&event.Sample{Time: 2, Device: 1},
	} {
		require.NoError(t, x.Write(r))
	}
	feed(t, x, 4242, 0, 3) // 3 MiB live on CUDA device 0
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()
	fams := scrape(t, srv.URL)
	v, ok := groupValue(fams, MetricLiveBytes, "device", "0", "gpu", "1", "UUID", "GPU-b", "command", "trainer")
	require.True(t, ok, "live bytes labelled with the GPU")
	assert.Equal(t, float64(3*MiB), v)
	_, ok = groupValue(fams, MetricPeakBytes, "device", "0", "gpu", "1", "UUID", "GPU-b")
	assert.True(t, ok, "peak bytes too")
}
