//go:build linux && cgo

package nvml

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

func twoGPUs() []*gpu {
	return []*gpu{
		{name: "NVIDIA A100-SXM4-40GB", uuid: "GPU-aaaa", busID: "00000000:3B:00.0", total: 40 * gib, reserved: gib / 2, free: 30 * gib},
		{name: "NVIDIA H100 80GB HBM3", uuid: "GPU-bbbb", busID: "00000000:86:00.0", total: 80 * gib, reserved: gib, free: 79 * gib},
	}
}

func TestOpenDevices(t *testing.T) {
	m := newMockNVML(true, nvml.SUCCESS, twoGPUs()...)
	s := mustOpen(t, m, Options{})
	// The clock reads 1000, 2000: one per device, in index order.
	assert.Equal(t, []event.DeviceInfo{
		{Index: 0, Name: "NVIDIA A100-SXM4-40GB", UUID: "GPU-aaaa", TotalBytes: 40 * gib, Time: 1000, PCIBusID: "00000000:3B:00.0"},
		{Index: 1, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-bbbb", TotalBytes: 80 * gib, Time: 2000, PCIBusID: "00000000:86:00.0"},
	}, s.Devices())
	assert.Empty(t, s.Skipped())
	assert.Len(t, m.InitCalls(), 1)
	assert.Equal(t, []string{memoryInfoV2}, m.lookups, "checks the v2 symbol exists before using it")

	require.NoError(t, s.Close())
	assert.Len(t, m.ShutdownCalls(), 1)
	require.NoError(t, s.Close(), "closing twice is a no-op")
	assert.Len(t, m.ShutdownCalls(), 1)
	_, err := s.Sample(1)
	assert.ErrorIs(t, err, ErrClosed)
}

func TestSampleMemory(t *testing.T) {
	tests := []struct {
		name string
		v2   bool
		want []event.Sample
	}{
		{"v2 symbol present", true, []event.Sample{
			// used = total - reserved - free: v2 leaves the driver's reservation out.
			{Time: 7, Device: 0, TotalBytes: 40 * gib, FreeBytes: 30 * gib, UsedBytes: 40*gib - gib/2 - 30*gib},
			{Time: 7, Device: 1, TotalBytes: 80 * gib, FreeBytes: 79 * gib, UsedBytes: 80*gib - gib - 79*gib},
		}},
		{"v1 only", false, []event.Sample{
			// used = total - free.
			{Time: 7, Device: 0, TotalBytes: 40 * gib, FreeBytes: 30 * gib, UsedBytes: 40*gib - 30*gib},
			{Time: 7, Device: 1, TotalBytes: 80 * gib, FreeBytes: 79 * gib, UsedBytes: 80*gib - 79*gib},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMockNVML(tt.v2, nvml.SUCCESS, twoGPUs()...)
			s := mustOpen(t, m, Options{})
			got, err := s.Sample(7)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			for _, d := range m.devices {
				if tt.v2 {
					assert.NotEmpty(t, d.GetMemoryInfo_v2Calls())
					assert.Empty(t, d.GetMemoryInfoCalls())
				} else {
					assert.Empty(t, d.GetMemoryInfo_v2Calls(), "v2 called without the symbol")
					assert.NotEmpty(t, d.GetMemoryInfoCalls())
				}
			}
		})
	}
}

func TestSampleProcesses(t *testing.T) {
	mig := func(pid uint32, used uint64, gi, ci uint32) nvml.ProcessInfo {
		return nvml.ProcessInfo{Pid: pid, UsedGpuMemory: used, GpuInstanceId: gi, ComputeInstanceId: ci}
	}
	const notAvailable = ^uint64(0) // NVML_VALUE_NOT_AVAILABLE
	tests := []struct {
		name              string
		compute, graphics []nvml.ProcessInfo
		graphicsRet       nvml.Return
		pids              func(uint32) bool
		want              []event.ProcessUsage
	}{
		{name: "none"},
		{name: "compute, sorted by pid",
			compute: []nvml.ProcessInfo{proc(300, 3*gib), proc(100, gib)},
			want:    []event.ProcessUsage{usage(100, gib), usage(300, 3*gib)}},
		{name: "compute and graphics merged",
			compute:  []nvml.ProcessInfo{proc(100, gib)},
			graphics: []nvml.ProcessInfo{proc(200, 2*gib)},
			want:     []event.ProcessUsage{usage(100, gib), usage(200, 2*gib)}},
		{name: "one process in both lists counts once",
			compute:  []nvml.ProcessInfo{proc(100, 5*gib)},
			graphics: []nvml.ProcessInfo{proc(100, 5*gib)},
			want:     []event.ProcessUsage{usage(100, 5*gib)}},
		{name: "MIG partitions of one process summed",
			compute: []nvml.ProcessInfo{mig(100, gib, 1, 0), mig(100, 2*gib, 2, 0)},
			want:    []event.ProcessUsage{usage(100, gib+2*gib)}},
		{name: "usage NVML cannot tell is 0",
			compute: []nvml.ProcessInfo{proc(100, notAvailable)},
			want:    []event.ProcessUsage{usage(100, 0)}},
		{name: "filtered to traced pids",
			compute: []nvml.ProcessInfo{proc(100, gib), proc(200, 2*gib), proc(300, 3*gib)},
			pids:    func(pid uint32) bool { return pid != 200 },
			want:    []event.ProcessUsage{usage(100, gib), usage(300, 3*gib)}},
		{name: "no traced pid on the device",
			compute: []nvml.ProcessInfo{proc(100, gib)},
			pids:    func(uint32) bool { return false }},
		{name: "graphics list not supported",
			compute:     []nvml.ProcessInfo{proc(100, gib)},
			graphicsRet: nvml.ERROR_NOT_SUPPORTED,
			want:        []event.ProcessUsage{usage(100, gib)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &gpu{name: "g", uuid: "GPU-1", total: 16 * gib, free: 4 * gib,
				compute: tt.compute, graphics: tt.graphics, graphicsRet: tt.graphicsRet}
			m := newMockNVML(true, nvml.SUCCESS, g)
			s := mustOpen(t, m, Options{PIDs: tt.pids})
			for range 2 {
				got, err := s.Sample(1)
				require.NoError(t, err)
				require.Len(t, got, 1)
				assert.Equal(t, tt.want, got[0].Processes)
				assert.Equal(t, 16*gib-4*gib, got[0].UsedBytes)
			}
			wantGraphics := 2
			if tt.graphicsRet == nvml.ERROR_NOT_SUPPORTED {
				wantGraphics = 1 // not asked again once known unsupported
			}
			assert.Len(t, m.devices[0].GetGraphicsRunningProcessesCalls(), wantGraphics)
		})
	}
}

func TestSampleDeviceFails(t *testing.T) {
	gpus := twoGPUs()
	m := newMockNVML(true, nvml.SUCCESS, gpus...)
	s := mustOpen(t, m, Options{})
	gpus[1].memoryRet = nvml.ERROR_GPU_IS_LOST
	gpus[0].computeRet = nvml.ERROR_NO_PERMISSION

	got, err := s.Sample(5)
	assert.Empty(t, got)
	var ne *Error
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, "device 0: nvmlDeviceGetComputeRunningProcesses: Insufficient Permissions; "+
		"device 1: nvmlDeviceGetMemoryInfo_v2: GPU is lost", err.Error())

	gpus[0].computeRet = nvml.SUCCESS
	got, err = s.Sample(6)
	assert.Equal(t, "device 1: nvmlDeviceGetMemoryInfo_v2: GPU is lost", err.Error())
	require.Len(t, got, 1, "the devices that answer are still sampled")
	assert.Equal(t, int32(0), got[0].Device)
	assert.Equal(t, 40*gib-gib/2-30*gib, got[0].UsedBytes)
}

func TestOpenUnavailable(t *testing.T) {
	tests := []struct {
		name     string
		initRet  nvml.Return
		gpus     []*gpu
		want     string
		shutdown int // nvmlShutdown calls: none after a failed nvmlInit
	}{
		{"no driver", nvml.ERROR_DRIVER_NOT_LOADED, twoGPUs(), "NVML unavailable: nvmlInit: Driver Not Loaded", 0},
		{"no device", nvml.SUCCESS, nil, "NVML unavailable: nvmlDeviceGetCount: no NVIDIA device", 1},
		{"every device fails", nvml.SUCCESS, []*gpu{{handleRet: nvml.ERROR_NO_PERMISSION}, {handleRet: nvml.ERROR_GPU_IS_LOST}},
			"NVML unavailable: device 0: nvmlDeviceGetHandleByIndex: Insufficient Permissions; " +
				"device 1: nvmlDeviceGetHandleByIndex: GPU is lost", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMockNVML(true, tt.initRet, tt.gpus...)
			_, err := Open(Options{Library: fromInterface(m)})
			require.ErrorIs(t, err, ErrUnavailable)
			assert.Equal(t, tt.want, err.Error())
			assert.Len(t, m.ShutdownCalls(), tt.shutdown)
			if tt.initRet != nvml.SUCCESS {
				var ne *Error
				require.ErrorAs(t, err, &ne)
				assert.Equal(t, Error{Func: "nvmlInit", Code: int(tt.initRet), Text: errorTexts[tt.initRet]}, *ne)
				assert.Empty(t, m.lookups, "nothing but ErrorString after a failed nvmlInit")
				assert.Empty(t, m.DeviceGetCountCalls())
			}
		})
	}
}

func TestOpenSkipsBrokenDevice(t *testing.T) {
	gpus := twoGPUs()
	gpus[0].handleRet = nvml.ERROR_NO_PERMISSION
	s := mustOpen(t, newMockNVML(true, nvml.SUCCESS, gpus...), Options{})
	require.Len(t, s.Devices(), 1)
	assert.Equal(t, int32(1), s.Devices()[0].Index, "indices stay NVML's")
	require.Len(t, s.Skipped(), 1)
	assert.EqualError(t, s.Skipped()[0], "device 0: nvmlDeviceGetHandleByIndex: Insufficient Permissions")
	got, err := s.Sample(1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, int32(1), got[0].Device)
}

func TestErrorNotSupported(t *testing.T) {
	assert.Equal(t, codeNotSupported, int(nvml.ERROR_NOT_SUPPORTED), "NVML's ABI")
	g := fromInterface(newMockNVML(true, nvml.SUCCESS))
	err := g.check("nvmlDeviceGetGraphicsRunningProcesses", nvml.ERROR_NOT_SUPPORTED)
	assert.ErrorIs(t, err, ErrNotSupported)
	assert.EqualError(t, err, "nvmlDeviceGetGraphicsRunningProcesses: Not Supported")
	assert.NotErrorIs(t, g.check("nvmlInit", nvml.ERROR_UNKNOWN), ErrNotSupported)
	assert.NoError(t, g.check("nvmlInit", nvml.SUCCESS))
}

// TestRun follows Run through a failure and a recovery: the status records
// bracket the failure and the device that answers keeps being sampled.
func TestRun(t *testing.T) {
	gpus := twoGPUs()
	m := newMockNVML(true, nvml.SUCCESS, gpus...)
	clock := testClock()
	s := mustOpen(t, m, Options{Clock: clock}) // DeviceInfo at 1000 and 2000

	// Tick k samples at clock 3000 + 1000k (3000 is the first status).
	// GPU 1 is lost on the second tick only.
	got := runTicksWith(t, s, 3, func(tick int) {
		switch tick {
		case 1:
			gpus[1].memoryRet = nvml.ERROR_GPU_IS_LOST
		case 2:
			gpus[1].memoryRet = nvml.SUCCESS
		}
	})

	info := s.Devices()
	sample := func(now uint64, dev int32) *event.Sample {
		g := gpus[dev]
		return &event.Sample{Time: now, Device: dev, TotalBytes: g.total, FreeBytes: g.free, UsedBytes: g.total - g.reserved - g.free}
	}
	want := []event.Record{
		&event.NVMLStatus{Time: 3000, Available: true},
		&info[0], &info[1],
		sample(4000, 0), sample(4000, 1), // tick 1
		sample(5000, 0), // tick 2: GPU 1 lost
		&event.NVMLStatus{Time: 5000, Reason: "NVML unavailable: device 1: nvmlDeviceGetMemoryInfo_v2: GPU is lost"},
		sample(6000, 0), sample(6000, 1), // tick 3: back
		&event.NVMLStatus{Time: 6000, Available: true},
	}
	assert.Equal(t, want, got)

	require.NoError(t, s.Close())
	got = nil
	s.Run(t.Context(), time.Millisecond, func(r event.Record) { got = append(got, r) })
	assert.Empty(t, got, "Run on a closed Sampler returns at once")
}

func TestStatus(t *testing.T) {
	assert.Equal(t, &event.NVMLStatus{Time: 1, Available: true}, Status(1, nil))
	err := unavailable(errors.Join(errors.New("a"), errors.New("b")))
	assert.Equal(t, &event.NVMLStatus{Time: 2, Reason: "NVML unavailable: a; b"}, Status(2, err), "one line")
}

// TestStart: Start samples into write until stop, whose return is after
// the last record (Close shuts NVML down once); when NVML is unavailable
// it writes the Status that says why, and write's error is Start's.
func TestStart(t *testing.T) {
	m := newMockNVML(true, nvml.SUCCESS, twoGPUs()...)
	var (
		mu  sync.Mutex
		got []event.Record
	)
	write := func(r event.Record) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r)
		return nil
	}
	stop, err := Start(Options{Library: fromInterface(m), Clock: testClock()}, write)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 5 // status, two DeviceInfo, the first tick's two samples
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, stop())
	mu.Lock()
	n := len(got)
	mu.Unlock()
	assert.Len(t, m.ShutdownCalls(), 1)
	assert.Equal(t, &event.NVMLStatus{Time: 3000, Available: true}, got[0])
	assert.IsType(t, &event.DeviceInfo{}, got[1])
	assert.IsType(t, &event.Sample{}, got[3])
	time.Sleep(3 * DefaultInterval)
	assert.Len(t, got, n, "no record after stop")

	got = nil
	writeErr := errors.New("disk full")
	stop, err = Start(Options{Library: fromInterface(newMockNVML(true, nvml.ERROR_DRIVER_NOT_LOADED)), Clock: testClock()},
		func(r event.Record) error { got = append(got, r); return writeErr })
	require.NoError(t, err, "write's errors are dropped")
	require.NoError(t, stop())
	assert.Equal(t, []event.Record{&event.NVMLStatus{Time: 1000, Reason: "NVML unavailable: nvmlInit: Driver Not Loaded"}}, got)
}

// slowLibrary is a Library whose Init takes as long as its caller says.
type slowLibrary struct {
	Library
	release chan struct{}
}

func (l *slowLibrary) Init() error {
	<-l.release
	return l.Library.Init()
}

// TestStartSlow: an NVML that does not answer delays Start and stop by
// StopWait each, no more; the Status says it did not answer, and
// nothing is written once stop has returned.
func TestStartSlow(t *testing.T) {
	lib := &slowLibrary{Library: fromInterface(newMockNVML(true, nvml.SUCCESS, twoGPUs()...)), release: make(chan struct{})}
	var (
		mu  sync.Mutex
		got []event.Record
	)
	write := func(r event.Record) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r)
		return nil
	}
	start := time.Now()
	stop, err := Start(Options{Library: lib, Clock: testClock()}, write)
	require.NoError(t, err)
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, StopWait)
	assert.Less(t, took, StopWait+time.Second, "Start waits StopWait at most")
	start = time.Now()
	require.NoError(t, stop())
	took = time.Since(start)
	assert.GreaterOrEqual(t, took, StopWait)
	assert.Less(t, took, StopWait+time.Second, "stop waits StopWait at most")
	close(lib.release) // the call returns after the end
	time.Sleep(3 * DefaultInterval)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 1, "the Status alone, nothing after stop: %v", got)
	assert.Equal(t, "NVML unavailable: "+ErrNoAnswer.Error(), got[0].(*event.NVMLStatus).Reason)
}

// runTicks runs s until it has emitted n ticks' samples of device 0 and
// returns every record.
func runTicks(t *testing.T, s *Sampler, n int) []event.Record {
	t.Helper()
	return runTicksWith(t, s, n, func(int) {})
}

// runTicksWith is runTicks calling onTick(k) when tick k's sample of
// device 0 is out (k from 1), before the next tick.
func runTicksWith(t *testing.T, s *Sampler, n int, onTick func(tick int)) []event.Record {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var got []event.Record
	ticks := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, time.Millisecond, func(r event.Record) {
			got = append(got, r)
			if sa, ok := r.(*event.Sample); ok && sa.Device == 0 {
				ticks++
				onTick(ticks)
				if ticks == n {
					cancel()
				}
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	return got
}

// TestRunStampsAfterCalls: a tick is stamped when its last NVML call has
// returned, not before its first: with calls that take 2 s between them
// (a busy driver), the sample's time is the clock after the process
// lists, so a process that allocated while NVML answered is not compared
// with traced bytes from 6 s earlier.
func TestRunStampsAfterCalls(t *testing.T) {
	const call = uint64(2e9) // ns each NVML call takes
	var (
		mu    sync.Mutex
		clock uint64 = 1e9
	)
	now := func() uint64 { mu.Lock(); defer mu.Unlock(); return clock }
	slow := func() { mu.Lock(); defer mu.Unlock(); clock += call }
	g := &gpu{name: "g", uuid: "GPU-1", total: 16 * gib, free: 4 * gib, compute: []nvml.ProcessInfo{proc(100, gib)}}
	m := newMockNVML(true, nvml.SUCCESS, g)
	d := m.devices[0]
	memory, compute, graphics := d.GetMemoryInfo_v2Func, d.GetComputeRunningProcessesFunc, d.GetGraphicsRunningProcessesFunc
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { slow(); return memory() }
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { slow(); return compute() }
	d.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { slow(); return graphics() }
	s := mustOpen(t, m, Options{Clock: now})
	// Open read the memory once: the clock is 1 s + 2 s.
	require.Equal(t, 3*call/2, now())
	got := runTicks(t, s, 2)
	var times []uint64
	for _, r := range got {
		if sa, ok := r.(*event.Sample); ok {
			times = append(times, sa.Time)
		}
	}
	// Tick k (from 1) returns after 3k calls past Open's: 3 s + 6 s k.
	assert.Equal(t, []uint64{3e9 + 6e9, 3e9 + 12e9}, times)
}

// TestRunProcessesNotSupported: a device without a compute process list
// (MIG, vGPU) keeps its memory figures, and its DeviceInfo is written
// again, once, before the first tick's samples, with the note that says
// why there is no per-process figure; Devices carries it too.
func TestRunProcessesNotSupported(t *testing.T) {
	gpus := twoGPUs()
	gpus[1].computeRet = nvml.ERROR_NOT_SUPPORTED
	gpus[1].graphicsRet = nvml.ERROR_NOT_SUPPORTED
	gpus[0].graphicsRet = nvml.ERROR_NOT_SUPPORTED // compute list kept: no note
	gpus[0].compute = []nvml.ProcessInfo{proc(100, gib)}
	m := newMockNVML(true, nvml.SUCCESS, gpus...)
	s := mustOpen(t, m, Options{Clock: testClock()}) // DeviceInfo at 1000 and 2000
	info := s.Devices()
	got := runTicks(t, s, 2)

	noted := info[1]
	noted.ProcessesNote = "per-process figures not available: nvmlDeviceGetComputeRunningProcesses: Not Supported " +
		"(NVML lists no processes on MIG partitions and vGPU guests); the device's figures are NVML's"
	sample := func(now uint64, dev int32, ps []event.ProcessUsage) *event.Sample {
		g := gpus[dev]
		return &event.Sample{Time: now, Device: dev, TotalBytes: g.total, FreeBytes: g.free,
			UsedBytes: g.total - g.reserved - g.free, Processes: ps}
	}
	want := []event.Record{
		&event.NVMLStatus{Time: 3000, Available: true},
		&info[0], &info[1],
		&noted, sample(4000, 0, []event.ProcessUsage{usage(100, gib)}), sample(4000, 1, nil),
		sample(5000, 0, []event.ProcessUsage{usage(100, gib)}), sample(5000, 1, nil),
	}
	assert.Equal(t, want, got)
	assert.Equal(t, []event.DeviceInfo{info[0], noted}, s.Devices())
	assert.Len(t, m.devices[1].GetComputeRunningProcessesCalls(), 1, "not asked again once known unsupported")

	// Run again: the note is known from the start, in the first
	// DeviceInfo, and not written twice.
	got = runTicks(t, s, 1)
	require.Len(t, got, 5)
	assert.Equal(t, []event.Record{&info[0], &noted}, got[1:3])
	assert.IsType(t, &event.Sample{}, got[3])
	assert.IsType(t, &event.Sample{}, got[4])
}

// TestPCIBusID: a device's PCI address is the v3 layout's busId, else the
// legacy busIdLegacy that v1 and v2 fill; a library that cannot say leaves
// it empty and every other figure as it was.
func TestPCIBusID(t *testing.T) {
	gpus := twoGPUs()
	gpus[0].busID, gpus[0].legacy = "", "0000:3B:00.0"
	gpus[1].pciRet = nvml.ERROR_NOT_SUPPORTED
	s := mustOpen(t, newMockNVML(true, nvml.SUCCESS, gpus...), Options{})
	require.Len(t, s.Devices(), 2)
	assert.Equal(t, "0000:3B:00.0", s.Devices()[0].PCIBusID, "the legacy field")
	assert.Empty(t, s.Devices()[1].PCIBusID, "not supported")
	assert.Equal(t, "GPU-bbbb", s.Devices()[1].UUID)
	assert.Equal(t, uint64(80*gib), s.Devices()[1].TotalBytes)
	assert.Empty(t, s.Skipped(), "no device skipped for want of an address")
}
