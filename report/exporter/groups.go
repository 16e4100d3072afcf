package exporter

import (
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/vramprof/vramprof/analysis"
)

// Series are groups of processes. By default a group is what a fleet
// groups on: the command, the cgroup, the container and Kubernetes pod
// found in the cgroup path, and the pod's name (groupLabels); a node
// running short jobs then has a series per kind of job, not per PID. With
// Options.PerProcess, the process (pid, start) is in the key as well.
//
// A group's counters are cumulative over its members, including the ones
// that left (exited and dropped, or exec'd into another command): when a
// member is dropped its final figures are kept in its group (retire), so
// a counter never goes backwards while its series exists. A group no
// process has been in for Options.TTL is forgotten; were it to come back,
// its counters restart at 0, which Prometheus's rate() reads as a reset.
// Gauges are the members' now: live bytes of the running ones, the
// largest peak any member reached, findings of the members held.
//
// Kubernetes puts a container's processes in a cgroup named after the pod
// UID and the container ID, with the systemd driver
//
//	/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<UID with _>.slice/cri-containerd-<ID>.scope
//
// (no <qos> level for Guaranteed pods; crio-<ID>.scope, docker-<ID>.scope
// with other runtimes), and with the cgroupfs driver
//
//	/kubepods/<qos>/pod<UID>/<ID>
//
// The pod's name and namespace are not in the path: the pod UID is, and
// the container's runtime has the rest in the container's bundle, read
// once per container (pods.go): pod, namespace and container_name (the
// container's name in the pod; container stays its ID), empty when no
// bundle vouches for the path's pod UID. kube-state-metrics'
// kube_pod_info{uid, pod, namespace} joins the UID to them as well
// (README: "Fleets").

// groupLabels label every series of a group, in this order; with
// PerProcess, procLabels come first.
var (
	groupLabels = []string{"command", "cgroup", "container", "pod_uid", "pod", "namespace", "container_name"}
	procLabels  = []string{"pid", "start"}
)

// groupKey is a series' label values.
type groupKey struct {
	pid, start                         string // "" unless PerProcess
	command, cgroup, container, podUID string
	pod, namespace, containerName      string
}

// values returns k's label values in the order of labelNames(perProcess).
func (k groupKey) values(perProcess bool) []string {
	v := []string{k.command, k.cgroup, k.container, k.podUID, k.pod, k.namespace, k.containerName}
	if perProcess {
		return append([]string{k.pid, k.start}, v...)
	}
	return v
}

// labelNames are the label names of a group's series.
func labelNames(perProcess bool) []string {
	if perProcess {
		return append(append([]string{}, procLabels...), groupLabels...)
	}
	return append([]string{}, groupLabels...)
}

// keyLocked is the key of p's instance that began at start (p.mu held):
// the process's labels as known now, with the command its image had
// (commands), or the process's when none was known then (or start began
// no instance the exporter saw: the current one). Labels read late (a
// cgroup a later record gives) thus label every series of the process,
// the figures and findings of its instances before too: they never
// disagree.
func (p *proc) keyLocked(start uint64) groupKey {
	command := p.command
	if c := p.commands[start]; c != "" {
		command = c
	}
	return groupKey{
		pid: strconv.FormatUint(uint64(p.pid), 10), start: strconv.FormatUint(p.start, 10),
		command: command, cgroup: p.cgroup, container: p.container, podUID: p.podUID,
		pod: p.pod.pod, namespace: p.pod.namespace, containerName: p.pod.containerName,
	}
}

// key returns the group key of an instance that began at start (its
// Process record's time), with the per-process labels cleared unless
// PerProcess.
func (x *Exporter) key(p *proc, start uint64) groupKey {
	p.mu.Lock()
	k := p.keyLocked(start)
	p.mu.Unlock()
	if !x.opts.PerProcess {
		k.pid, k.start = "", ""
	}
	return k
}

// group is what a label set keeps of the members that left it.
type group struct {
	retired figures
	// lastUsed is when a held process was last in the group (Sweep).
	lastUsed time.Time
}

// figures are a group's sums: counters add up, peaks are the largest one
// member reached.
type figures struct {
	allocs, frees, allocated, failed, unknown uint64
	procPeak                                  uint64
	traced                                    uint64            // process instances
	devPeak                                   map[devKey]uint64 // by device
}

// devKey is a device in a process's series: CUDA's index (the device
// label) and, when gpuOf can tell, the GPU it is (dcgm-exporter's gpu and
// UUID).
type devKey struct{ device, gpu, uuid string }

// gpuMap names a process's CUDA devices (gpuOf over its environment).
type gpuMap func(device int32) devKey

// add counts one process instance's figures in f, its devices named by
// gm.
func (f *figures) add(pr *analysis.Process, gm gpuMap) {
	t := pr.Totals
	f.allocs += t.Allocations
	f.frees += t.Frees
	f.allocated += t.AllocatedBytes
	f.failed += t.FailedAllocations
	f.unknown += t.UnknownFrees
	f.procPeak = max(f.procPeak, t.PeakBytes)
	f.traced++
	for _, d := range pr.Devices {
		if f.devPeak == nil {
			f.devPeak = make(map[devKey]uint64)
		}
		k := gm(d.Index)
		f.devPeak[k] = max(f.devPeak[k], d.PeakBytes)
	}
}

// merge adds g's figures to f.
func (f *figures) merge(g figures) {
	f.allocs += g.allocs
	f.frees += g.frees
	f.allocated += g.allocated
	f.failed += g.failed
	f.unknown += g.unknown
	f.procPeak = max(f.procPeak, g.procPeak)
	f.traced += g.traced
	for l, v := range g.devPeak {
		if f.devPeak == nil {
			f.devPeak = make(map[devKey]uint64)
		}
		f.devPeak[l] = max(f.devPeak[l], v)
	}
}

// retire keeps the final figures of p, dropped, in its groups (x.mu
// held). With PerProcess a process's series go with it: nothing is kept.
func (x *Exporter) retire(p *proc) {
	if x.opts.PerProcess {
		return
	}
	res := p.soFar()
	gm := x.gpuMapOf(p, x.nvmlViewLocked())
	for i := range res.Processes {
		pr := &res.Processes[i]
		k := x.key(p, pr.Start)
		g := x.groups[k]
		if g == nil {
			g = &group{}
			x.groups[k] = g
		}
		g.retired.add(pr, gm)
		g.lastUsed = x.opts.Now()
	}
}

// sweepGroups forgets groups no held process has been in for the TTL
// (x.mu held), and with PerProcess at once.
func (x *Exporter) sweepGroups(now time.Time) {
	used := make(map[groupKey]bool)
	for p := range x.procs {
		p.mu.Lock()
		for start := range p.commands {
			k := p.keyLocked(start)
			if !x.opts.PerProcess {
				k.pid, k.start = "", ""
			}
			used[k] = true
		}
		p.mu.Unlock()
	}
	for k, g := range x.groups {
		switch {
		case used[k]:
			g.lastUsed = now
		case x.opts.PerProcess || now.Sub(g.lastUsed) >= x.opts.TTL:
			delete(x.groups, k)
		}
	}
}

// gpuMapOf names p's CUDA devices with the NVML devices of v: gpuOf over
// p's environment, the device label alone where it cannot tell.
func (x *Exporter) gpuMapOf(p *proc, v nvmlView) gpuMap {
	p.mu.Lock()
	env, inContainer := p.env, p.container != ""
	p.mu.Unlock()
	return func(d int32) devKey {
		k := devKey{device: deviceLabel(d)}
		if g, ok := gpuOf(env, inContainer, d, v.devices); ok {
			k.gpu, k.uuid = strconv.Itoa(int(g.info.Index)), g.info.UUID
		}
		return k
	}
}

// podUID matches the pod's UID in a Kubernetes cgroup path: "pod" and the
// UID, dashes written as underscores by the systemd driver.
var podUID = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?(?:/|$)`)

// podUIDOf is the UID of the Kubernetes pod whose cgroup path is path, ""
// when it is not a pod's (no kubepods level).
func podUIDOf(path string) string {
	if !strings.Contains(path, "kubepods") {
		return ""
	}
	m := podUID.FindStringSubmatch(path)
	if m == nil {
		return ""
	}
	return strings.ReplaceAll(m[1], "_", "-")
}
