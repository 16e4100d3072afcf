//go:build linux && cgo

package nvml

import (
	"sync/atomic"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

const gib uint64 = 1 << 30

// errorTexts are nvmlErrorString's words for the codes the tests use.
var errorTexts = map[nvml.Return]string{
	nvml.ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
	nvml.ERROR_NOT_SUPPORTED:     "Not Supported",
	nvml.ERROR_GPU_IS_LOST:       "GPU is lost",
	nvml.ERROR_NO_PERMISSION:     "Insufficient Permissions",
	nvml.ERROR_UNKNOWN:           "Unknown Error",
}

// gpu is what one mock device reports.
type gpu struct {
	name, uuid            string
	total, reserved, free uint64 // used is what is left: total - reserved - free
	compute, graphics     []nvml.ProcessInfo
	// busID is the PCI address the v3 call gives; legacy, the one v1 and
	// v2 give (in busIdLegacy) when busID is empty.
	busID, legacy        string
	handleRet, memoryRet nvml.Return // failures to inject; SUCCESS is 0
	pciRet               nvml.Return
	computeRet           nvml.Return
	graphicsRet          nvml.Return
}

// mockDevice builds go-nvml's generated mock of a device from g. Both
// memory calls answer, so a test can tell which one the adapter chose.
func mockDevice(g *gpu) *mock.Device {
	return &mock.Device{
		GetNameFunc: func() (string, nvml.Return) { return g.name, nvml.SUCCESS },
		GetUUIDFunc: func() (string, nvml.Return) { return g.uuid, nvml.SUCCESS },
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: g.total, Reserved: g.reserved, Free: g.free,
				Used: g.total - g.reserved - g.free}, g.memoryRet
		},
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			// v1 counts the driver's reservation as used.
			return nvml.Memory{Total: g.total, Free: g.free, Used: g.total - g.free}, g.memoryRet
		},
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for i, c := range []byte(g.busID) {
				p.BusId[i] = int8(c)
			}
			for i, c := range []byte(g.legacy) {
				p.BusIdLegacy[i] = int8(c)
			}
			return p, g.pciRet
		},
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return g.compute, g.computeRet
		},
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return g.graphics, g.graphicsRet
		},
	}
}

// mockNVML is go-nvml's generated mock of the library over gpus. v2 says
// whether the library exports nvmlDeviceGetMemoryInfo_v2.
type mockNVML struct {
	*mock.Interface
	devices []*mock.Device
	lookups []string
}

func newMockNVML(v2 bool, initRet nvml.Return, gpus ...*gpu) *mockNVML {
	m := &mockNVML{}
	for _, g := range gpus {
		m.devices = append(m.devices, mockDevice(g))
	}
	ext := &mock.ExtendedInterface{LookupSymbolFunc: func(name string) error {
		m.lookups = append(m.lookups, name)
		if name == memoryInfoV2 && v2 {
			return nil
		}
		return nvml.ERROR_NOT_FOUND
	}}
	m.Interface = &mock.Interface{
		InitFunc:       func() nvml.Return { return initRet },
		ShutdownFunc:   func() nvml.Return { return nvml.SUCCESS },
		ExtensionsFunc: func() nvml.ExtendedInterface { return ext },
		ErrorStringFunc: func(r nvml.Return) string {
			if s, ok := errorTexts[r]; ok {
				return s
			}
			return r.Error()
		},
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(gpus), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if ret := gpus[i].handleRet; ret != nvml.SUCCESS {
				return nil, ret
			}
			return m.devices[i], nvml.SUCCESS
		},
	}
	return m
}

// testClock returns 1000, 2000, 3000... so each record's time shows when
// it was read.
func testClock() func() uint64 {
	var n atomic.Uint64
	return func() uint64 { return n.Add(1) * 1000 }
}

// mustOpen opens a Sampler over m, closed at the end of the test.
func mustOpen(tb testing.TB, m *mockNVML, opts Options) *Sampler {
	tb.Helper()
	opts.Library = fromInterface(m)
	if opts.Clock == nil {
		opts.Clock = testClock()
	}
	s, err := Open(opts)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func proc(pid uint32, used uint64) nvml.ProcessInfo {
	return nvml.ProcessInfo{Pid: pid, UsedGpuMemory: used, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}
}

func usage(pid uint32, used uint64) event.ProcessUsage {
	return event.ProcessUsage{PID: pid, UsedBytes: used}
}
