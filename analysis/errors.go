package analysis

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/vramprof/vramprof/probes/event"
)

// The runtime (cudaError_t, driver_types.h) and the driver (CUresult,
// cuda.h) number their errors apart: 3 is cudaErrorInitializationError from
// libcudart and CUDA_ERROR_NOT_INITIALIZED from libcuda; 35 is
// cudaErrorInsufficientDriver, a code the driver never returns. A return
// code is named by the API that returned it. Values from NVIDIA's headers.

// runtimeErrors names the cudaError_t codes an allocation can return.
var runtimeErrors = map[int32]string{
	1:   "cudaErrorInvalidValue",
	2:   "cudaErrorMemoryAllocation",
	3:   "cudaErrorInitializationError",
	4:   "cudaErrorCudartUnloading",
	17:  "cudaErrorInvalidDevicePointer",
	34:  "cudaErrorStubLibrary",
	35:  "cudaErrorInsufficientDriver",
	36:  "cudaErrorCallRequiresNewerDriver",
	46:  "cudaErrorDevicesUnavailable",
	100: "cudaErrorNoDevice",
	101: "cudaErrorInvalidDevice",
	201: "cudaErrorDeviceUninitialized",
	400: "cudaErrorInvalidResourceHandle",
	800: "cudaErrorNotPermitted",
	801: "cudaErrorNotSupported",
	803: "cudaErrorSystemDriverMismatch",
	804: "cudaErrorCompatNotSupportedOnDevice",
	999: "cudaErrorUnknown",
}

// driverErrors names the CUresult codes an allocation can return.
var driverErrors = map[int32]string{
	1:   "CUDA_ERROR_INVALID_VALUE",
	2:   "CUDA_ERROR_OUT_OF_MEMORY",
	3:   "CUDA_ERROR_NOT_INITIALIZED",
	4:   "CUDA_ERROR_DEINITIALIZED",
	34:  "CUDA_ERROR_STUB_LIBRARY",
	46:  "CUDA_ERROR_DEVICE_UNAVAILABLE",
	100: "CUDA_ERROR_NO_DEVICE",
	101: "CUDA_ERROR_INVALID_DEVICE",
	201: "CUDA_ERROR_INVALID_CONTEXT",
	400: "CUDA_ERROR_INVALID_HANDLE",
	500: "CUDA_ERROR_NOT_FOUND",
	800: "CUDA_ERROR_NOT_PERMITTED",
	801: "CUDA_ERROR_NOT_SUPPORTED",
	803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	999: "CUDA_ERROR_UNKNOWN",
}

// ErrorName renders the return code of a call to api with the name its
// library gives it: "2 (cudaErrorMemoryAllocation)" from the runtime,
// "3 (CUDA_ERROR_NOT_INITIALIZED)" from the driver, the bare number when
// unknown (or from a framework's allocator).
func ErrorName(api event.API, ret int32) string {
	names := runtimeErrors
	if api.Driver() {
		names = driverErrors
	}
	if n, ok := names[ret]; ok {
		return fmt.Sprintf("%d (%s)", ret, n)
	}
	return fmt.Sprint(ret)
}

// errorKey groups failures by library and code.
type errorKey struct {
	driver bool
	ret    int32
}

// callErrors accumulates one errorKey's failures of a process.
type callErrors struct {
	first  Allocation
	count  uint64
	bytes  uint64
	stacks map[event.StackID]*Usage
}

// noteFailure adds a failed allocation to its process's error groups.
func (sp *account) noteFailure(e *event.Event, layer event.Layer) {
	k := errorKey{e.API.Driver(), e.Ret}
	if sp.errs == nil {
		sp.errs = map[errorKey]*callErrors{}
	}
	ce := sp.errs[k]
	if ce == nil {
		ce = &callErrors{stacks: map[event.StackID]*Usage{},
			first: Allocation{Time: e.Time, Addr: e.Addr, Size: e.Size, Device: e.Device, API: e.API, Layer: layer, Stack: e.Stack}}
		sp.errs[k] = ce
	}
	ce.count++
	ce.bytes += e.Size
	u := ce.stacks[e.Stack]
	if u == nil {
		u = &Usage{}
		ce.stacks[e.Stack] = u
	}
	u.Add(e.Size)
}

// failedCalls renders a process's error groups, first failure first.
func (sp *account) failedCalls() []FailedCalls {
	var out []FailedCalls
	for k, ce := range sp.errs {
		out = append(out, FailedCalls{Error: ErrorName(ce.first.API, k.ret), Ret: k.ret, Driver: k.driver,
			Count: ce.count, Bytes: ce.bytes, First: ce.first, Stacks: topStacks(ce.stacks, 0)})
	}
	slices.SortFunc(out, func(x, y FailedCalls) int {
		return cmp.Or(cmp.Compare(x.First.Time, y.First.Time), cmp.Compare(x.Ret, y.Ret))
	})
	return out
}
