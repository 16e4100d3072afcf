package profile

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	gprofile "github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

const MiB = uint64(1) << 20

// mustResult analyses a small run of pid 7:
//
//	activations (model.py:10): 4 allocs of 8 MiB on device 0, all live at
//	  the peak (32 MiB + 1 MiB = 33 MiB), 2 freed before the end;
//	scratch (model.py:20): 100 allocs of 1 MiB on device 1, each freed
//	  before the next: the most allocated (100 MiB), 1 MiB at the peak;
//	one 2 MiB allocation without a stack, after the peak, live at the end.
func mustResult(tb testing.TB) *analysis.Result {
	tb.Helper()
	recs := []event.Record{
		&event.Header{Version: 1, Tool: "vramprof test", Mode: "run", Command: []string{"python", "model.py"}, PID: 7, WallTime: 1_700_000_000_000_000_000},
		&event.Mapping{ID: 1, PID: 7, Start: 0x400000, Limit: 0x500000, File: "/usr/bin/python3", BuildID: "beef"},
		&event.Mapping{ID: 2, PID: 7, Start: 0x7f0000, Limit: 0x7f8000, Offset: 0x1000, File: "/usr/lib/libcudart.so.12", BuildID: "cafe"},
	}
	frames := func(fn string, line int64, addr uint64) []event.Frame {
		return []event.Frame{
			{Addr: 0x7f0010, Mapping: 2, Function: "cudaMalloc"},
			{Addr: addr, Mapping: 1, Function: fn, File: "model.py", Line: line},
			{Addr: 0x400100, Mapping: 1, Function: "main", File: "model.py", Line: 1},
		}
	}
	recs = append(recs,
		&event.Stack{ID: 1, PID: 7, Frames: frames("activations", 10, 0x400200)},
		&event.Stack{ID: 2, PID: 7, Frames: frames("scratch", 20, 0x400300)})
	ev := func(t uint64, k event.Kind, addr, size uint64, st event.StackID, dev int32) *event.Event {
		return &event.Event{Time: t, Kind: k, Addr: addr, Size: size, Stack: st, PID: 7, Device: dev,
			Layer: event.LayerSegment, API: event.APICudaMalloc}
	}
	tm := uint64(0)
	for i := range uint64(100) {
		tm++
		recs = append(recs, ev(tm, event.KindAlloc, 0x9000, MiB, 2, 1))
		if i < 4 {
			tm++
			recs = append(recs, ev(tm, event.KindAlloc, 0x1000+i, 8*MiB, 1, 0))
		}
		tm++
		recs = append(recs, ev(tm, event.KindFree, 0x9000, 0, 0, 1))
	}
	recs = append(recs,
		ev(tm+1, event.KindFree, 0x1000, 0, 0, 0), ev(tm+2, event.KindFree, 0x1001, 0, 0, 0),
		ev(tm+3, event.KindAlloc, 0x4000_0000, 2*MiB, 0, event.DeviceUnknown), // outside every known device's range
		&event.Lost{Time: tm + 4, Total: 3}, &event.End{Time: 1_000_000_000, Reason: "exited"})
	a := analysis.New(analysis.Options{})
	for _, r := range recs {
		require.NoError(tb, a.Add(r))
	}
	return a.Finish()
}

func mustWrite(tb testing.TB, res *analysis.Result) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "profile.pb.gz")
	f, err := os.Create(path)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = f.Close() })
	require.NoError(tb, Write(f, res))
	require.NoError(tb, f.Close())
	return path
}

func TestRoundTrip(t *testing.T) {
	res := mustResult(t)
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, res))
	p, err := gprofile.Parse(&buf)
	require.NoError(t, err)
	require.NoError(t, p.CheckValid())

	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	assert.Equal(t, []string{"alloc_objects/count", "alloc_space/bytes", "inuse_objects/count",
		"inuse_space/bytes", "peak_objects/count", "peak_space/bytes"}, types)
	assert.Equal(t, "peak_space", p.DefaultSampleType)
	assert.Equal(t, "space", p.PeriodType.Type)
	assert.Equal(t, int64(1), p.Period)
	assert.Equal(t, int64(1_700_000_000_000_000_000), p.TimeNanos)
	assert.Equal(t, int64(1_000_000_000), p.DurationNanos)
	assert.Contains(t, p.Comments, "lost_events: 3")
	require.Len(t, p.Mapping, 2)
	assert.Equal(t, "/usr/lib/libcudart.so.12", p.Mapping[1].File)
	assert.Equal(t, "cafe", p.Mapping[1].BuildID)
	assert.Equal(t, uint64(0x1000), p.Mapping[1].Offset)

	// Totals per sample type, from the scenario's arithmetic.
	var sum [6]int64
	bySite := map[string][]int64{}
	for _, s := range p.Sample {
		for i, v := range s.Value {
			sum[i] += v
		}
		assert.NotContains(t, s.Label, "addr")
		assert.Equal(t, []string{"bytes"}, s.NumUnit["bytes"])
		// The stack starts at its site: cudaMalloc is left out, and
		// stays in the api label.
		site := s.Location[0].Line[0].Function.Name
		bySite[site] = s.Value
		switch site {
		case "activations":
			assert.Equal(t, []string{"0"}, s.Label["device"])
			assert.Equal(t, []int64{int64(8 * MiB)}, s.NumLabel["bytes"])
		case "scratch":
			assert.Equal(t, []string{"1"}, s.Label["device"])
		case analysis.NoStack:
			assert.Equal(t, []string{"unknown"}, s.Label["device"])
		}
		assert.Equal(t, []string{"7"}, s.Label["pid"])
		assert.Equal(t, []string{"cudaMalloc"}, s.Label["api"])
		assert.Equal(t, []string{"segment"}, s.Label["layer"])
	}
	assert.Equal(t, [6]int64{105, int64(134 * MiB), 3, int64(18 * MiB), 5, int64(33 * MiB)}, sum)
	assert.Equal(t, []int64{4, int64(32 * MiB), 2, int64(16 * MiB), 4, int64(32 * MiB)}, bySite["activations"])
	assert.Equal(t, []int64{100, int64(100 * MiB), 0, 0, 1, int64(MiB)}, bySite["scratch"])
	assert.Equal(t, []int64{1, int64(2 * MiB), 1, int64(2 * MiB), 0, 0}, bySite[analysis.NoStack])

	// Functions and locations are shared, not repeated per sample.
	names := map[string]int{}
	for _, f := range p.Function {
		names[f.Name]++
	}
	assert.Equal(t, map[string]int{"activations": 1, "scratch": 1, "main": 1, analysis.NoStack: 1}, names)
	assert.Len(t, p.Location, 4)
}

func TestPprofTop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go tool pprof")
	}
	path := mustWrite(t, mustResult(t))
	tests := []struct {
		name, index, first string
	}{
		{"peak: the activations", "peak_space", "activations"},
		{"alloc: the scratch loop", "alloc_space", "scratch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The site is the leaf: the user's function is flat without
			// -hide or -cum.
			out, err := exec.Command("go", "tool", "pprof", "-top",
				"-sample_index="+tt.index, path).CombinedOutput()
			require.NoError(t, err, "%s", out)
			var first string
			lines := strings.Split(string(out), "\n")
			for i, l := range lines {
				if strings.Contains(l, "flat%") && i+1 < len(lines) {
					fields := strings.Fields(lines[i+1])
					first = fields[len(fields)-1]
					break
				}
			}
			assert.Equal(t, tt.first, first, "%s", out)
		})
	}
	t.Run("default sample type is peak_space", func(t *testing.T) {
		out, err := exec.Command("go", "tool", "pprof", "-top", "-symbolize=none", path).CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Contains(t, string(out), "Type: peak_space")
	})
}

func TestBuildNil(t *testing.T) {
	_, err := Build(nil)
	assert.ErrorIs(t, err, ErrNilResult)
}

// mustSpacesResult analyses pid 9 with the three memory spaces: 3 MiB of
// device memory at alloc_dev (its nested cuMemAlloc_v2 too), 5 MiB of
// physical memory at create_phys, 7 MiB of pinned host memory at pin_host,
// all live at the end.
func mustSpacesResult(tb testing.TB) *analysis.Result {
	tb.Helper()
	recs := []event.Record{&event.Header{Version: 1, Mode: "run", PID: 9}}
	for i, fn := range []string{"alloc_dev", "create_phys", "pin_host"} {
		recs = append(recs, &event.Stack{ID: event.StackID(i + 1), PID: 9,
			Frames: []event.Frame{{Function: fn, File: "m.py", Line: int64(i + 1)}}})
	}
	ev := func(t uint64, k event.Kind, api event.API, addr, size uint64, st event.StackID, fl event.Flags) *event.Event {
		return &event.Event{Time: t, Kind: k, API: api, Addr: addr, Size: size, Stack: st, PID: 9,
			Layer: event.LayerSegment, Flags: fl}
	}
	recs = append(recs,
		ev(1, event.KindAlloc, event.APICudaMalloc, 0xa, 3*MiB, 1, 0),
		ev(2, event.KindAlloc, event.APICuMemAlloc, 0xa, 3*MiB, 1, event.FlagNested),
		ev(3, event.KindCreate, event.APICuMemCreate, 0xa, 5*MiB, 2, 0),
		ev(4, event.KindHostAlloc, event.APICudaMallocHost, 0xa, 7*MiB, 3, 0),
		&event.End{Time: 10, Reason: "exited"})
	a := analysis.New(analysis.Options{})
	for _, r := range recs {
		require.NoError(tb, a.Add(r))
	}
	return a.Finish()
}

func TestSpaceLabel(t *testing.T) {
	res := mustSpacesResult(t)
	p, err := Build(res)
	require.NoError(t, err)
	got := map[string][]string{}
	for _, s := range p.Sample {
		fn := s.Location[0].Line[0].Function.Name
		got[fn] = []string{s.Label["space"][0], s.Label["api"][0], strconv.FormatInt(s.Value[InuseSpace], 10)}
	}
	assert.Equal(t, map[string][]string{
		"alloc_dev":   {"device", "cudaMalloc", strconv.FormatUint(3*MiB, 10)},
		"create_phys": {"physical", "cuMemCreate", strconv.FormatUint(5*MiB, 10)},
		"pin_host":    {"host", "cudaMallocHost", strconv.FormatUint(7*MiB, 10)},
	}, got, "one sample per counted call: the nested driver call is not one")
	// Device and physical samples are report.json's totals.
	assert.Equal(t, 8*MiB, res.Totals.LiveBytesAtEnd)
	assert.Equal(t, 7*MiB, res.Host.LiveBytesAtEnd)

	if testing.Short() {
		t.Skip("runs go tool pprof")
	}
	path := mustWrite(t, res)
	out, err := exec.Command("go", "tool", "pprof", "-top", "-symbolize=none", "-sample_index=inuse_space",
		"-tagignore=space=host", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "Showing nodes accounting for 8MB", "%s", out)
	assert.NotContains(t, string(out), "pin_host")
}

func TestPIDReuseKeepsThePIDLabel(t *testing.T) {
	// pid 9 allocates 4 MiB (never freed) and exits; its PID is reused by a
	// process that allocates 1 MiB at the same address and frees it, then 2
	// MiB. Both processes' samples carry pid=9; their sums stay apart in
	// the values: alloc 7 MiB in 3 allocations, in use 4 + 2 MiB.
	recs := []event.Record{
		&event.Header{Version: 1, Mode: "attach", PID: 9},
		&event.Process{PID: 9, Time: 1},
		&event.Event{Time: 2, PID: 9, Kind: event.KindAlloc, Layer: event.LayerSegment, API: event.APICudaMalloc, Addr: 0xa, Size: 4 * MiB},
		&event.Process{PID: 9, Time: 3},
		&event.Event{Time: 4, PID: 9, Kind: event.KindAlloc, Layer: event.LayerSegment, API: event.APICudaMalloc, Addr: 0xa, Size: MiB},
		&event.Event{Time: 5, PID: 9, Kind: event.KindFree, Layer: event.LayerSegment, API: event.APICudaFree, Addr: 0xa},
		&event.Event{Time: 6, PID: 9, Kind: event.KindAlloc, Layer: event.LayerSegment, API: event.APICudaMalloc, Addr: 0xa, Size: 2 * MiB},
		&event.End{Time: 7},
	}
	a := analysis.New(analysis.Options{})
	for _, r := range recs {
		require.NoError(t, a.Add(r))
	}
	p, err := Build(a.Finish())
	require.NoError(t, err)
	var alloc, allocBytes, inuse int64
	for _, s := range p.Sample {
		assert.Equal(t, []string{"9"}, s.Label[LabelPID])
		alloc += s.Value[AllocObjects]
		allocBytes += s.Value[AllocSpace]
		inuse += s.Value[InuseSpace]
	}
	assert.Equal(t, int64(3), alloc)
	assert.Equal(t, int64(7*MiB), allocBytes)
	assert.Equal(t, int64(6*MiB), inuse, "the first process's 4 MiB, left when it ended, and the second's 2 MiB")
}

// mustHelperResult analyses pid 11, whose allocations all go through
// dev_alloc: load_weights 6 x 128 MiB (live at the peak), save_checkpoint
// 512 MiB freed at once (after load_weights: at the peak), log_metrics
// 1 MiB; and pid 12, Python through ctypes: cache_embeddings (model.py:22)
// called from model.py's module code, 64 MiB.
func mustHelperResult(tb testing.TB) *analysis.Result {
	tb.Helper()
	recs := []event.Record{
		&event.Header{Version: 1, Mode: "run", PID: 11},
		&event.Mapping{ID: 1, PID: 11, Start: 0x400000, Limit: 0x500000, File: "/srv/train"},
		&event.Mapping{ID: 2, PID: 11, Start: 0x7f0000, Limit: 0x7f8000, File: "/usr/lib/libcudart.so.12"},
		&event.Mapping{ID: 3, PID: 12, Start: 0x7f0000, Limit: 0x7f8000, File: "/usr/lib/libcudart.so.12"},
		&event.Mapping{ID: 4, PID: 12, Start: 0x7fa000, Limit: 0x7fb000, File: "/usr/lib/x86_64-linux-gnu/libffi.so.8.1.2"},
	}
	for i, caller := range []string{"load_weights", "save_checkpoint", "log_metrics"} {
		recs = append(recs, &event.Stack{ID: event.StackID(i + 1), PID: 11, Frames: []event.Frame{
			{Addr: 0x7f0010, Mapping: 2, Function: "cudaMalloc"},
			{Addr: 0x400010, Mapping: 1, Function: "dev_alloc", File: "train.c", Line: 10},
			{Addr: 0x400100 + uint64(i), Mapping: 1, Function: caller, File: "train.c", Line: int64(20 + i)},
			{Addr: 0x400200, Mapping: 1, Function: "main", File: "train.c", Line: 90},
		}})
	}
	recs = append(recs, &event.Stack{ID: 4, PID: 12, Frames: []event.Frame{
		{Addr: 0x7f0010, Mapping: 3, Function: "cudaMalloc"},
		{Addr: 0x7fa010, Mapping: 4},
		{Function: "cache_embeddings", File: "/srv/model.py", Line: 22},
		{Function: "<module>", File: "/srv/model.py", Line: 30},
	}})
	ev := func(t uint64, pid uint32, k event.Kind, addr, size uint64, st event.StackID) *event.Event {
		return &event.Event{Time: t, Kind: k, Addr: addr, Size: size, Stack: st, PID: pid,
			Layer: event.LayerSegment, API: event.APICudaMalloc}
	}
	for i := range uint64(6) {
		recs = append(recs, ev(1+i, 11, event.KindAlloc, 0x10000+i, 128*MiB, 1))
	}
	recs = append(recs, ev(10, 11, event.KindAlloc, 0x20000, MiB, 3),
		ev(11, 11, event.KindAlloc, 0x30000, 512*MiB, 2), ev(12, 11, event.KindFree, 0x30000, 0, 0),
		ev(13, 12, event.KindAlloc, 0x40000, 64*MiB, 4), &event.End{Time: 20})
	a := analysis.New(analysis.Options{})
	for _, r := range recs {
		require.NoError(tb, a.Add(r))
	}
	return a.Finish()
}

// TestSiteIsTheLeaf: a sample's stack starts at its site (the caller
// apart from the shared helper, the Python frame past libffi), so pprof's
// flat column names the place to fix; the CUDA call is the api label, the
// helper the helper label; Python's <module> keeps a name under pprof's
// symbolizer.
func TestSiteIsTheLeaf(t *testing.T) {
	res := mustHelperResult(t)
	p, err := Build(res)
	require.NoError(t, err)
	leaves := map[string][]string{}
	for _, s := range p.Sample {
		leaf := s.Location[0].Line[0].Function.Name
		leaves[leaf] = []string{s.Label[LabelAPI][0], strings.Join(s.Label[LabelHelper], ",")}
	}
	assert.Equal(t, map[string][]string{
		"load_weights":     {"cudaMalloc", "dev_alloc"},
		"save_checkpoint":  {"cudaMalloc", "dev_alloc"},
		"log_metrics":      {"cudaMalloc", "dev_alloc"},
		"cache_embeddings": {"cudaMalloc", ""},
	}, leaves)
	for _, fn := range p.Function {
		if fn.SystemName == "<module>" {
			assert.Equal(t, "model.<module>", fn.Name)
		}
	}

	if testing.Short() {
		t.Skip("runs go tool pprof")
	}
	path := mustWrite(t, res)
	for _, tt := range []struct{ index, first string }{
		{"peak_space", "load_weights"},
		{"alloc_space", "load_weights"},
		{"inuse_space", "load_weights"},
	} {
		// pprof's default symbolization (not -symbolize=none): it is what
		// renamed <module> to <unknown>.
		out, err := exec.Command("go", "tool", "pprof", "-top", "-tagfocus=pid=^11$", "-sample_index="+tt.index, path).CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Equal(t, tt.first, pprofFirst(string(out)), "%s: %s", tt.index, out)
	}
	out, err := exec.Command("go", "tool", "pprof", "-traces", "-tagfocus=pid=^12$", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "model.<module>")
	assert.NotContains(t, string(out), "<unknown>")
	assert.NotContains(t, string(out), "libffi")
}

// pprofFirst is the function of the first row of `go tool pprof -top`.
func pprofFirst(out string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, "flat%") && i+1 < len(lines) {
			if fields := strings.Fields(lines[i+1]); len(fields) > 0 {
				return fields[len(fields)-1]
			}
		}
	}
	return ""
}
