package exporter

import (
	"bytes"
	"strconv"
	"strings"
)

// Which GPU is a process's CUDA device? The traced series' `device` label
// is CUDA's index in the process, which NVML's (and dcgm-exporter's `gpu`)
// need not follow: CUDA numbers the devices it can see, fastest first
// (CUDA_DEVICE_ORDER=FASTEST_FIRST, ties broken by PCI bus order) unless
// CUDA_DEVICE_ORDER=PCI_BUS_ID, restricted and reordered by
// CUDA_VISIBLE_DEVICES; in a container the NVIDIA container toolkit shows
// only the GPUs NVIDIA_VISIBLE_DEVICES names. gpuOf applies those rules
// where they decide the answer: PCI bus order (asked for, or every visible
// GPU the same model, so that speed ties everywhere), indices and UUIDs
// (or their prefixes) in the lists. Anything else (MIG devices, a mixed
// node in fastest-first order) is left unknown rather than guessed: the
// series then carry empty `gpu` and `UUID`.

// cudaEnv is the part of a process's environment that decides its CUDA
// numbering.
type cudaEnv struct {
	order                      string // CUDA_DEVICE_ORDER
	cudaVisible, nvidiaVisible string // CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES
	cudaSet                    bool   // CUDA_VISIBLE_DEVICES is set (even empty: no device)
}

// parseCUDAEnv keeps the CUDA variables of an environ block (NUL
// separated): nothing else of the environment is kept.
func parseCUDAEnv(b []byte) cudaEnv {
	var e cudaEnv
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if !ok {
			continue
		}
		switch k {
		case "CUDA_DEVICE_ORDER":
			e.order = v
		case "CUDA_VISIBLE_DEVICES":
			e.cudaVisible, e.cudaSet = v, true
		case "NVIDIA_VISIBLE_DEVICES":
			e.nvidiaVisible = v
		}
	}
	return e
}

// gpuOf returns the NVML device that CUDA device d of a process is, given
// its environment, whether it runs in a container, and the NVML devices in
// index order; ok is false when the rules above do not decide it.
func gpuOf(e cudaEnv, inContainer bool, d int32, devs []nvmlDevice) (nvmlDevice, bool) {
	if d < 0 || len(devs) == 0 {
		return nvmlDevice{}, false
	}
	vis := devs
	if v := e.nvidiaVisible; inContainer && v != "" && v != "all" {
		// The toolkit's list: host NVML indices or UUIDs.
		var ok bool
		if vis, ok = pick(devs, v); !ok {
			return nvmlDevice{}, false
		}
	}
	if e.order != "PCI_BUS_ID" {
		for _, g := range vis {
			if g.info.Name != vis[0].info.Name {
				return nvmlDevice{}, false // fastest first on a mixed node
			}
		}
	}
	if e.cudaSet {
		var ok bool
		if vis, ok = pick(vis, e.cudaVisible); !ok {
			return nvmlDevice{}, false
		}
	}
	if int(d) >= len(vis) {
		return nvmlDevice{}, false
	}
	return vis[d], true
}

// pick applies a device list (CUDA_VISIBLE_DEVICES' syntax: indices into
// devs or UUID prefixes, comma separated; CUDA ignores the entries after
// the first invalid one) to devs. ok is false for what gpuOf does not
// decide: MIG devices, "none"/"void".
func pick(devs []nvmlDevice, list string) (out []nvmlDevice, ok bool) {
	if list == "none" || list == "void" {
		return nil, false
	}
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if strings.HasPrefix(f, "MIG-") {
			return nil, false
		}
		if i, err := strconv.Atoi(f); err == nil {
			if i < 0 || i >= len(devs) {
				break
			}
			out = append(out, devs[i])
			continue
		}
		if !strings.HasPrefix(f, "GPU-") {
			break
		}
		var found []nvmlDevice
		for _, g := range devs {
			if strings.HasPrefix(g.info.UUID, f) {
				found = append(found, g)
			}
		}
		if len(found) != 1 {
			break // unknown or ambiguous: CUDA stops here too
		}
		out = append(out, found[0])
	}
	return out, true
}
