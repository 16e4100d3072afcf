// Package nvml samples GPU memory at the device layer (see DESIGN.md, "The
// memory model"): each device's total, used and free bytes and the memory of
// each process on it, as NVIDIA's management library reports them, on a
// clock. It turns them into [event.DeviceInfo], [event.Sample] and
// [event.NVMLStatus] records, so the rest of vramprof never imports go-nvml.
//
// Besides probes/sigstate (a constructor that reads the signal state a
// process starts with), this is the only package that uses cgo. The
// production [Library] is
// github.com/NVIDIA/go-nvml, which loads libnvidia-ml.so.1 with dlopen when
// the sampler opens, not at program start: a vramprof binary runs on
// machines without the NVIDIA driver, and [Open] then returns an error
// matching [ErrUnavailable] that says what failed, in one line:
//
//	NVML unavailable: nvmlInit: Driver Not Loaded
//
// The caller records that with [Status] and carries on without device
// figures; it is not a reason to stop tracing.
//
// Lifecycle: [Open] initialises NVML and reads the devices; [Sampler.Run]
// (or [Sampler.Sample], by hand) reads them; [Sampler.Close] shuts NVML
// down. A Sampler must be Closed. Its methods are safe for concurrent use.
//
// The figures are the driver's, not traced calls. A process's NVML usage
// includes its CUDA context, library workspaces and memory allocated before
// vramprof attached: the analysis reports the gap to the traced segments
// instead of hiding it. NVML numbers devices in PCI bus order, which CUDA's
// device numbering need not follow; the UUID identifies a device in both.
//
// Imports, besides the standard library: probes/event,
// github.com/NVIDIA/go-nvml and golang.org/x/sys.
package nvml
