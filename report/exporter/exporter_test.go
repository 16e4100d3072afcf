package exporter

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	gprofile "github.com/google/pprof/profile"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

const MiB = uint64(1) << 20

// clock is a settable Options.Now.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// feed writes a small run for pid: allocations of 4 MiB (freed) and 1 MiB
// (kept) n times, and one failed 80 GiB allocation, on device dev.
func feed(t *testing.T, x *Exporter, pid uint32, dev int32, n int) {
	t.Helper()
	require.NoError(t, feedErr(x, pid, dev, n))
}

// feedErr is feed for another goroutine than the test's: it returns the
// first error.
func feedErr(x *Exporter, pid uint32, dev int32, n int) error {
	base := uint64(pid) << 32
	recs := []event.Record{
		&event.Process{PID: pid, Command: []string{"/usr/bin/trainer", "--x"}},
		&event.Stack{ID: 1, PID: pid, Frames: []event.Frame{{Addr: 0x10, Function: "cudaMalloc"}, {Addr: 0x20, Function: "step"}}},
	}
	ev := func(e event.Event) {
		e.PID, e.Device, e.Layer, e.Stack = pid, dev, event.LayerSegment, 1
		recs = append(recs, &e)
	}
	for i := range uint64(n) {
		ev(event.Event{Time: 10*i + 1, Addr: base + 0x1000_0000, Size: 4 * MiB, Kind: event.KindAlloc, API: event.APICudaMalloc})
		ev(event.Event{Time: 10*i + 2, Addr: base + 0x2000_0000 + i*MiB, Size: MiB, Kind: event.KindAlloc, API: event.APICudaMalloc})
		ev(event.Event{Time: 10*i + 3, Addr: base + 0x1000_0000, Kind: event.KindFree, API: event.APICudaFree})
	}
	ev(event.Event{Time: 10*uint64(n) + 1, Size: 80 << 30, Ret: 2, Kind: event.KindAlloc, API: event.APICudaMalloc})
	for _, r := range recs {
		if err := x.Write(r); err != nil {
			return err
		}
	}
	return nil
}

// scrape fetches /metrics and returns its families by name.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// value is the sum of name's series with label pid (and the extra labels
// given, "name", "value" pairs); ok is false when there is none.
func value(fams map[string]*dto.MetricFamily, name string, pid uint32, extra ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	want := map[string]string{"pid": strconv.FormatUint(uint64(pid), 10)}
	for i := 0; i+1 < len(extra); i += 2 {
		want[extra[i]] = extra[i+1]
	}
	var sum float64
	found := false
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		found = true
		switch {
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum, found
}

func TestMetrics(t *testing.T) {
	x := New(Options{PerProcess: true, Alive: func(uint32, uint64) bool { return true }})
	x.SetHeader(&event.Header{Mode: "serve", Start: 0})
	feed(t, x, 4242, 0, 5)
	feed(t, x, 4343, 1, 3)
	require.NoError(t, x.Write(&event.Lost{Total: 7, Late: 1}))
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()

	fams := scrape(t, srv.URL)
	for _, tc := range []struct {
		name string
		pid  uint32
		n    int
		dev  string
	}{{"first", 4242, 5, "0"}, {"second", 4343, 3, "1"}} {
		t.Run(tc.name, func(t *testing.T) {
			check := func(metric string, want uint64, extra ...string) {
				t.Helper()
				v, ok := value(fams, metric, tc.pid, extra...)
				require.True(t, ok, "%s for pid %d", metric, tc.pid)
				assert.Equal(t, float64(want), v, metric)
			}
			n := uint64(tc.n)
			check(MetricLiveBytes, n*MiB, "device", tc.dev, "command", "trainer")
			check(MetricPeakBytes, (n-1)*MiB+5*MiB, "device", tc.dev)
			check(MetricProcessPeakBytes, (n-1)*MiB+5*MiB)
			check(MetricAllocations, 2*n)
			check(MetricFrees, n)
			check(MetricAllocatedBytes, 5*MiB*n)
			check(MetricFailedAllocations, 1)
			check(MetricProcessExited, 0)
			_, ok := value(fams, MetricFindings, tc.pid)
			assert.True(t, ok, "findings")
		})
	}
	assert.Equal(t, float64(7), fams[MetricLostEvents].Metric[0].Counter.GetValue())
	assert.Equal(t, float64(2), fams[MetricProcesses].Metric[0].Gauge.GetValue())
}

func TestProfiles(t *testing.T) {
	x := New(Options{PerProcess: true, Alive: func(uint32, uint64) bool { return true }})
	feed(t, x, 4242, 0, 5)
	feed(t, x, 4343, 0, 3)
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()
	total := func(p *gprofile.Profile, typ string) int64 {
		i := -1
		for j, st := range p.SampleType {
			if st.Type == typ {
				i = j
			}
		}
		require.GreaterOrEqual(t, i, 0, typ)
		var s int64
		for _, smp := range p.Sample {
			s += smp.Value[i]
		}
		return s
	}
	for _, tc := range []struct {
		path string
		def  string
		typ  string
		want uint64
	}{
		{"/debug/pprof/inuse?pid=4242", "inuse_space", "inuse_space", 5 * MiB},
		{"/pprof/inuse?pid=4343", "inuse_space", "inuse_space", 3 * MiB},
		{"/debug/pprof/peak?pid=4242", "peak_space", "peak_space", 9 * MiB},
		{"/debug/pprof/alloc?pid=4242", "alloc_space", "alloc_space", 25 * MiB},
		{"/debug/pprof/inuse", "inuse_space", "inuse_space", 8 * MiB},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tc.path)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			p, err := gprofile.Parse(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, tc.def, p.DefaultSampleType)
			assert.Equal(t, int64(tc.want), total(p, tc.typ))
		})
	}
	for path, code := range map[string]int{"/debug/pprof/inuse?pid=1": 404, "/debug/pprof/inuse?pid=x": 400, "/debug/pprof/goroutine": 404} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, code, resp.StatusCode, path)
	}
}

// TestExitedProcessesAreDropped: an exited process stays through the grace
// period, is dropped after a scrape reported it, or after the TTL unscraped.
func TestExitedProcessesAreDropped(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	running := map[uint32]bool{1: true, 2: true}
	x := New(Options{PerProcess: true, Grace: 10 * time.Second, TTL: time.Minute, Now: c.now,
		Alive: func(pid uint32, _ uint64) bool { return running[pid] }})
	feed(t, x, 1, 0, 2)
	feed(t, x, 2, 0, 2)
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()

	assert.Equal(t, 2, x.Sweep())
	running[1], running[2] = false, false
	assert.Equal(t, 2, x.Sweep(), "just exited: kept")
	fams := scrape(t, srv.URL)
	v, ok := value(fams, MetricProcessExited, 1)
	require.True(t, ok)
	assert.Equal(t, float64(1), v)
	v, _ = value(fams, MetricLiveBytes, 1)
	assert.Equal(t, float64(2*MiB), v, "final figures")
	c.t = c.t.Add(5 * time.Second)
	assert.Equal(t, 2, x.Sweep(), "scraped, within grace: kept")
	c.t = c.t.Add(6 * time.Second)
	assert.Equal(t, 0, x.Sweep(), "scraped and past grace: dropped")

	feed(t, x, 3, 0, 1)
	x.Sweep()
	c.t = c.t.Add(30 * time.Second)
	assert.Equal(t, 1, x.Sweep(), "unscraped, within TTL")
	c.t = c.t.Add(31 * time.Second)
	assert.Equal(t, 0, x.Sweep(), "unscraped, past TTL")
}

// TestReusedPID: a Process record for a PID whose process exited starts a
// fresh analysis; one for a running PID (an exec) continues it.
func TestReusedPID(t *testing.T) {
	running := true
	x := New(Options{PerProcess: true, Alive: func(uint32, uint64) bool { return running }})
	feed(t, x, 7, 0, 2)
	require.NoError(t, x.Write(&event.Process{PID: 7, Command: []string{"/usr/bin/python3", "train.py"}})) // exec: same process
	feed(t, x, 7, 0, 1)
	res, err := x.Result(7)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, len(res.Processes), 2, "an instance per image")
	assert.Equal(t, "trainer", x.cur[7].command, "feed's Process record came last")
	running = false
	x.Sweep()
	feed(t, x, 7, 0, 1)
	res, err = x.Result(7)
	require.NoError(t, err)
	require.Len(t, res.Processes, 1)
	assert.Equal(t, uint64(2), res.Processes[0].Totals.Allocations)
}

func TestParseCgroup(t *testing.T) {
	id := "3f4e1b2a9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
	for _, tc := range []struct {
		name, in, path, container string
	}{
		{"v2 docker", "0::/system.slice/docker-" + id + ".scope\n", "/system.slice/docker-" + id + ".scope", id},
		{"v2 kubepods", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-" + id + ".scope\n", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-" + id + ".scope", id},
		{"v2 user", "0::/user.slice/user-0.slice/session-1.scope\n", "/user.slice/user-0.slice/session-1.scope", ""},
		{"v1", "12:memory:/docker/" + id + "\n11:cpu:/docker/" + id + "\n", "/docker/" + id, id},
		{"hybrid: v2 at the root, the pod in v1", "9:name=systemd:/\n4:memory:/kubepods/burstable/pod1/" + id + "\n0::/\n", "/kubepods/burstable/pod1/" + id, id},
		{"hybrid, nothing placed", "9:name=systemd:/\n4:memory:/\n0::/\n", "/", ""},
		{"empty", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, c := parseCgroup([]byte(tc.in))
			assert.Equal(t, tc.path, path)
			assert.Equal(t, tc.container, c)
		})
	}
}

// TestConcurrentScrapes: records keep coming while /metrics and profiles
// are read and processes are swept (run with -race). Every scrape parses,
// the group's counters never go backwards between scrapes, and once the
// writer is done the last scrape holds every process's calls: 40
// processes of feed's run of 20 (2 allocations each, 1 failed), the odd
// ones exited and swept, their counts kept by the group.
func TestConcurrentScrapes(t *testing.T) {
	x := New(Options{Alive: func(pid uint32, _ uint64) bool { return pid%2 == 0 }, Grace: time.Nanosecond})
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()
	const procs, n = 40, 20
	done := make(chan error, 1)
	go func() { // no require here: FailNow belongs to the test's goroutine
		for pid := uint32(1); pid <= procs; pid++ {
			if err := feedErr(x, pid, 0, n); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var last float64
	scrapes := 0
	check := func() {
		fams := scrape(t, srv.URL)
		got, _ := groupValue(fams, "vramprof_allocations_total")
		require.GreaterOrEqual(t, got, last, "scrape %d: allocations_total went backwards", scrapes)
		last = got
		scrapes++
	}
	for finished := false; !finished; {
		select {
		case err := <-done:
			require.NoError(t, err)
			finished = true
		default:
		}
		check()
		resp, err := http.Get(srv.URL + "/debug/pprof/inuse")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		resp.Body.Close()
		x.Sweep()
	}
	check()
	assert.Equal(t, float64(procs*2*n), last, "allocations of every process, swept ones included")
	fams := scrape(t, srv.URL)
	failed, _ := groupValue(fams, "vramprof_failed_allocations_total")
	assert.Equal(t, float64(procs), failed, "one failed allocation per process")
	live, _ := groupValue(fams, "vramprof_live_bytes")
	assert.Equal(t, float64(procs/2*n*MiB), live, "the running (even) processes' kept MiB blocks")
	t.Logf("%d scrapes while %d processes were written", scrapes, procs)
}
