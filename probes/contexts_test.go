//go:build linux

package probes

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

// TestSetDeviceRecords runs ctx_guard: a device guard's cudaSetDevice
// before every cudaMalloc and cudaFree on two devices in turn, a switch to
// a third device's context with the driver (cuCtxSetCurrent, twice), a
// failed cudaSetDevice, and a guarded pair on a fourth device. Only the
// set-device calls that change the thread's device or context, and the
// failed ones, are recorded; every allocation and free still carries the
// device the program says it was on.
func TestSetDeviceRecords(t *testing.T) {
	sink, truth, code := runScenario(t, "ctx_guard")
	require.Zero(t, code, "exit code")
	assert.Zero(t, sink.lost, "lost events")

	// The truth lists every set-device call the program made, in order:
	// cudaSetDevice (whose success in the fake runtime makes the device's
	// primary context current with a nested cuCtxSetCurrent) and the
	// driver's own cuCtxSetCurrent. One that fails is recorded, with the
	// device it asked for; one that makes current the device the thread is
	// on already changes nothing and is not recorded; a cudaSetDevice that
	// changes it is two records, its own and its nested cuCtxSetCurrent's.
	setKey := func(api string, device, ret int32, nested bool) string {
		return fmt.Sprintf("%s device=%d ret=%d nested=%v", api, device, ret, nested)
	}
	want := map[string]int{}
	calls, changes := 0, 0
	cur := event.DeviceUnknown
	for _, c := range truth.Calls {
		if c.API != "cudaSetDevice" && c.API != "cuCtxSetCurrent" {
			continue
		}
		calls++
		switch {
		case c.Outcome != "ok":
			want[setKey(c.API, c.Device, c.Ret, false)]++
		case c.Device != cur:
			cur = c.Device
			changes++
			want[setKey(c.API, c.Device, 0, false)]++
			if c.API == "cudaSetDevice" {
				want[setKey("cuCtxSetCurrent", c.Device, 0, true)]++
			}
		}
	}
	// ctx_guard.c's arithmetic: 24 guarded calls in the rounds, 2 driver
	// switches, 1 failed and 2 guarded on device 3; the device changes at
	// rounds 0, 4 and 8, at the first driver switch and on device 3.
	require.Equal(t, 29, calls, "set-device calls in the truth")
	require.Equal(t, 5, changes, "set-device calls that change the device")

	got := map[string]int{}
	records := 0
	for _, e := range sink.events {
		if e.Kind != event.KindSetDevice {
			continue
		}
		records++
		got[setKey(e.API.String(), e.Device, e.Ret, e.Flags&event.FlagNested != 0)]++
	}
	assert.Equal(t, want, got, "set-device records")
	// 4 changes by cudaSetDevice (2 records each) less the driver's own
	// switch (1), and the failure (1).
	assert.Equal(t, 10, records, "set-device records")

	// Every allocation and free, at the runtime and nested in the driver,
	// on the device the program was on (addresses are reused: counted).
	callKey := func(op string, size, ptr uint64, device int32) string {
		return fmt.Sprintf("%s size=%d ptr=%#x device=%d", op, size, ptr, device)
	}
	wantCalls := map[string]int{}
	for _, c := range truth.Calls {
		switch c.API {
		case "cudaMalloc":
			wantCalls[callKey("alloc", c.Size, c.Ptr, c.Device)]++
		case "cudaFree":
			wantCalls[callKey("free", 0, c.Ptr, c.Device)]++
		}
	}
	runtime, driver := map[string]int{}, map[string]int{}
	for _, e := range sink.events {
		switch e.API {
		case event.APICudaMalloc:
			runtime[callKey("alloc", e.Size, e.Addr, e.Device)]++
		case event.APICudaFree:
			runtime[callKey("free", 0, e.Addr, e.Device)]++
		case event.APICuMemAlloc:
			driver[callKey("alloc", e.Size, e.Addr, e.Device)]++
		case event.APICuMemFree:
			driver[callKey("free", 0, e.Addr, e.Device)]++
		}
	}
	require.Len(t, truth.Calls, calls+15+13, "set-device calls, allocations and frees in the truth")
	assert.Equal(t, wantCalls, runtime, "runtime allocations and frees, with their devices")
	assert.Equal(t, wantCalls, driver, "nested driver allocations and frees, with their devices")
}

// TestDestroyedContextDevice runs ctx_destroy: contexts made with
// cuCtxCreate_v2 and destroyed with cuCtxDestroy_v2, a cuCtxSetCurrent of a
// destroyed one that fails (CUDA_ERROR_INVALID_CONTEXT), and the destroy of
// the thread's current context. An allocation made where the probes cannot
// know the thread's context (after a failed cuCtxSetCurrent: its result is
// not seen; after its current context was destroyed: the driver pops it, and
// what was under it is not traced) carries device unknown, never the
// destroyed context's device; every other one the device it is on.
func TestDestroyedContextDevice(t *testing.T) {
	sink, truth, code := runScenario(t, "ctx_destroy")
	require.Zero(t, code, "exit code")
	assert.Zero(t, sink.lost, "lost events")

	// From the truth, in order: the created context current to the thread
	// (0: another one), and whether the probes can know the thread's device.
	type want struct {
		device    int32
		destroyed int32 // the device of the context destroyed last; -1: none
	}
	// An allocation by its address and size (an address freed is reused).
	key := func(ptr, size uint64) string { return fmt.Sprintf("%#x+%d", ptr, size) }
	wants := map[string]want{}
	var cur uint64
	known := true
	destroyed := event.DeviceUnknown
	failedSets, currentDestroys := 0, 0
	for _, c := range truth.Calls {
		ok := c.Outcome == "ok"
		switch c.API {
		case "cudaSetDevice", "cuCtxSetCurrent":
			if ok {
				cur, known = 0, true
			} else if c.API == "cuCtxSetCurrent" {
				known = false
				failedSets++
			}
		case "cuCtxCreate_v2":
			require.True(t, ok, "cuCtxCreate_v2 in %s", c.Func)
			cur, known = c.Ptr, true
		case "cuCtxDestroy_v2":
			require.True(t, ok, "cuCtxDestroy_v2 in %s", c.Func)
			destroyed = c.Device
			if c.Ptr == cur {
				cur, known = 0, false
				currentDestroys++
			}
		case "cudaMalloc":
			require.True(t, ok, "cudaMalloc in %s", c.Func)
			w := want{device: c.Device, destroyed: destroyed}
			if !known {
				w.device = event.DeviceUnknown
			}
			wants[key(c.Ptr, c.Size)] = w
		}
	}
	// ctx_destroy.c: 6 allocations, one cuCtxSetCurrent that fails, one
	// destroy of the current context.
	require.Len(t, wants, 6, "allocations in the truth")
	require.Equal(t, 1, failedSets, "failed cuCtxSetCurrent calls in the truth")
	require.Equal(t, 1, currentDestroys, "destroys of the current context in the truth")

	got := map[string]int32{}
	for _, e := range sink.events {
		if e.API == event.APICudaMalloc {
			got[key(e.Addr, e.Size)] = e.Device
		}
	}
	require.Len(t, got, len(wants), "cudaMalloc records")
	for k, w := range wants {
		d, ok := got[k]
		require.True(t, ok, "no record of the allocation %s", k)
		if w.destroyed != event.DeviceUnknown {
			assert.NotEqual(t, w.destroyed, d, "allocation %s on the destroyed context's device", k)
		}
		assert.Equal(t, w.device, d, "device of the allocation %s", k)
	}
}
