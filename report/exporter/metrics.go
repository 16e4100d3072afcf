package exporter

import (
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

// Metric names. Figures are device memory at the segment layer (what the
// process got from the driver), as report.json's totals count it.
const (
	MetricLiveBytes         = "vramprof_live_bytes"
	MetricPeakBytes         = "vramprof_peak_bytes"
	MetricProcessPeakBytes  = "vramprof_process_peak_bytes"
	MetricAllocations       = "vramprof_allocations_total"
	MetricFrees             = "vramprof_frees_total"
	MetricAllocatedBytes    = "vramprof_allocated_bytes_total"
	MetricFailedAllocations = "vramprof_failed_allocations_total"
	MetricUnknownFrees      = "vramprof_unknown_frees_total"
	MetricFindings          = "vramprof_findings"
	MetricLostEvents        = "vramprof_lost_events_total"
	MetricLateEvents        = "vramprof_late_events_total"
	MetricProcesses         = "vramprof_processes"
	MetricProcessExited     = "vramprof_process_exited"
)

// procLabels label every per-process series. A process is its pid and its
// start (/proc/PID/stat's start time, clock ticks since boot; 0 when it was
// gone before it could be read): a PID reused while the exited process
// that had it is still held has a series of each. cgroup and container
// place it on the node.
var procLabels = []string{"pid", "start", "command", "cgroup", "container"}

var (
	descLive = prometheus.NewDesc(MetricLiveBytes,
		"Device memory the process holds now, per device (\"unknown\" before its device is seen), bytes.",
		append(procLabels, "device"), nil)
	descPeak = prometheus.NewDesc(MetricPeakBytes,
		"Most device memory the process held at once on the device since tracing began, bytes.",
		append(procLabels, "device"), nil)
	descProcPeak = prometheus.NewDesc(MetricProcessPeakBytes,
		"Most device memory the process held at once across its devices since tracing began, bytes.",
		procLabels, nil)
	descAllocs = prometheus.NewDesc(MetricAllocations,
		"Successful device memory allocations since tracing began.", procLabels, nil)
	descFrees = prometheus.NewDesc(MetricFrees,
		"Frees that released a traced allocation since tracing began.", procLabels, nil)
	descAllocated = prometheus.NewDesc(MetricAllocatedBytes,
		"Bytes of successful device memory allocations since tracing began.", procLabels, nil)
	descFailed = prometheus.NewDesc(MetricFailedAllocations,
		"Device memory allocation calls that returned an error.", procLabels, nil)
	descUnknown = prometheus.NewDesc(MetricUnknownFrees,
		"Frees of memory allocated before tracing began (or missed).", procLabels, nil)
	descFindings = prometheus.NewDesc(MetricFindings,
		"Findings the analysis makes of the process so far, by kind (leak, peak, oom, fragmentation, churn...).",
		append(procLabels, "kind"), nil)
	descExited = prometheus.NewDesc(MetricProcessExited,
		"1 when the process has exited: its figures are final and go away after the next scrapes.",
		procLabels, nil)
	descLost = prometheus.NewDesc(MetricLostEvents,
		"Records lost (ring buffer full, returns without their call, malformed), all processes: figures may be off by these.",
		nil, nil)
	descLate = prometheus.NewDesc(MetricLateEvents,
		"Events that arrived too late to be placed in effect order, all processes.", nil, nil)
	descProcs = prometheus.NewDesc(MetricProcesses,
		"Processes whose figures are held (running and recently exited).", nil, nil)
)

// Collector returns the Prometheus collector of x's figures. A scrape that
// reports an exited process's figures lets Sweep drop it after the grace
// period.
func (x *Exporter) Collector() prometheus.Collector { return collector{x} }

type collector struct{ x *Exporter }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLive, descPeak, descProcPeak, descAllocs, descFrees, descAllocated,
		descFailed, descUnknown, descFindings, descExited, descLost, descLate, descProcs,
		descNVML, descDevTotal, descDevUsed, descDevFree, descProcNVML} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	lost := c.x.Lost()
	ch <- prometheus.MustNewConstMetric(descLost, prometheus.CounterValue, float64(lost.Total))
	ch <- prometheus.MustNewConstMetric(descLate, prometheus.CounterValue, float64(lost.Late))
	nv := c.x.nvmlSnapshot()
	collectNVML(ch, nv)
	procs := c.x.processes()
	ch <- prometheus.MustNewConstMetric(descProcs, prometheus.GaugeValue, float64(len(procs)))
	// Latest first: two instances that cannot be told apart (a PID reused
	// by processes gone before their start could be read) give the latest's
	// series only, as a registry refuses a label set twice.
	seen := map[string]bool{}
	for _, p := range slices.Backward(procs) {
		p.mu.Lock()
		lv := []string{strconv.FormatUint(uint64(p.pid), 10), strconv.FormatUint(p.start, 10), p.command, p.cgroup, p.container}
		exited := !p.exited.IsZero()
		key := strings.Join(lv, "\x00")
		if seen[key] {
			p.reported = exited
			p.mu.Unlock()
			continue
		}
		seen[key] = true
		if exited {
			p.reported = true
		}
		p.mu.Unlock()
		collectProcess(ch, p.snapshot(), lv, exited)
		if !exited {
			// NVML counts by PID: its figure is the running process's.
			collectProcessNVML(ch, nv, p.pid, lv)
		}
	}
}

// collectProcess sends one process's series. A PID's Result can hold
// earlier instances (an exec): the figures are the latest instance's.
func collectProcess(ch chan<- prometheus.Metric, res *analysis.Result, lv []string, exited bool) {
	gauge := func(d *prometheus.Desc, v uint64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), append(lv[:len(lv):len(lv)], extra...)...)
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
	}
	var pr *analysis.Process
	for i := range res.Processes {
		if res.Processes[i].SupersededAt == 0 {
			pr = &res.Processes[i]
		}
	}
	var t analysis.Totals
	if pr != nil {
		t = pr.Totals
		for _, d := range pr.Devices {
			gauge(descLive, d.LiveBytesAtEnd, deviceLabel(d.Index))
			gauge(descPeak, d.PeakBytes, deviceLabel(d.Index))
		}
	}
	gauge(descProcPeak, t.PeakBytes)
	counter(descAllocs, t.Allocations)
	counter(descFrees, t.Frees)
	counter(descAllocated, t.AllocatedBytes)
	counter(descFailed, t.FailedAllocations)
	counter(descUnknown, t.UnknownFrees)
	kinds := map[string]uint64{}
	for _, f := range res.Findings {
		if pr == nil || f.PID == pr.PID && f.ProcessStart == pr.Start {
			kinds[f.Kind]++
		}
	}
	for kind, n := range kinds {
		gauge(descFindings, n, kind)
	}
	var e uint64
	if exited {
		e = 1
	}
	gauge(descExited, e)
}

func deviceLabel(d int32) string {
	if d == event.DeviceUnknown {
		return "unknown"
	}
	return strconv.Itoa(int(d))
}
