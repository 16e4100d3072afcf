package exporter

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

// groupValue sums name's series whose labels include every given name,
// value pair; ok is false when none does.
func groupValue(fams map[string]*dto.MetricFamily, name string, labels ...string) (sum float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		l := labelsOf(m)
		for i := 0; i+1 < len(labels); i += 2 {
			if l[labels[i]] != labels[i+1] {
				continue next
			}
		}
		ok = true
		sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
	}
	return sum, ok
}

// feedCgroup writes a Process record placing pid in cgroup, then feed's
// run (feed's own record keeps the command and the cgroup).
func feedCgroup(t *testing.T, x *Exporter, pid uint32, cgroup string, n int) {
	t.Helper()
	require.NoError(t, x.Write(&event.Process{PID: pid, Command: []string{"/usr/bin/trainer"}, Cgroup: cgroup, Start: uint64(pid)}))
	feed(t, x, pid, 0, n)
}

// TestGroupsByDefault: processes of one command in one container make one
// set of series, not one per PID. Its counters sum the members', and stay
// when a member exits and is dropped (they never go backwards); live bytes
// are the running members'.
func TestGroupsByDefault(t *testing.T) {
	const pod = "0d3c6a3e-8a7b-4c1f-9e2d-5b6a7c8d9e0f"
	const ctr = "3f4e1b2a9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
	cg := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0d3c6a3e_8a7b_4c1f_9e2d_5b6a7c8d9e0f.slice/cri-containerd-" + ctr + ".scope"
	c := &clock{t: time.Unix(1000, 0)}
	running := map[uint32]bool{}
	x := New(Options{Now: c.now, Grace: time.Second, TTL: time.Minute,
		Alive: func(pid uint32, _ uint64) bool { return running[pid] }})
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()
	// feed(n): n allocations of 4 MiB (freed) and n of 1 MiB (kept), one
	// failed: 2n allocations, n frees, 5n MiB allocated, n MiB live.
	for pid, n := range map[uint32]int{101: 2, 102: 3, 103: 4} {
		running[pid] = true
		feedCgroup(t, x, pid, cg, n)
	}
	group := []string{"command", "trainer", "container", ctr, "pod_uid", pod, "cgroup", cg}
	check := func(name string, want uint64) {
		t.Helper()
		fams := scrape(t, srv.URL)
		require.NotNil(t, fams[name], name)
		assert.Len(t, fams[name].Metric, 1, "%s: one series for the three processes", name)
		v, ok := groupValue(fams, name, group...)
		require.True(t, ok, "%s%v", name, group)
		assert.Equal(t, float64(want), v, name)
		for _, m := range fams[name].Metric {
			_, hasPID := labelsOf(m)["pid"]
			assert.False(t, hasPID, "%s: no pid label by default", name)
		}
	}
	check(MetricAllocations, 2*(2+3+4))
	check(MetricAllocatedBytes, 5*(2+3+4)*MiB)
	check(MetricFailedAllocations, 3)
	check(MetricLiveBytes, (2+3+4)*MiB)
	check(MetricProcessPeakBytes, (4+4)*MiB) // the largest member's: 4 MiB live + 4 MiB
	check(MetricRunningProcesses, 3)
	check(MetricTracedProcesses, 3)

	// 103 exits; once scraped and past the grace period, it is dropped.
	running[103] = false
	x.Sweep()
	check(MetricLiveBytes, (2+3)*MiB)
	c.t = c.t.Add(2 * time.Second)
	x.Sweep()
	require.Nil(t, x.cur[103], "dropped")
	check(MetricAllocations, 2*(2+3+4))
	check(MetricAllocatedBytes, 5*(2+3+4)*MiB)
	check(MetricLiveBytes, (2+3)*MiB)
	check(MetricRunningProcesses, 2)
	check(MetricTracedProcesses, 3)
	check(MetricProcessPeakBytes, (4+4)*MiB)

	// All gone: the group stays for the TTL with its totals, then goes.
	running[101], running[102] = false, false
	x.Sweep()
	_ = scrape(t, srv.URL)
	c.t = c.t.Add(2 * time.Second)
	x.Sweep()
	check(MetricAllocations, 2*(2+3+4))
	check(MetricLiveBytes, 0)
	check(MetricRunningProcesses, 0)
	c.t = c.t.Add(time.Minute)
	x.Sweep()
	assert.Nil(t, scrape(t, srv.URL)[MetricAllocations], "forgotten after the TTL")
}

// TestGroupsPerProcess: with PerProcess every process has its own series,
// labelled with its pid and start.
func TestGroupsPerProcess(t *testing.T) {
	x := New(Options{PerProcess: true, Alive: func(uint32, uint64) bool { return true }})
	for pid, n := range map[uint32]int{101: 2, 102: 3} {
		feedCgroup(t, x, pid, "/system.slice/train.service", n)
	}
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()
	fams := scrape(t, srv.URL)
	assert.Len(t, fams[MetricAllocations].Metric, 2)
	for pid, n := range map[string]float64{"101": 2, "102": 3} {
		v, ok := groupValue(fams, MetricAllocations, "pid", pid, "start", pid, "command", "trainer")
		require.True(t, ok, pid)
		assert.Equal(t, 2*n, v, pid)
	}
}

// TestExecLeavesGroup: a process that execs another image leaves its old
// command's group with what the old image did (that group's counters do
// not drop) and counts in the new one from the exec on.
func TestExecLeavesGroup(t *testing.T) {
	x := New(Options{Alive: func(uint32, uint64) bool { return true }})
	const pid = 7
	require.NoError(t, x.Write(&event.Process{PID: pid, Command: []string{"/bin/launcher"}, Start: 50, Time: 1}))
	feedEvents(t, x, pid, 1000, 3) // 3 allocations as launcher
	require.NoError(t, x.Write(&event.Process{PID: pid, Command: []string{"/usr/bin/python3"}, Start: 50, Time: 2000}))
	feedEvents(t, x, pid, 3000, 2) // 2 as python3
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()
	fams := scrape(t, srv.URL)
	v, ok := groupValue(fams, MetricAllocations, "command", "launcher")
	require.True(t, ok)
	assert.Equal(t, float64(3), v)
	v, ok = groupValue(fams, MetricAllocations, "command", "python3")
	require.True(t, ok)
	assert.Equal(t, float64(2), v)
	v, _ = groupValue(fams, MetricRunningProcesses, "command", "python3")
	assert.Equal(t, float64(1), v)
	v, _ = groupValue(fams, MetricRunningProcesses, "command", "launcher")
	assert.Equal(t, float64(0), v, "the launcher image is gone")
}

// feedEvents writes n allocations of 1 MiB for pid from time t0.
func feedEvents(t *testing.T, x *Exporter, pid uint32, t0 uint64, n int) {
	t.Helper()
	for i := range uint64(n) {
		require.NoError(t, x.Write(&event.Event{Time: t0 + i, Addr: t0<<20 + i<<20, Size: MiB, PID: pid,
			Kind: event.KindAlloc, API: event.APICudaMalloc, Layer: event.LayerSegment}))
	}
}

// TestUnannounced: records of PIDs the session never described (gone
// before it could adopt them: no Process record) still count, all in one
// group with empty labels, not a series each.
func TestUnannounced(t *testing.T) {
	x := New(Options{Start: func(uint32) (uint64, error) { return 0, assert.AnError },
		Alive: func(uint32, uint64) bool { return false }})
	feedEvents(t, x, 55, 10, 4)
	feedEvents(t, x, 56, 10, 3)
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()
	fams := scrape(t, srv.URL)
	require.NotNil(t, fams[MetricAllocations])
	assert.Len(t, fams[MetricAllocations].Metric, 1)
	v, ok := groupValue(fams, MetricAllocations, "command", "", "cgroup", "")
	require.True(t, ok)
	assert.Equal(t, float64(7), v)
	v, _ = groupValue(fams, MetricTracedProcesses, "command", "")
	assert.Equal(t, float64(2), v)
}

// TestHeldByAnotherSession: a process another session takes (serve lets
// go of it) ends as an exit does: no longer running, figures final.
func TestHeldByAnotherSession(t *testing.T) {
	held := false
	x := New(Options{PerProcess: true, Alive: func(uint32, uint64) bool { return true },
		Held: func(pid uint32, _ uint64) bool { return held && pid == 9 }})
	feed(t, x, 9, 0, 2)
	x.Sweep()
	assert.True(t, x.cur[9].exitedAt().IsZero())
	held = true
	x.Sweep()
	assert.False(t, x.cur[9].exitedAt().IsZero(), "left to the other session")
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()
	v, ok := value(scrape(t, srv.URL), MetricRunningProcesses, 9)
	require.True(t, ok)
	assert.Equal(t, float64(0), v)
}

// TestCgroupFromRecord: the cgroup comes from the Process record (read at
// adoption) even when the process is gone; a fork child with none takes
// its parent's.
func TestCgroupFromRecord(t *testing.T) {
	x := New(Options{PerProcess: true, Start: func(uint32) (uint64, error) { return 0, assert.AnError },
		Alive: func(uint32, uint64) bool { return false }})
	const cg = "/kubepods/besteffort/pod11111111-2222-3333-4444-555555555555/" +
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	require.NoError(t, x.Write(&event.Process{PID: 20, Command: []string{"/usr/bin/python3"}, Cgroup: cg}))
	require.NoError(t, x.Write(&event.Process{PID: 21, PPID: 20, Command: []string{"/usr/bin/python3"}}))
	for _, pid := range []uint32{20, 21} {
		p := x.cur[pid]
		require.NotNil(t, p)
		assert.Equal(t, cg, p.cgroup, "pid %d", pid)
		assert.Equal(t, "11111111-2222-3333-4444-555555555555", p.podUID, "pid %d", pid)
		assert.Equal(t, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", p.container, "pid %d", pid)
		assert.Equal(t, "python3", p.command)
	}
}

func TestPodUIDOf(t *testing.T) {
	const uid = "0d3c6a3e-8a7b-4c1f-9e2d-5b6a7c8d9e0f"
	const us = "0d3c6a3e_8a7b_4c1f_9e2d_5b6a7c8d9e0f"
	const id = "3f4e1b2a9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
	for _, tc := range []struct{ name, path, pod, container string }{
		{"systemd burstable", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/cri-containerd-" + id + ".scope", uid, id},
		{"systemd besteffort crio", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us + ".slice/crio-" + id + ".scope", uid, id},
		{"systemd guaranteed", "/kubepods.slice/kubepods-pod" + us + ".slice/cri-containerd-" + id + ".scope", uid, id},
		{"cgroupfs burstable", "/kubepods/burstable/pod" + uid + "/" + id, uid, id},
		{"cgroupfs guaranteed", "/kubepods/pod" + uid + "/" + id, uid, id},
		{"pod sandbox level", "/kubepods/pod" + uid, uid, ""},
		{"docker, no pod", "/system.slice/docker-" + id + ".scope", "", id},
		{"a pod-like name outside kubepods", "/system.slice/pod" + uid + ".slice", "", ""},
		{"user session", "/user.slice/user-0.slice/session-1.scope", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.pod, podUIDOf(tc.path))
			assert.Equal(t, tc.container, containerOf(tc.path))
		})
	}
}

// TestLabelsOneSource: every series of a process carries the labels it is
// known by in the end, whenever they became known. Figures and findings
// made while its cgroup was unknown (a Process record without one: the
// process was gone before /proc could be read; records before any Process
// record) are not left under cgroup="" beside the series that have it.
func TestLabelsOneSource(t *testing.T) {
	const pid = 1 << 23 // above Linux's PID limit: /proc has nothing of it
	const cg = "/system.slice/train.service"
	described := func(time uint64, cgroup string) event.Record {
		return &event.Process{PID: pid, Command: []string{"/usr/bin/trainer"}, Start: 77, Time: time, Cgroup: cgroup}
	}
	// calls are 3 allocations of 1 MiB and one that fails (a finding).
	calls := func(t0 uint64) []event.Record {
		var out []event.Record
		for i := range uint64(3) {
			out = append(out, &event.Event{Time: t0 + i, Addr: t0<<20 + i<<20, Size: MiB, PID: pid, Stack: 1,
				Kind: event.KindAlloc, API: event.APICudaMalloc, Layer: event.LayerSegment})
		}
		return append(out, &event.Event{Time: t0 + 3, Size: 80 << 30, Ret: 2, PID: pid, Stack: 1,
			Kind: event.KindAlloc, API: event.APICudaMalloc, Layer: event.LayerSegment})
	}
	stack := &event.Stack{ID: 1, PID: pid, Frames: []event.Frame{{Addr: 0x10, Function: "cudaMalloc"}, {Addr: 0x20, Function: "step"}}}
	for _, tc := range []struct {
		name string
		recs [][]event.Record
	}{
		{name: "cgroup in a later record", recs: [][]event.Record{
			{described(1, ""), stack}, calls(10), {described(1000, cg)}}},
		{name: "cgroup in a later record, calls after it", recs: [][]event.Record{
			{described(1, ""), stack}, calls(10), {described(1000, cg)}, calls(2000)}},
		{name: "records before the Process record", recs: [][]event.Record{
			{stack, described(1, cg)}, calls(10)}},
	} {
		for _, perProcess := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/per_process=%v", tc.name, perProcess), func(t *testing.T) {
				x := New(Options{PerProcess: perProcess, Start: func(uint32) (uint64, error) { return 77, nil },
					Alive: func(uint32, uint64) bool { return true }})
				for _, recs := range tc.recs {
					for _, r := range recs {
						require.NoError(t, x.Write(r))
					}
				}
				srv := httptest.NewServer(x.Handler())
				defer srv.Close()
				findings := 0
				for name, f := range scrape(t, srv.URL) {
					for _, m := range f.Metric {
						l := labelsOf(m)
						if _, ok := l["cgroup"]; !ok {
							continue // of no process: lost records, NVML's devices
						}
						assert.Equal(t, cg, l["cgroup"], "%s%v", name, l)
						assert.Equal(t, "trainer", l["command"], "%s%v", name, l)
						if name == MetricFindings {
							findings++
						}
					}
				}
				assert.NotZero(t, findings, "the failed call's finding has a series")
			})
		}
	}
}
