package exporter

import (
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vramprof/vramprof/probes/event"
)

// The device layer (NVML) under serve: the session's NVML sampler writes
// NVMLStatus, DeviceInfo and Sample records into the Exporter beside the
// probes' records, and the last of each is served as gauges. Devices are
// labelled by NVML's index (PCI bus order, which CUDA's numbering in the
// `device` label of the other metrics need not follow) and UUID. When NVML
// is unavailable (no library, no driver, no device, or sampling failing
// now) no device figure is served, only MetricNVMLAvailable 0 with the
// reason: a missing figure must not read as zero bytes.

// NVML metric names.
const (
	MetricNVMLAvailable        = "vramprof_nvml_available"
	MetricDeviceTotalBytes     = "vramprof_device_memory_total_bytes"
	MetricDeviceUsedBytes      = "vramprof_device_memory_used_bytes"
	MetricDeviceFreeBytes      = "vramprof_device_memory_free_bytes"
	MetricNVMLProcessUsedBytes = "vramprof_nvml_process_used_bytes"
)

// deviceLabels label the device gauges.
var deviceLabels = []string{"nvml_index", "uuid", "name"}

var (
	descNVML = prometheus.NewDesc(MetricNVMLAvailable,
		"1 when NVML's device figures are served; 0 with the reason when not (no library, no driver, no device, sampling failing). Absent with --nvml off.",
		[]string{"reason"}, nil)
	descDevTotal = prometheus.NewDesc(MetricDeviceTotalBytes,
		"Device memory capacity per NVML, bytes.", deviceLabels, nil)
	descDevUsed = prometheus.NewDesc(MetricDeviceUsedBytes,
		"Device memory used by every process and the driver per NVML's last sample, bytes.", deviceLabels, nil)
	descDevFree = prometheus.NewDesc(MetricDeviceFreeBytes,
		"Device memory free per NVML's last sample, bytes.", deviceLabels, nil)
	descProcNVML = prometheus.NewDesc(MetricNVMLProcessUsedBytes,
		"Device memory NVML counts for the traced process on the device (CUDA context and memory from before tracing included), bytes; absent when NVML cannot tell.",
		append(procLabels[:len(procLabels):len(procLabels)], "nvml_index", "uuid"), nil)
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
	devices       []nvmlDevice // sampled ones, by NVML index
}

// nvmlSnapshot copies the device layer for a scrape.
func (x *Exporter) nvmlSnapshot() nvmlView {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := &x.nvml
	v := nvmlView{on: n.seen, available: n.available, reason: n.reason}
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
		lv := []string{strconv.Itoa(int(d.info.Index)), d.info.UUID, d.info.Name}
		total := d.sample.TotalBytes
		if total == 0 {
			total = d.info.TotalBytes
		}
		ch <- prometheus.MustNewConstMetric(descDevTotal, prometheus.GaugeValue, float64(total), lv...)
		ch <- prometheus.MustNewConstMetric(descDevUsed, prometheus.GaugeValue, float64(d.sample.UsedBytes), lv...)
		ch <- prometheus.MustNewConstMetric(descDevFree, prometheus.GaugeValue, float64(d.sample.FreeBytes), lv...)
	}
}

// collectProcessNVML sends NVML's figure for one process (labels lv) on
// each device that lists it. 0 is NVML's "cannot tell": no series then.
func collectProcessNVML(ch chan<- prometheus.Metric, v nvmlView, pid uint32, lv []string) {
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
		ch <- prometheus.MustNewConstMetric(descProcNVML, prometheus.GaugeValue, float64(used),
			append(lv[:len(lv):len(lv)], strconv.Itoa(int(d.info.Index)), d.info.UUID)...)
	}
}
