//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
	"github.com/vramprof/vramprof/report/exporter"
)

// fleetJobs is how many short processes TestServeFleetSeries runs at once:
// a busy node's churn of short jobs (the issue saw 48 processes' series
// in 2 minutes).
const fleetJobs = 40

// TestServeFleetSeries runs two serves side by side, one by default
// (series per group) and one with --per-process, while 40 short processes
// of the fake runtime (wrapper: about 200 ms, 92 allocations each) run at
// once under one command name no other test uses (argv0). It counts the
// series each serve exports for them:
//
//   - default: one series per metric for the 40 (the group: command, the
//     test's cgroup), its counters the sum of the 40 truths, the cgroup
//     label read at adoption though every process is gone;
//   - --per-process: one per process, 40 pids, each labelled with its
//     command, cgroup and start (none empty), as every process had before.
//
// Every job is labelled, including one gone before serve read its first
// record: serve adopts it from the record of its mapping of the runtime
// (probes adoptGone). Before, such jobs fell into command="", start 0.
//
// A longrun another session (attach -p) traces before both serves start is
// skipped by them: it has no series in either.
func TestServeFleetSeries(t *testing.T) {
	probetest.RequirePrivilege(t)
	name := fmt.Sprintf("fleetjob-%d", os.Getpid()) // argv0: the command label
	held := fmt.Sprintf("fleetheld-%d", os.Getpid())

	// A process another session traces: serve must leave it alone.
	lrCmd := exec.Command(probetest.Bin(t, "longrun"))
	lrCmd.Args[0] = held
	lr := startLongrunCmd(t, lrCmd)
	att := startAttach(t, lr.pid)

	grouped, perProc := freeLoopback(t), freeLoopback(t)
	_, stopGrouped := startDaemon(t, nil, "vramprof: serving http://"+grouped, "serve", "--listen", grouped)
	_, stopPerProc := startDaemon(t, nil, "vramprof: serving http://"+perProc, "serve", "--listen", perProc, "--per-process",
		"--grace", "5m", "--ttl", "10m") // keep every exited job's series until it is read

	cgroup := selfCgroup(t) // children inherit it
	dir := t.TempDir()
	bin := probetest.Bin(t, "wrapper")
	var wg sync.WaitGroup
	errs := make([]error, fleetJobs)
	for i := range fleetJobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(bin)
			cmd.Args[0] = name
			cmd.Env = append(os.Environ(), "VRAMPROF_TRUTH="+filepath.Join(dir, fmt.Sprintf("truth-%d.json", i)))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				errs[i] = fmt.Errorf("job %d: %w: %s", i, err, stderr.String())
			}
		}()
	}
	wg.Wait()
	// wrapper does the same every run: one truth, checked, is each
	// process's.
	var one probetest.Totals
	pids := map[string]bool{}
	for i := range fleetJobs {
		require.NoError(t, errs[i])
		truth := probetest.MustReadTruth(t, filepath.Join(dir, fmt.Sprintf("truth-%d.json", i)))
		if i == 0 {
			one = truth.Totals
		}
		require.Equal(t, one, truth.Totals, "job %d's truth", i)
		pids[strconv.Itoa(int(truth.PID))] = true
	}
	require.Len(t, pids, fleetJobs)
	ours := func(l map[string]string) bool { return pids[l["pid"]] }

	// Every record reaches serve within its reorder window. The per
	// process serve tells the 40 apart by pid; the grouped one counts them
	// in the group, each with one job's figures.
	group := map[string]string{"command": name}
	var famsG, famsP famSets
	deadline := time.Now().Add(60 * time.Second)
	for {
		famsG = fleetFamilies(scrapeMetrics(t, "http://"+grouped), group)
		famsP = fleetFamilies(scrapeMetrics(t, "http://"+perProc), nil).filter(ours)
		n := famsG.sum(exporter.MetricTracedProcesses)
		if famsP.sum(exporter.MetricFrees) == float64(fleetJobs*one.Frees) && n > 0 &&
			famsG.sum(exporter.MetricFrees) == n*float64(one.Frees) && famsG.sum(exporter.MetricAllocations) == n*float64(one.Allocations) &&
			famsG.sum(exporter.MetricRunningProcesses) == 0 { // serve noticed every exit (its sweep, every 2 s)
			break
		}
		require.True(t, time.Now().Before(deadline), "frees of the %d jobs never reached %d per process (%v), or the group's never matched its %v processes (%v)",
			fleetJobs, fleetJobs*one.Frees, famsP.sum(exporter.MetricFrees), n, famsG.sum(exporter.MetricFrees))
		time.Sleep(100 * time.Millisecond)
	}
	adoptedG := uint64(famsG.sum(exporter.MetricTracedProcesses))
	require.Equal(t, uint64(fleetJobs), adoptedG, "every job in the group, the ones gone before serve read their records too")

	t.Run("grouped", func(t *testing.T) {
		for _, tc := range []struct {
			metric string
			want   uint64
		}{
			{exporter.MetricAllocations, adoptedG * one.Allocations},
			{exporter.MetricFrees, adoptedG * one.Frees},
			{exporter.MetricAllocatedBytes, adoptedG * one.AllocatedBytes},
			{exporter.MetricProcessPeakBytes, one.PeakBytes}, // the largest one process reached
			{exporter.MetricRunningProcesses, 0},
			{exporter.MetricLiveBytes, 0},
		} {
			f := famsG[tc.metric]
			if assert.NotNil(t, f, tc.metric) {
				assert.Len(t, f.series, 1, "%s: one series for the group", tc.metric)
				assert.Equal(t, float64(tc.want), f.sum(), tc.metric)
			}
		}
		for metric, f := range famsG {
			for _, l := range f.series {
				assert.NotContains(t, l, "pid", metric)
				assert.Equal(t, cgroup, l["cgroup"], "%s: the cgroup, read at adoption", metric)
			}
		}
	})

	var adoptedP int
	t.Run("per_process", func(t *testing.T) {
		seen := map[string]bool{}
		for metric, f := range famsP {
			for _, l := range f.series {
				seen[l["pid"]] = true
				assert.Equal(t, name, l["command"], "%s{pid=%s}", metric, l["pid"])
				assert.Equal(t, cgroup, l["cgroup"], "%s{pid=%s}", metric, l["pid"])
				assert.NotEqual(t, "0", l["start"], "%s{pid=%s}", metric, l["pid"])
			}
		}
		assert.Equal(t, pids, seen, "a series per process")
		assert.Equal(t, float64(fleetJobs*one.Allocations), famsP.sum(exporter.MetricAllocations))
		assert.Equal(t, float64(fleetJobs*one.AllocatedBytes), famsP.sum(exporter.MetricAllocatedBytes))
		for _, l := range famsP[exporter.MetricAllocations].series {
			if l["command"] == name {
				adoptedP++
			}
		}
		// Started after serve began: traced from their start, so a thread
		// that chose no device is on device 0, as under run, not "unknown".
		peaks := famsP[exporter.MetricPeakBytes]
		if assert.NotNil(t, peaks, exporter.MetricPeakBytes) {
			assert.Len(t, peaks.series, fleetJobs, "a peak series per job")
			for _, l := range peaks.series {
				assert.Equal(t, "0", l["device"], "%s{pid=%s}", exporter.MetricPeakBytes, l["pid"])
			}
		}
	})

	t.Run("skipped", func(t *testing.T) {
		for addr, fams := range map[string]map[string]*dto.MetricFamily{
			"grouped": scrapeMetrics(t, "http://"+grouped), "per process": scrapeMetrics(t, "http://"+perProc)} {
			for _, sel := range []map[string]string{{"command": held}, {"pid": strconv.Itoa(lr.pid)}} {
				assert.Empty(t, fleetFamilies(fams, sel), "%s: a process another session traces has no series", addr)
			}
		}
	})

	// The grouped serve's series for the jobs: the group's, and those of
	// the group of processes it could not describe (command="", shared
	// with any other such process on the host; none of the jobs).
	g := famsG.count() + fleetFamilies(scrapeMetrics(t, "http://"+grouped), map[string]string{"command": ""}).count()
	p := famsP.count()
	t.Logf("%d short processes of one command (%d labelled by the grouped serve, %d by the per-process one): "+
		"%d series grouped (default) against %d per process (--per-process; before, every process had its own)",
		fleetJobs, adoptedG, adoptedP, g, p)
	assert.Less(t, g*5, p, "grouping cuts the series")

	stopGrouped()
	stopPerProc()
	require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1))
	lr.expect(t, "done")
	require.NoError(t, att.cmd.Process.Signal(syscall.SIGTERM))
	<-att.done
}

// selfCgroup is this process's cgroup path as serve reads it from
// /proc/self/cgroup: the v2 line, unless it is the root "/" and a v1
// hierarchy has another (a hybrid host).
func selfCgroup(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	v2, v1 := "", ""
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			v2 = f[2]
		case v1 == "" && f[2] != "/":
			v1 = f[2]
		}
	}
	if (v2 == "" || v2 == "/") && v1 != "" {
		return v1
	}
	require.NotEmpty(t, v2)
	return v2
}

// famSet is a metric's series that match a selector: their labels and
// values.
type famSet struct {
	series []map[string]string
	values []float64
}

func (f *famSet) sum() float64 {
	var s float64
	for _, v := range f.values {
		s += v
	}
	return s
}

// fleetFamilies keeps the vramprof_ series whose labels include sel, by
// metric.
func fleetFamilies(fams map[string]*dto.MetricFamily, sel map[string]string) famSets {
	out := famSets{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "vramprof_") {
			continue
		}
	next:
		for _, m := range f.Metric {
			l := map[string]string{}
			for _, lp := range m.Label {
				l[lp.GetName()] = lp.GetValue()
			}
			for k, v := range sel {
				if l[k] != v {
					continue next
				}
			}
			s := out[name]
			if s == nil {
				s = &famSet{}
				out[name] = s
			}
			s.series = append(s.series, l)
			s.values = append(s.values, m.GetGauge().GetValue()+m.GetCounter().GetValue()+m.GetUntyped().GetValue())
		}
	}
	return out
}

type famSets map[string]*famSet

// filter keeps the series whose labels keep says.
func (fs famSets) filter(keep func(map[string]string) bool) famSets {
	out := famSets{}
	for name, f := range fs {
		for i, l := range f.series {
			if !keep(l) {
				continue
			}
			s := out[name]
			if s == nil {
				s = &famSet{}
				out[name] = s
			}
			s.series = append(s.series, l)
			s.values = append(s.values, f.values[i])
		}
	}
	return out
}

func (fs famSets) sum(metric string) float64 {
	if f := fs[metric]; f != nil {
		return f.sum()
	}
	return -1
}

// count is the number of series.
func (fs famSets) count() int {
	n := 0
	for _, f := range fs {
		n += len(f.series)
	}
	return n
}
