package exporter

import (
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vramprof/vramprof/probes/event"
)

// The device layer (NVML) under serve: the session's NVML sampler writes
// NVMLStatus, DeviceInfo and Sample records into the Exporter beside the
// probes' records, and the last of each is served as gauges. GPUs are
// labelled as dcgm-exporter labels them (gpuLabels): `gpu` is NVML's index
// (PCI bus order, which CUDA's numbering in the `device` label of the
// other metrics need not follow), `UUID`, `pci_bus_id` (NVML's PCI
// address, empty when the library does not give it), `modelName` and
// `Hostname`, so that a query joins them with DCGM_FI_DEV_FB_USED on
// (Hostname, gpu, UUID) or (Hostname, pci_bus_id). dcgm-exporter's
// `device` ("nvidia<minor>") is not served: `device` is CUDA's index in
// vramprof's own series, and one label name means one thing. When NVML
// is unavailable (no library, no driver, no device, or sampling failing
// now) no device figure is served, only MetricNVMLAvailable 0 with the
// reason: a missing figure must not read as zero bytes. A GPU whose
// processes NVML does not list (MIG partitions, vGPU guests, a library
// without the process lists) keeps its device figures and gets
// MetricNVMLProcessesAvailable 0 with the sampler's one-line note as the
// reason, so that an absent per-process series says why.

// NVML metric names.
const (
	MetricNVMLAvailable        = "vramprof_nvml_available"
	MetricDeviceTotalBytes     = "vramprof_device_memory_total_bytes"
	MetricDeviceUsedBytes      = "vramprof_device_memory_used_bytes"
	MetricDeviceFreeBytes      = "vramprof_device_memory_free_bytes"
	MetricNVMLProcessUsedBytes = "vramprof_nvml_process_used_bytes"
	// MetricNVMLProcessesAvailable is per GPU: 1 while NVML lists its
	// processes, 0 with the reason when it cannot.
	MetricNVMLProcessesAvailable = "vramprof_nvml_processes_available"
)

// gpuLabels label the GPU gauges, as dcgm-exporter names them.
var gpuLabels = []string{"gpu", "UUID", "pci_bus_id", "modelName", "Hostname"}

// gpuLabelValues are d's values of gpuLabels on the node hostname.
func gpuLabelValues(d nvmlDevice, hostname string) []string {
	return []string{strconv.Itoa(int(d.info.Index)), d.info.UUID, d.info.PCIBusID, d.info.Name, hostname}
}

var (
	descNVML = prometheus.NewDesc(MetricNVMLAvailable,
		"1 when NVML's device figures are served; 0 with the reason when not (no library, no driver, no device, sampling failing). Absent with --nvml off.",
		[]string{"reason"}, nil)
	descDevTotal = prometheus.NewDesc(MetricDeviceTotalBytes,
		"Device memory capacity per NVML, bytes.", gpuLabels, nil)
	descDevUsed = prometheus.NewDesc(MetricDeviceUsedBytes,
		"Device memory used by every process and the driver per NVML's last sample, bytes.", gpuLabels, nil)
	descDevFree = prometheus.NewDesc(MetricDeviceFreeBytes,
		"Device memory free per NVML's last sample, bytes.", gpuLabels, nil)
	descDevProcs = prometheus.NewDesc(MetricNVMLProcessesAvailable,
		"1 when NVML lists the GPU's processes (vramprof_nvml_process_used_bytes); 0 with the reason when it cannot (MIG partitions, vGPU guests, a library without process lists).",
		append(slices.Clone(gpuLabels), "reason"), nil)
)

// nvmlState is the device layer as the last NVML records gave it; guarded
// by Exporter.mu.
type nvmlState struct {
	seen      bool // an NVMLStatus arrived: NVML is on
	available bool
	reason    string
	devices   map[int32]*nvmlDevice // by NVML index
}

// nvmlDevice is one device's description and last sample.
type nvmlDevice struct {
	info    event.DeviceInfo
	sample  event.Sample
	sampled bool
}

// writeNVML keeps an NVML record (x.mu held).
func (x *Exporter) writeNVML(rec event.Record) {
	n := &x.nvml
	if n.devices == nil {
		n.devices = make(map[int32]*nvmlDevice)
	}
	device := func(i int32) *nvmlDevice {
		d := n.devices[i]
		if d == nil {
			d = &nvmlDevice{info: event.DeviceInfo{Index: i}}
			n.devices[i] = d
		}
		return d
	}
	switch r := rec.(type) {
	case *event.NVMLStatus:
		n.seen, n.available, n.reason = true, r.Available, r.Reason
	case *event.DeviceInfo:
		device(r.Index).info = *r
	case *event.Sample:
		d := device(r.Device)
		d.sample, d.sampled = *r, true
		// The process list is the sampler's own slice: keep a copy.
		d.sample.Processes = slices.Clone(r.Processes)
	}
}

// nvmlView is what a scrape serves of the device layer.
type nvmlView struct {
	on, available bool
	reason        string
	hostname      string       // the Hostname label
	devices       []nvmlDevice // sampled ones, by NVML index
}

// nvmlNow copies the device layer for a scrape.
func (x *Exporter) nvmlNow() nvmlView {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.nvmlViewLocked()
}

// nvmlViewLocked is nvmlNow with x.mu held.
func (x *Exporter) nvmlViewLocked() nvmlView {
	n := &x.nvml
	v := nvmlView{on: n.seen, available: n.available, reason: n.reason, hostname: x.opts.Hostname}
	if !v.available {
		return v
	}
	for _, d := range n.devices {
		if d.sampled {
			v.devices = append(v.devices, *d)
		}
	}
	slices.SortFunc(v.devices, func(a, b nvmlDevice) int { return int(a.info.Index) - int(b.info.Index) })
	return v
}

// collectNVML sends the device gauges (nothing when NVML is off, only the
// reason when it is unavailable).
func collectNVML(ch chan<- prometheus.Metric, v nvmlView) {
	if !v.on {
		return
	}
	avail := 0.0
	if v.available {
		avail = 1
	}
	ch <- prometheus.MustNewConstMetric(descNVML, prometheus.GaugeValue, avail, v.reason)
	for _, d := range v.devices {
		lv := gpuLabelValues(d, v.hostname)
		total := d.sample.TotalBytes
		if total == 0 {
			total = d.info.TotalBytes
		}
		ch <- prometheus.MustNewConstMetric(descDevTotal, prometheus.GaugeValue, float64(total), lv...)
		ch <- prometheus.MustNewConstMetric(descDevUsed, prometheus.GaugeValue, float64(d.sample.UsedBytes), lv...)
		ch <- prometheus.MustNewConstMetric(descDevFree, prometheus.GaugeValue, float64(d.sample.FreeBytes), lv...)
		listed := 1.0
		if d.info.ProcessesNote != "" {
			listed = 0
		}
		ch <- prometheus.MustNewConstMetric(descDevProcs, prometheus.GaugeValue, listed, append(lv, d.info.ProcessesNote)...)
	}
}

// nvmlUse is NVML's figure for one process, by NVML index, on each
// device that lists it. 0 is NVML's "cannot tell": left out.
func nvmlUse(v nvmlView, pid uint32) map[int32]uint64 {
	var out map[int32]uint64
	for _, d := range v.devices {
		var used uint64 // a process can be listed twice (compute and graphics)
		for _, u := range d.sample.Processes {
			if u.PID == pid {
				used += u.UsedBytes
			}
		}
		if used == 0 {
			continue
		}
		if out == nil {
			out = make(map[int32]uint64)
		}
		out[d.info.Index] = used
	}
	return out
}
