package exporter

import (
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

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
	MetricRunningProcesses  = "vramprof_running_processes"
	MetricTracedProcesses   = "vramprof_traced_processes_total"
)

// descs are an Exporter's metric descriptions: their labels depend on
// Options.PerProcess.
type descs struct {
	live, peak, procPeak, allocs, frees, allocated, failed, unknown *prometheus.Desc
	findings, exited, running, traced, procNVML                     *prometheus.Desc
}

func newDescs(perProcess bool) *descs {
	lv := labelNames(perProcess)
	with := func(extra ...string) []string { return append(labelNames(perProcess), extra...) }
	d := &descs{
		live: prometheus.NewDesc(MetricLiveBytes,
			"Device memory the running processes hold now, per device (CUDA's index; \"unknown\" before it is seen; gpu and UUID: the GPU it is, as dcgm-exporter names it, when known), bytes.",
			with("device", "gpu", "UUID"), nil),
		peak: prometheus.NewDesc(MetricPeakBytes,
			"Most device memory one process held at once on the device since tracing began, bytes.",
			with("device", "gpu", "UUID"), nil),
		procPeak: prometheus.NewDesc(MetricProcessPeakBytes,
			"Most device memory one process held at once across its devices since tracing began, bytes.",
			lv, nil),
		allocs: prometheus.NewDesc(MetricAllocations,
			"Successful device memory allocations since tracing began.", lv, nil),
		frees: prometheus.NewDesc(MetricFrees,
			"Frees that released a traced allocation since tracing began.", lv, nil),
		allocated: prometheus.NewDesc(MetricAllocatedBytes,
			"Bytes of successful device memory allocations since tracing began.", lv, nil),
		failed: prometheus.NewDesc(MetricFailedAllocations,
			"Device memory allocation calls that returned an error.", lv, nil),
		unknown: prometheus.NewDesc(MetricUnknownFrees,
			"Frees of memory allocated before tracing began (or missed).", lv, nil),
		findings: prometheus.NewDesc(MetricFindings,
			"Findings the analysis makes of the processes held, by kind (leak, peak, oom, fragmentation, churn...).",
			with("kind"), nil),
		running: prometheus.NewDesc(MetricRunningProcesses,
			"Traced processes running now.", lv, nil),
		traced: prometheus.NewDesc(MetricTracedProcesses,
			"Processes (and exec'd images) traced since the series began.", lv, nil),
		procNVML: prometheus.NewDesc(MetricNVMLProcessUsedBytes,
			"Device memory NVML counts for the running processes on the GPU (CUDA context and memory from before tracing included), bytes; absent when NVML cannot tell.",
			append(with(), gpuLabels...), nil),
	}
	if perProcess {
		d.exited = prometheus.NewDesc(MetricProcessExited,
			"1 when the process has exited (or another session traces it now): its figures are final and go away after the next scrapes.",
			lv, nil)
	}
	return d
}

var (
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
func (x *Exporter) Collector() prometheus.Collector {
	return collector{x: x, d: newDescs(x.opts.PerProcess)}
}

type collector struct {
	x *Exporter
	d *descs
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	d := c.d
	for _, d := range []*prometheus.Desc{d.live, d.peak, d.procPeak, d.allocs, d.frees, d.allocated, d.failed,
		d.unknown, d.findings, d.running, d.traced, d.procNVML, descLost, descLate, descProcs,
		descNVML, descDevTotal, descDevUsed, descDevFree} {
		ch <- d
	}
	if d.exited != nil {
		ch <- d.exited
	}
}

// series is what a scrape sums for one label set.
type series struct {
	figures
	live     map[devKey]uint64 // running members' live bytes, by device
	findings map[string]uint64 // by kind
	nvml     map[int32]uint64  // running members' NVML use, by NVML index
	running  uint64
	exited   bool // PerProcess: the process has exited
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	x := c.x
	lost := x.Lost()
	ch <- prometheus.MustNewConstMetric(descLost, prometheus.CounterValue, float64(lost.Total))
	ch <- prometheus.MustNewConstMetric(descLate, prometheus.CounterValue, float64(lost.Late))
	nv := x.nvmlNow()
	collectNVML(ch, nv)

	// One consistent view: Sweep moves a dropped process's figures into
	// its group under x.mu, so a member is counted either held or retired.
	x.mu.Lock()
	procs := make([]*proc, 0, len(x.procs))
	for p := range x.procs {
		procs = append(procs, p)
	}
	all := make(map[groupKey]*series, len(x.groups))
	for k, g := range x.groups {
		s := &series{}
		s.merge(g.retired)
		all[k] = s
	}
	x.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descProcs, prometheus.GaugeValue, float64(len(procs)))
	slices.SortFunc(procs, func(a, b *proc) int { return int(a.seq) - int(b.seq) })

	get := func(k groupKey) *series {
		s := all[k]
		if s == nil {
			s = &series{}
			all[k] = s
		}
		return s
	}
	for _, p := range procs {
		res := p.soFar()
		p.mu.Lock()
		exited := !p.exited.IsZero()
		if exited {
			p.reported = true
		}
		p.mu.Unlock()
		gm := x.gpuMapOf(p, nv)
		for i := range res.Processes {
			pr := &res.Processes[i]
			k := x.key(p, pr.Start)
			s := get(k)
			s.add(pr, gm)
			current := pr.SupersededAt == 0
			for _, f := range res.Findings {
				if f.PID == pr.PID && f.ProcessStart == pr.Start {
					if s.findings == nil {
						s.findings = make(map[string]uint64)
					}
					s.findings[f.Kind]++
				}
			}
			if !current {
				continue // an image exec replaced: its memory went with it
			}
			s.exited = exited
			if exited && !x.opts.PerProcess {
				continue // its memory died with it
			}
			for _, d := range pr.Devices {
				if s.live == nil {
					s.live = make(map[devKey]uint64)
				}
				s.live[gm(d.Index)] += d.LiveBytesAtEnd
			}
			if !exited {
				s.running++
				// NVML counts by PID: its figure is the running process's.
				for idx, used := range nvmlUse(nv, p.pid) {
					if s.nvml == nil {
						s.nvml = make(map[int32]uint64)
					}
					s.nvml[idx] += used
				}
			}
		}
	}
	for k, s := range all {
		c.collectSeries(ch, k.values(x.opts.PerProcess), s, nv)
	}
}

// collectSeries sends one label set's series.
func (c collector) collectSeries(ch chan<- prometheus.Metric, lv []string, s *series, nv nvmlView) {
	d := c.d
	gauge := func(desc *prometheus.Desc, v uint64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(v), append(lv[:len(lv):len(lv)], extra...)...)
	}
	counter := func(desc *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), lv...)
	}
	for dev, v := range s.devPeak {
		gauge(d.peak, v, dev.device, dev.gpu, dev.uuid)
	}
	for dev := range s.devPeak {
		// Every device the group used has a live series, 0 once its
		// members are gone: a panel shows the drop, not a gap.
		gauge(d.live, s.live[dev], dev.device, dev.gpu, dev.uuid)
	}
	for dev, v := range s.live {
		if _, ok := s.devPeak[dev]; !ok {
			gauge(d.live, v, dev.device, dev.gpu, dev.uuid)
		}
	}
	gauge(d.procPeak, s.procPeak)
	counter(d.allocs, s.allocs)
	counter(d.frees, s.frees)
	counter(d.allocated, s.allocated)
	counter(d.failed, s.failed)
	counter(d.unknown, s.unknown)
	for kind, n := range s.findings {
		gauge(d.findings, n, kind)
	}
	gauge(d.running, s.running)
	counter(d.traced, s.traced)
	if d.exited != nil {
		var e uint64
		if s.exited {
			e = 1
		}
		gauge(d.exited, e)
	}
	for _, dev := range nv.devices {
		if used := s.nvml[dev.info.Index]; used > 0 {
			gauge(d.procNVML, used, gpuLabelValues(dev, nv.hostname)...)
		}
	}
}

func deviceLabel(d int32) string {
	if d == event.DeviceUnknown {
		return "unknown"
	}
	return strconv.Itoa(int(d))
}
