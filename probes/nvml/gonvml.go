//go:build linux && cgo

package nvml

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"
)

// memoryInfoV2 is the symbol that decides between the two memory calls:
// go-nvml binds DeviceGetMemoryInfo_v2 whether or not the loaded library
// has it, and calling a missing symbol crashes.
const memoryInfoV2 = "nvmlDeviceGetMemoryInfo_v2"

// goNVML is the production Library: go-nvml, which dlopens libnvidia-ml at
// Init. Every nvml.Return becomes an *Error here, so nothing past this file
// sees go-nvml's types.
type goNVML struct {
	lib nvml.Interface
	// path is the library go-nvml loads, checked before it does; empty
	// for an injected nvml.Interface (tests).
	path     string
	memoryV2 bool
	// missing are the optional functions the library exports under none
	// of their names, by function (see processLists and identity).
	missing map[string]bool
}

func newGoNVML(path string) Library {
	return &goNVML{lib: nvml.New(nvml.WithLibraryPath(path)), path: path}
}

// fromInterface wraps any nvml.Interface, go-nvml's mocks included.
func fromInterface(lib nvml.Interface) *goNVML {
	return &goNVML{lib: lib}
}

// check converts ret to an error. nvmlErrorString is the one call NVML
// allows even after a failed nvmlInit, so it is always safe here.
func (g *goNVML) check(fn string, ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return &Error{Func: fn, Code: int(ret), Text: g.lib.ErrorString(ret)}
}

func (g *goNVML) Init() error {
	if g.path != "" {
		// go-nvml drops dlopen's message, and a library without the
		// functions it binds ends the process at the first call (a lazy
		// binding failure). Check first, in the loader's words.
		missing, err := preflight(g.path)
		if err != nil {
			return &Error{Func: "nvmlInit", Code: int(nvml.ERROR_LIBRARY_NOT_FOUND), Text: err.Error()}
		}
		g.missing = missing
	}
	created := g.path != "" && controlNodeMissing()
	ret := g.lib.Init()
	if ret == nvml.ERROR_DRIVER_NOT_LOADED && created {
		removeControlNode()
	}
	if err := g.check("nvmlInit", ret); err != nil {
		return err
	}
	g.memoryV2 = g.lib.Extensions().LookupSymbol(memoryInfoV2) == nil
	return nil
}

// required are the functions go-nvml calls for the Sampler, each by every
// name it may call it by: go-nvml binds the newest version the library
// exports (nvmlInit_v2 over nvmlInit), and the Sampler chooses between the
// two memory calls itself. A library needs one name of each; binding is
// lazy, so the names it lacks are never called.
var required = [][]string{
	{"nvmlInit", "nvmlInit_v2"}, {"nvmlShutdown"}, {"nvmlErrorString"},
	{"nvmlDeviceGetCount", "nvmlDeviceGetCount_v2"},
	{"nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex_v2"},
	{"nvmlDeviceGetName"}, {"nvmlDeviceGetUUID"},
	{"nvmlDeviceGetMemoryInfo", memoryInfoV2},
}

// identity is the device's PCI address call, by all its names, first the
// one it is known by: optional as the process lists are (a library without
// it gives the figures without the address).
var identity = [][]string{{pciInfo, pciInfo + "_v2", pciInfo + "_v3"}}

const pciInfo = "nvmlDeviceGetPciInfo"

// processLists are the two process lists, by all their names, first the
// one they are known by. A library without one under any name still gives
// device figures: the list's calls fail with errMissing instead.
var processLists = [][]string{
	{computeProcesses, computeProcesses + "_v2", computeProcesses + "_v3"},
	{graphicsProcesses, graphicsProcesses + "_v2", graphicsProcesses + "_v3"},
}

const (
	computeProcesses  = "nvmlDeviceGetComputeRunningProcesses"
	graphicsProcesses = "nvmlDeviceGetGraphicsRunningProcesses"
)

// preflight loads path on its own and checks it exports what go-nvml will
// call; it returns the process lists it lacks (see processLists). The
// loader counts references, so go-nvml's own dlopen that follows finds the
// library already mapped.
func preflight(path string) (missing map[string]bool, err error) {
	lib := dl.New(path, dl.RTLD_LAZY|dl.RTLD_LOCAL)
	if err := lib.Open(); err != nil {
		return nil, err
	}
	defer func() { _ = lib.Close() }()
	// exports returns nil when lib has one of names, else the first
	// lookup's error (dlsym's words).
	exports := func(names []string) error {
		var first error
		for _, name := range names {
			err := lib.Lookup(name)
			if err == nil {
				return nil
			}
			if first == nil {
				first = err
			}
		}
		return first
	}
	for _, names := range required {
		if err := exports(names); err != nil {
			if names[0] == "nvmlInit" {
				return nil, fmt.Errorf("%s is not NVIDIA's management library: %w", path, err)
			}
			return nil, fmt.Errorf("%s lacks %s, which vramprof needs: %w", path, strings.Join(names, " and "), err)
		}
	}
	for _, names := range slices.Concat(processLists, identity) {
		if exports(names) != nil {
			if missing == nil {
				missing = make(map[string]bool)
			}
			missing[names[0]] = true
		}
	}
	return missing, nil
}

// missingError is a call to a function the library does not export. It
// matches ErrNotSupported: the figure it would give is not available, and
// asking again will not change that.
type missingError struct{ fn, path string }

func (e *missingError) Error() string {
	return e.fn + ": not exported by " + e.path + " (an older or partial NVML library)"
}

func (e *missingError) Is(target error) bool { return target == ErrNotSupported }

// NVML's nvmlInit, run as root, creates the driver's control node
// /dev/nvidiactl (character device 195:255) before finding that no driver
// is loaded, and leaves it behind. On a machine without the driver the
// sampler removes the node it caused, and nothing else.
const (
	controlNode  = "/dev/nvidiactl"
	controlMajor = 195
	controlMinor = 255
)

func controlNodeMissing() bool {
	_, err := os.Lstat(controlNode)
	return errors.Is(err, fs.ErrNotExist)
}

func removeControlNode() {
	var st unix.Stat_t
	if unix.Lstat(controlNode, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR ||
		unix.Major(st.Rdev) != controlMajor || unix.Minor(st.Rdev) != controlMinor {
		return
	}
	_ = os.Remove(controlNode)
}

func (g *goNVML) Shutdown() error {
	return g.check("nvmlShutdown", g.lib.Shutdown())
}

func (g *goNVML) DeviceCount() (int, error) {
	n, ret := g.lib.DeviceGetCount()
	return n, g.check("nvmlDeviceGetCount", ret)
}

func (g *goNVML) Device(index int) (Device, error) {
	d, ret := g.lib.DeviceGetHandleByIndex(index)
	if err := g.check("nvmlDeviceGetHandleByIndex", ret); err != nil {
		return nil, err
	}
	return &goDevice{g: g, d: d}, nil
}

// goDevice is a device handle; its methods call NVML directly.
type goDevice struct {
	g *goNVML
	d nvml.Device
}

func (d *goDevice) Name() (string, error) {
	s, ret := d.d.GetName()
	return s, d.g.check("nvmlDeviceGetName", ret)
}

func (d *goDevice) UUID() (string, error) {
	s, ret := d.d.GetUUID()
	return s, d.g.check("nvmlDeviceGetUUID", ret)
}

func (d *goDevice) MemoryInfo() (Memory, error) {
	if d.g.memoryV2 {
		m, ret := d.d.GetMemoryInfo_v2()
		if err := d.g.check(memoryInfoV2, ret); err != nil {
			return Memory{}, err
		}
		return Memory{Total: m.Total, Reserved: m.Reserved, Free: m.Free, Used: m.Used}, nil
	}
	m, ret := d.d.GetMemoryInfo()
	if err := d.g.check("nvmlDeviceGetMemoryInfo", ret); err != nil {
		return Memory{}, err
	}
	return Memory{Total: m.Total, Free: m.Free, Used: m.Used}, nil
}

func (d *goDevice) PCIBusID() (string, error) {
	if d.g.missing[pciInfo] {
		return "", &missingError{fn: pciInfo, path: d.g.path}
	}
	p, ret := d.d.GetPciInfo()
	if err := d.g.check(pciInfo, ret); err != nil {
		return "", err
	}
	// The v3 layout's busId; v1 and v2 fill only busIdLegacy.
	if id := cString(p.BusId[:]); id != "" {
		return id, nil
	}
	return cString(p.BusIdLegacy[:]), nil
}

// cString is the NUL-terminated string in b.
func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func (d *goDevice) ComputeProcesses() ([]Process, error) {
	if d.g.missing[computeProcesses] {
		return nil, &missingError{fn: computeProcesses, path: d.g.path}
	}
	ps, ret := d.d.GetComputeRunningProcesses()
	return convertProcesses(ps), d.g.check(computeProcesses, ret)
}

func (d *goDevice) GraphicsProcesses() ([]Process, error) {
	if d.g.missing[graphicsProcesses] {
		return nil, &missingError{fn: graphicsProcesses, path: d.g.path}
	}
	ps, ret := d.d.GetGraphicsRunningProcesses()
	return convertProcesses(ps), d.g.check(graphicsProcesses, ret)
}

func convertProcesses(ps []nvml.ProcessInfo) []Process {
	if len(ps) == 0 {
		return nil
	}
	out := make([]Process, len(ps))
	for i, p := range ps {
		out[i] = Process{PID: p.Pid, UsedBytes: p.UsedGpuMemory, GPUInstance: p.GpuInstanceId, ComputeInstance: p.ComputeInstanceId}
	}
	return out
}
