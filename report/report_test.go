package report

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/probes/event"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const (
	MiB = uint64(1) << 20
	GiB = uint64(1) << 30
	sec = uint64(1e9)
)

// trainRecords is a 60 s run of pid 100 (python train.py) with a child pid
// 101. pid 100: 2 GiB of weights on device 0 at 1 s; a 256 MiB scratch
// buffer allocated and freed every second; 16 MiB leaked every second from
// 1 s to 59 s at record_metrics; a 4 GiB request failing with error 2 at
// 59.5 s; a free of an address allocated before attach; a cudaFree(NULL).
// pid 101: 512 MiB on an unknown device, freed. 4 events lost.
func trainRecords() []event.Record {
	recs := []event.Record{
		&event.Header{Version: 1, Tool: "vramprof 0.1.0", Mode: "run", Command: []string{"python", "train.py"},
			PID: 100, Start: 1000 * sec, WallTime: 1_700_000_000_000_000_000, Host: "gpu-1"},
		&event.Process{PID: 100, Command: []string{"python", "train.py"}, Exe: "/usr/bin/python3.11", Time: 1000 * sec},
		&event.Library{PID: 100, Path: "/usr/lib/x86_64-linux-gnu/libcudart.so.12", BuildID: "0123abcd",
			Symbols: []string{"cudaFree", "cudaMalloc"}},
		&event.Mapping{ID: 1, PID: 100, Start: 0x400000, Limit: 0x800000, File: "/usr/bin/python3.11", BuildID: "feed"},
		&event.Mapping{ID: 2, PID: 100, Start: 0x7f0000000000, Limit: 0x7f0000100000,
			File: "/usr/lib/x86_64-linux-gnu/libcudart.so.12", BuildID: "0123abcd"},
	}
	stack := func(id event.StackID, pid uint32, fn string, line int64) *event.Stack {
		return &event.Stack{ID: id, PID: pid, Frames: []event.Frame{
			{Addr: 0x7f0000000100, Mapping: 2, Function: "cudaMalloc"},
			{Addr: 0x7f0000000200, Mapping: 2}, // no symbol: rendered by address
			{Addr: 0x400000 + uint64(id)*0x100, Mapping: 1, Function: fn, File: "train.py", Line: line},
			{Addr: 0x400010, Mapping: 1, Function: "main", File: "train.py", Line: 100},
		}}
	}
	recs = append(recs, stack(1, 100, "load_weights", 12), stack(2, 100, "forward", 40),
		stack(3, 100, "record_metrics", 77), stack(4, 101, "worker", 5))
	at := func(t uint64) uint64 { return 1000*sec + t }
	ev := func(e event.Event) *event.Event {
		if e.PID == 0 {
			e.PID = 100
		}
		e.Layer = event.LayerSegment
		if e.Kind == event.KindAlloc {
			e.API = event.APICudaMalloc
		} else {
			e.API = event.APICudaFree
		}
		return &e
	}
	recs = append(recs, &event.Process{PID: 101, PPID: 100, Command: []string{"python", "-c", "worker"}, Time: at(0)})
	recs = append(recs, ev(event.Event{Time: at(sec / 2), Kind: event.KindFree, Addr: 0x1}))
	recs = append(recs, ev(event.Event{Time: at(sec), Kind: event.KindAlloc, Addr: 0x10000000, Size: 2 * GiB, Stack: 1}))
	recs = append(recs, ev(event.Event{Time: at(sec + 1), Kind: event.KindFree, Addr: 0}))
	recs = append(recs, ev(event.Event{Time: at(2 * sec), PID: 101, Device: event.DeviceUnknown, Kind: event.KindAlloc,
		Addr: 0x20000000, Size: 512 * MiB, Stack: 4}))
	recs = append(recs, ev(event.Event{Time: at(3 * sec), PID: 101, Kind: event.KindFree, Addr: 0x20000000}))
	for i := uint64(1); i < 60; i++ {
		recs = append(recs,
			ev(event.Event{Time: at(i*sec + 100), Kind: event.KindAlloc, Addr: 0x30000000, Size: 256 * MiB, Stack: 2}),
			ev(event.Event{Time: at(i*sec + 200), Kind: event.KindAlloc, Addr: 0x40000000 + i*0x1000000, Size: 16 * MiB, Stack: 3}),
			ev(event.Event{Time: at(i*sec + 300), Kind: event.KindFree, Addr: 0x30000000}))
	}
	recs = append(recs,
		ev(event.Event{Time: at(59*sec + sec/2), Kind: event.KindAlloc, Size: 4 * GiB, Stack: 2, Ret: 2}),
		&event.Lost{Time: at(59 * sec), Total: 4},
		&event.End{Time: at(60 * sec), Reason: "exited", ExitCode: 1})
	return recs
}

// cutRecords is a stream cut short (no End) with block-layer events and no
// process, library or stack records.
func cutRecords() []event.Record {
	return []event.Record{
		&event.Header{Version: 1, Tool: "vramprof 0.1.0", Mode: "attach", PID: 7, Start: 0},
		&event.Event{Time: 10, PID: 7, Kind: event.KindAlloc, Layer: event.LayerSegment, Addr: 0x100, Size: 20 * MiB},
		&event.Event{Time: 20, PID: 7, Kind: event.KindAlloc, Layer: event.LayerBlock, Addr: 0x100, Size: 3 * MiB},
		&event.Event{Time: 30, PID: 7, Kind: event.KindAlloc, Layer: event.LayerBlock, Addr: 0x400, Size: MiB},
		&event.Event{Time: 40, PID: 7, Kind: event.KindFree, Layer: event.LayerBlock, Addr: 0x100},
	}
}

// mixedRecords is a 10 s run of pid 200 (python fork.py), which forked pid
// 201, with every kind of call the probes emit. Runtime calls arrive after
// the driver call nested inside them (the inner call returns first).
//
//	pid 200, device 1 (set at 0.5 s):
//	  1 s    cudaMalloc 1 GiB at alloc_params (cuMemAlloc_v2 nested)
//	  2 s    cudaMallocHost 256 MiB at pin_batch (cuMemHostAlloc nested)
//	  3 s    reserve 4 GiB; create h1 512 MiB, map it; create h2 512 MiB, map it
//	  5 s    unmap h1's range, release h1
//	pid 201, device 0:
//	  4 s    cuMemAlloc_v2 128 MiB called directly (not nested)
//	  4.5 s  cudaMalloc 64 MiB (nested)
//	  6 s    cuMemFree_v2 of the 128 MiB, directly
//	  7 s    cudaFree of 0xdead failing with 1 (nested failing too), from a
//	         thread whose device is unknown
//
// Device totals: 1 GiB + 1 GiB physical + 128 + 64 MiB at 4.5 s (the peak);
// 1 GiB + 512 MiB + 64 MiB at the end.
func mixedRecords() []event.Record {
	at := func(t uint64) uint64 { return 1000*sec + t }
	recs := []event.Record{
		&event.Header{Version: 1, Tool: "vramprof 0.1.0", Mode: "run", Command: []string{"python", "fork.py"},
			PID: 200, Start: 1000 * sec, Host: "gpu-2"},
		&event.Process{PID: 200, Command: []string{"python", "fork.py"}, Time: 1000 * sec},
		&event.Process{PID: 201, PPID: 200, Command: []string{"python", "fork.py"}, Time: at(sec)},
		&event.Library{PID: 200, Path: "/usr/lib/libcudart.so.12", Symbols: []string{"cudaFree", "cudaMalloc", "cudaMallocHost"}},
		&event.Library{PID: 200, Path: "/usr/lib/libcuda.so.1", Symbols: []string{"cuMemAlloc_v2", "cuMemCreate", "cuMemFree_v2"}},
	}
	for i, fn := range []string{"alloc_params", "pin_batch", "grow_segment", "worker_alloc"} {
		recs = append(recs, &event.Stack{ID: event.StackID(i + 1), PID: 200,
			Frames: []event.Frame{{Function: fn, File: "fork.py", Line: int64(10 * (i + 1))}}})
	}
	ev := func(e event.Event) *event.Event {
		if e.PID == 0 {
			e.PID = 200
		}
		e.Layer = event.LayerSegment
		return &e
	}
	// nested emits the driver call (nested), then the runtime call.
	nested := func(e event.Event, drv event.API) []event.Record {
		n := e
		n.API, n.Flags = drv, event.FlagNested
		return []event.Record{ev(n), ev(e)}
	}
	const va = 0x7000000000
	recs = append(recs, ev(event.Event{Time: at(sec / 2), Device: 1, Kind: event.KindSetDevice, API: event.APICudaSetDevice}))
	recs = append(recs, nested(event.Event{Time: at(sec), Device: 1, Kind: event.KindAlloc, API: event.APICudaMalloc,
		Addr: 0x10000000, Size: GiB, Stack: 1}, event.APICuMemAlloc)...)
	recs = append(recs, nested(event.Event{Time: at(2 * sec), Device: 1, Kind: event.KindHostAlloc, API: event.APICudaMallocHost,
		Addr: 0x90000000, Size: 256 * MiB, Stack: 2}, event.APICuMemHostAlloc)...)
	vmm := func(t uint64, k event.Kind, api event.API, addr, size, handle uint64) *event.Event {
		return ev(event.Event{Time: at(t), Device: 1, Kind: k, API: api, Addr: addr, Size: size, Stream: handle, Stack: 3})
	}
	recs = append(recs,
		vmm(3*sec, event.KindReserve, event.APICuMemAddressReserve, va, 4*GiB, 0),
		vmm(3*sec+1, event.KindCreate, event.APICuMemCreate, 0x1, 512*MiB, 0),
		vmm(3*sec+2, event.KindMap, event.APICuMemMap, va, 512*MiB, 0x1),
		vmm(3*sec+3, event.KindCreate, event.APICuMemCreate, 0x2, 512*MiB, 0),
		vmm(3*sec+4, event.KindMap, event.APICuMemMap, va+512*MiB, 512*MiB, 0x2),
		ev(event.Event{Time: at(4 * sec), PID: 201, Kind: event.KindAlloc, API: event.APICuMemAlloc,
			Addr: 0x20000000, Size: 128 * MiB, Stack: 4}))
	recs = append(recs, nested(event.Event{Time: at(4*sec + sec/2), PID: 201, Kind: event.KindAlloc, API: event.APICudaMalloc,
		Addr: 0x30000000, Size: 64 * MiB, Stack: 4}, event.APICuMemAlloc)...)
	recs = append(recs,
		vmm(5*sec, event.KindUnmap, event.APICuMemUnmap, va, 512*MiB, 0),
		vmm(5*sec+1, event.KindRelease, event.APICuMemRelease, 0x1, 0, 0),
		ev(event.Event{Time: at(6 * sec), PID: 201, Kind: event.KindFree, API: event.APICuMemFree, Addr: 0x20000000}))
	recs = append(recs, nested(event.Event{Time: at(7 * sec), PID: 201, TID: 202, Device: event.DeviceUnknown,
		Kind: event.KindFree, API: event.APICudaFree, Addr: 0xdead, Ret: 1}, event.APICuMemFree)...)
	recs = append(recs, &event.End{Time: at(10 * sec), Reason: "exited"})
	return recs
}

// attachRecords is a 10 s attach to pid 300 (python serve.py) with NVML on
// two devices, a child 301 whose PID is reused, and NVML lagging at the end.
//
//	0 s    NVML available; devices 0 and 1 (40 GiB each); pid 300 attached
//	1 s    300 frees 0xdead, allocated before the attach (size unknown)
//	2 s    300: 4 GiB on device 0
//	3 s    tick: device 0 10 GiB used, 300 at 7 GiB (3 GiB gap: pre-existing
//	       estimate); device 1 1 GiB used
//	4 s    301 (parent 300) starts; 5 s: 1 GiB on device 1
//	6 s    tick: 300 at 7 GiB, 301 at 1.2 GiB (1 GiB traced)
//	7 s    PID 301 reused; 8 s: 512 MiB on device 1
//	8.5 s  300: 1 GiB more on device 0 (5 GiB traced)
//	9 s    tick: 300 at 4.5 GiB (NVML lags: -0.5 GiB), 301 at 600 MiB
func attachRecords() []event.Record {
	at := func(t uint64) uint64 { return 1000*sec + t }
	recs := []event.Record{
		&event.Header{Version: 1, Tool: "vramprof 0.1.0", Mode: "attach", Command: []string{"python", "serve.py"},
			PID: 300, Start: 1000 * sec, Host: "gpu-3"},
		&event.NVMLStatus{Time: at(0), Available: true},
		&event.DeviceInfo{Index: 0, Name: "NVIDIA A100-SXM4-40GB", UUID: "GPU-1111", TotalBytes: 40 * GiB, Time: at(0)},
		&event.DeviceInfo{Index: 1, Name: "NVIDIA A100-SXM4-40GB", UUID: "GPU-2222", TotalBytes: 40 * GiB, Time: at(0)},
		&event.Process{PID: 300, Command: []string{"python", "serve.py"}, Time: at(0)},
		&event.Stack{ID: 1, PID: 300, Frames: []event.Frame{{Function: "load_model", File: "serve.py", Line: 10}}},
		&event.Stack{ID: 2, PID: 301, Frames: []event.Frame{{Function: "worker", File: "serve.py", Line: 20}}},
	}
	ev := func(t uint64, pid uint32, dev int32, k event.Kind, addr, size uint64, st event.StackID) *event.Event {
		api := event.APICudaMalloc
		if k == event.KindFree {
			api = event.APICudaFree
		}
		return &event.Event{Time: at(t), PID: pid, Device: dev, Kind: k, Layer: event.LayerSegment, API: api,
			Addr: addr, Size: size, Stack: st}
	}
	sample := func(t uint64, dev int32, used uint64, procs ...event.ProcessUsage) *event.Sample {
		return &event.Sample{Time: at(t), Device: dev, TotalBytes: 40 * GiB, UsedBytes: used, FreeBytes: 40*GiB - used,
			Processes: procs}
	}
	return append(recs,
		ev(sec, 300, 0, event.KindFree, 0xdead, 0, 0),
		ev(2*sec, 300, 0, event.KindAlloc, 0x1000000, 4*GiB, 1),
		sample(3*sec, 0, 10*GiB, event.ProcessUsage{PID: 300, UsedBytes: 7 * GiB}),
		sample(3*sec, 1, GiB),
		&event.Process{PID: 301, PPID: 300, Command: []string{"python", "worker.py"}, Time: at(4 * sec)},
		ev(5*sec, 301, 1, event.KindAlloc, 0xa000000, GiB, 2),
		sample(6*sec, 0, 10*GiB, event.ProcessUsage{PID: 300, UsedBytes: 7 * GiB}),
		sample(6*sec, 1, 2*GiB, event.ProcessUsage{PID: 301, UsedBytes: 1228 * MiB}),
		&event.Process{PID: 301, PPID: 300, Command: []string{"python", "worker.py", "--again"}, Time: at(7 * sec)},
		ev(8*sec, 301, 1, event.KindAlloc, 0xa000000, 512*MiB, 2),
		ev(8*sec+sec/2, 300, 0, event.KindAlloc, 0x200000000, GiB, 1),
		sample(9*sec, 0, 8*GiB, event.ProcessUsage{PID: 300, UsedBytes: 4*GiB + 512*MiB}),
		sample(9*sec, 1, 2*GiB, event.ProcessUsage{PID: 301, UsedBytes: 600 * MiB}),
		&event.End{Time: at(10 * sec), Reason: "interrupted"})
}

func mustResult(tb testing.TB, recs []event.Record) *analysis.Result {
	tb.Helper()
	a := analysis.New(analysis.Options{TimelinePoints: 8})
	for _, r := range recs {
		require.NoError(tb, a.Add(r))
	}
	return a.Finish()
}

var scenarios = map[string]func() []event.Record{"train": trainRecords, "cut": cutRecords, "mixed": mixedRecords,
	"attach": attachRecords}

var formats = map[string]func(io.Writer, *analysis.Result) error{
	"json": WriteJSON, "md": WriteMarkdown, "txt": WriteSummary,
}

func TestGolden(t *testing.T) {
	for name, recs := range scenarios {
		for ext, write := range formats {
			t.Run(name+"."+ext, func(t *testing.T) {
				var buf bytes.Buffer
				require.NoError(t, write(&buf, mustResult(t, recs())))
				path := filepath.Join("testdata", name+"."+ext+".golden")
				if *update {
					require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
				}
				want, err := os.ReadFile(path)
				require.NoError(t, err, "run go test ./report -update to create it")
				if d := diff(string(want), buf.String()); d != "" {
					t.Errorf("%s differs from the golden file (-want +got; -update rewrites it):\n%s", path, d)
				}
			})
		}
	}
}

func TestDeterministic(t *testing.T) {
	for ext, write := range formats {
		var a, b bytes.Buffer
		require.NoError(t, write(&a, mustResult(t, trainRecords())))
		require.NoError(t, write(&b, mustResult(t, trainRecords())))
		assert.Equal(t, a.String(), b.String(), ext)
	}
}

func TestJSONSchema(t *testing.T) {
	decode := func(recs []event.Record) map[string]any {
		var buf bytes.Buffer
		require.NoError(t, WriteJSON(&buf, mustResult(t, recs)))
		var m map[string]any
		require.NoError(t, json.Unmarshal(buf.Bytes(), &m))
		return m
	}
	m := decode(trainRecords())
	assert.Equal(t, "vramprof/report/v1", m["schema"])
	assert.NotContains(t, m, "blocks", "no block layer traced")
	totals := m["totals"].(map[string]any)
	// The numbers come from the scenario (see trainRecords):
	//   allocations: 1 weights + 1 worker + 59 scratch + 59 leaks = 120
	//   peak: 2 GiB + 256 MiB + 59*16 MiB at 59 s (the worker is gone by 3 s)
	want := map[string]float64{
		"allocations": 120, "frees": 60, "failed_allocations": 1, "unknown_frees": 1, "lost_events": 4,
		"allocated_bytes":   float64(2*GiB + 512*MiB + 59*256*MiB + 59*16*MiB),
		"peak_bytes":        float64(2*GiB + 256*MiB + 59*16*MiB),
		"live_bytes_at_end": float64(2*GiB + 59*16*MiB),
		"null_frees":        1,
	}
	for k, v := range want {
		assert.Equal(t, v, totals[k], k)
	}
	dev := m["devices"].([]any)
	require.Len(t, dev, 2)
	assert.Equal(t, float64(-1), dev[0].(map[string]any)["index"])
	assert.Equal(t, "unknown", dev[0].(map[string]any)["name"])
	assert.Nil(t, dev[0].(map[string]any)["capacity_bytes"])
	for _, p := range m["processes"].([]any) {
		for _, k := range []string{"pid", "command", "peak_bytes", "live_bytes_at_end"} {
			assert.Contains(t, p, k)
		}
	}
	kinds := map[string]bool{}
	for _, f := range m["findings"].([]any) {
		fm := f.(map[string]any)
		for _, k := range []string{"kind", "severity", "summary", "bytes", "stacks", "remediation"} {
			assert.Contains(t, fm, k)
		}
		kinds[fm["kind"].(string)] = true
		if fm["kind"] == "oom" {
			assert.Equal(t, float64(4*GiB), fm["bytes"])
		}
	}
	assert.Equal(t, map[string]bool{"peak": true, "leak": true, "oom": true}, kinds)

	cut := decode(cutRecords())
	blocks := cut["blocks"].(map[string]any)
	assert.Equal(t, float64(2), blocks["allocations"])
	assert.Equal(t, float64(4*MiB), blocks["peak_allocated_bytes"])
	assert.Equal(t, float64(MiB), blocks["live_bytes_at_end"])
	assert.Equal(t, false, cut["run"].(map[string]any)["ended_cleanly"])
}

func TestJSONBooksHostVMM(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteJSON(&buf, mustResult(t, mixedRecords())))
	var m map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &m))
	num := func(v any, k string) float64 { return v.(map[string]any)[k].(float64) }
	// Numbers from mixedRecords' comment.
	totals := m["totals"]
	assert.Equal(t, float64(5), num(totals, "allocations"), "2 cudaMalloc + 2 cuMemCreate + 1 direct cuMemAlloc_v2")
	assert.Equal(t, float64(2), num(totals, "frees"), "h1 and the direct cuMemFree_v2")
	assert.Equal(t, float64(1), num(totals, "failed_frees"))
	assert.Equal(t, float64(GiB+GiB+128*MiB+64*MiB), num(totals, "peak_bytes"))
	assert.Equal(t, float64(GiB+512*MiB+64*MiB), num(totals, "live_bytes_at_end"), "host memory is not in totals")

	books := m["books"]
	rt, drv := books.(map[string]any)["runtime"], books.(map[string]any)["driver"]
	assert.Equal(t, float64(2), num(rt, "allocations"))
	assert.Equal(t, float64(GiB+64*MiB), num(rt, "allocated_bytes"))
	assert.Equal(t, float64(1), num(rt, "failed_frees"))
	assert.Equal(t, float64(5), num(drv, "allocations"), "2 nested + 1 direct + 2 cuMemCreate")
	assert.Equal(t, float64(2), num(drv, "frees"))
	assert.Equal(t, float64(GiB+128*MiB+64*MiB+GiB), num(drv, "allocated_bytes"))

	host := m["host"]
	assert.Equal(t, float64(1), num(host, "allocations"), "cudaMallocHost once, its cuMemHostAlloc not again")
	assert.Equal(t, float64(256*MiB), num(host, "peak_bytes"))
	assert.Equal(t, float64(256*MiB), num(host, "live_bytes_at_end"))

	vmm := m["vmm"]
	for k, v := range map[string]float64{"reserves": 1, "creates": 2, "maps": 2, "unmaps": 1, "releases": 1,
		"unreserves": 0, "reserved_peak_bytes": float64(4 * GiB), "reserved_bytes_at_end": float64(4 * GiB),
		"physical_peak_bytes": float64(GiB), "physical_bytes_at_end": float64(512 * MiB),
		"mapped_peak_bytes": float64(GiB), "mapped_bytes_at_end": float64(512 * MiB)} {
		assert.Equal(t, v, num(vmm, k), k)
	}

	// Devices: unknown (an event carried it), 0 (pid 201), 1 (pid 200).
	var devs []string
	for _, d := range m["devices"].([]any) {
		devs = append(devs, d.(map[string]any)["name"].(string))
	}
	assert.Equal(t, []string{"unknown", "0", "1"}, devs)

	procs := m["processes"].([]any)
	require.Len(t, procs, 2)
	assert.Equal(t, float64(0), num(procs[0], "ppid"))
	assert.Equal(t, float64(200), num(procs[1], "ppid"))
	assert.Contains(t, procs[0], "vmm")
	assert.NotContains(t, procs[1], "vmm", "pid 201 made no VMM call")
	assert.Equal(t, float64(256*MiB), num(procs[0].(map[string]any)["host"], "peak_bytes"))
	assert.Equal(t, float64(2), num(procs[1].(map[string]any)["books"].(map[string]any)["driver"], "allocations"), "1 direct + 1 nested")

	assert.NotContains(t, decodeTrain(t), "vmm", "no VMM call, no vmm")
}

func decodeTrain(t *testing.T) map[string]any {
	var buf bytes.Buffer
	require.NoError(t, WriteJSON(&buf, mustResult(t, trainRecords())))
	var m map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &m))
	return m
}

func TestLostEventsAlwaysShown(t *testing.T) {
	res := mustResult(t, cutRecords())
	var md, txt bytes.Buffer
	require.NoError(t, WriteMarkdown(&md, res))
	require.NoError(t, WriteSummary(&txt, res))
	assert.Contains(t, md.String(), "## Lost events\n\n0 records lost.")
	assert.Contains(t, txt.String(), "lost events:        0\n")
}

func TestSummaryLength(t *testing.T) {
	for name, recs := range scenarios {
		if name == "cut" {
			continue // nothing to say: shorter
		}
		var buf bytes.Buffer
		require.NoError(t, WriteSummary(&buf, mustResult(t, recs())))
		n := strings.Count(buf.String(), "\n")
		assert.GreaterOrEqual(t, n, 10, name)
		assert.LessOrEqual(t, n, 20, name)
	}
}

func TestSummaryBooksHostVMM(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteSummary(&buf, mustResult(t, mixedRecords())))
	out := buf.String()
	assert.Contains(t, out, "books:              runtime: 2 allocations, 1140850688 bytes (1.06 GiB) | driver: 5 allocations, 2348810240 bytes (2.19 GiB)\n")
	assert.Contains(t, out, "pinned host:        peak 268435456 bytes (256.00 MiB)")
	assert.Contains(t, out, "vmm:                reserved peak 4294967296 (4.00 GiB, 4294967296 at end), physical peak 1073741824")
	buf.Reset()
	require.NoError(t, WriteSummary(&buf, mustResult(t, trainRecords())))
	assert.NotContains(t, buf.String(), "books:", "one book only: nothing to compare")
	assert.NotContains(t, buf.String(), "vmm:")
}

func TestNilResult(t *testing.T) {
	for ext, write := range formats {
		assert.ErrorIs(t, write(io.Discard, nil), ErrNilResult, ext)
	}
}

func TestDiff(t *testing.T) {
	assert.Empty(t, diff("a\nb\n", "a\nb\n"))
	assert.Equal(t, "@@ -1,3 +1,3 @@\n a\n-b\n+c\n d\n", diff("a\nb\nd\n", "a\nc\nd\n"))
}

func TestNVMLUnavailableIsOneLine(t *testing.T) {
	// Attached, NVML failed to start: one line in each rendering, the
	// reason once in report.json, no per-process estimate.
	recs := cutRecords()
	recs = append(recs[:1:1], append([]event.Record{
		&event.NVMLStatus{Time: 5, Reason: "NVML unavailable: nvmlInit: Driver Not Loaded"}}, recs[1:]...)...)
	res := mustResult(t, recs)
	const line = "NVML unavailable: nvmlInit: Driver Not Loaded\n"
	for _, w := range []func(io.Writer, *analysis.Result) error{WriteMarkdown, WriteSummary} {
		var buf bytes.Buffer
		require.NoError(t, w(&buf, res))
		assert.Equal(t, 1, strings.Count(buf.String(), "NVML unavailable"), buf.String())
		assert.Contains(t, buf.String(), "\n"+line)
		assert.NotContains(t, buf.String(), "NVML: off")
	}
	m := decodeJSON(t, res)
	assert.Equal(t, map[string]any{"available": false, "reason": "nvmlInit: Driver Not Loaded"}, m["nvml"])
	p := m["processes"].([]any)[0].(map[string]any)
	assert.Nil(t, p["preexisting_bytes_estimate"], "attached without NVML: unknown")
	assert.Equal(t, "unknown", p["preexisting_basis"])
	assert.Nil(t, p["nvml"])
}

func TestNVMLOff(t *testing.T) {
	res := mustResult(t, trainRecords())
	m := decodeJSON(t, res)
	assert.NotContains(t, m, "nvml", "no NVML record: absent")
	var buf bytes.Buffer
	require.NoError(t, WriteSummary(&buf, res))
	assert.Contains(t, buf.String(), "\nNVML: off\n")
	// Run mode: the launched command and its forked child predate nothing.
	for _, p := range m["processes"].([]any) {
		assert.Equal(t, float64(0), p.(map[string]any)["preexisting_bytes_estimate"])
		assert.Equal(t, "traced_from_start", p.(map[string]any)["preexisting_basis"])
	}
}

func TestJSONNVMLAndPIDReuse(t *testing.T) {
	// See attachRecords for the arithmetic.
	m := decodeJSON(t, mustResult(t, attachRecords()))
	assert.Equal(t, map[string]any{"available": true, "samples": float64(6)}, m["nvml"])
	d1 := m["devices"].([]any)[1].(map[string]any)
	assert.Equal(t, "GPU-2222", d1["uuid"])
	assert.Equal(t, float64(GiB), d1["nvml_used_at_peak_bytes"], "the 3 s sample, before the 5 s peak")
	assert.Equal(t, float64(3*sec), d1["nvml_used_at_peak_time_ns"])
	assert.Equal(t, float64(2*GiB), d1["nvml_max_used_bytes"])

	procs := m["processes"].([]any)
	require.Len(t, procs, 3)
	p300, old, cur := procs[0].(map[string]any), procs[1].(map[string]any), procs[2].(map[string]any)
	nv := p300["nvml"].(map[string]any)
	assert.Equal(t, map[string]any{"time_ns": float64(9 * sec), "nvml_used_bytes": float64(4*GiB + 512*MiB),
		"traced_live_bytes": float64(5 * GiB), "gap_bytes": -float64(512 * MiB)}, nv["latest"], "NVML lags")
	assert.Equal(t, map[string]any{"time_ns": float64(6 * sec), "nvml_used_bytes": float64(7 * GiB),
		"traced_live_bytes": float64(4 * GiB), "gap_bytes": float64(3 * GiB)}, nv["at_peak"])
	assert.Equal(t, float64(3*GiB), p300["preexisting_bytes_estimate"], "7 GiB NVML - 4 GiB traced at 3 s")
	assert.Equal(t, float64(1), p300["unknown_frees"])

	// PID 301 twice: the first keeps its 1 GiB (left when it ended), the
	// second has its own 512 MiB at the same address.
	for _, p := range []map[string]any{old, cur} {
		assert.Equal(t, float64(301), p["pid"])
	}
	assert.Equal(t, float64(4*sec), old["start_ns"])
	assert.Equal(t, float64(7*sec), old["superseded_ns"])
	assert.Equal(t, float64(GiB), old["live_bytes_at_end"])
	assert.Equal(t, float64(7*sec), cur["start_ns"])
	assert.Nil(t, cur["superseded_ns"])
	assert.Equal(t, float64(512*MiB), cur["live_bytes_at_end"])
	// Totals: 4 + 1 GiB (300), 512 MiB (301 again); the first 301's GiB
	// died with it.
	totals := m["totals"].(map[string]any)
	assert.Equal(t, float64(5*GiB+512*MiB), totals["live_bytes_at_end"])
	assert.Equal(t, float64(5*GiB+512*MiB), totals["peak_bytes"])
	var starts []float64
	for _, tl := range m["timelines"].([]any) {
		if tm := tl.(map[string]any); tm["pid"] == float64(301) {
			starts = append(starts, tm["process_start_ns"].(float64))
		}
	}
	assert.Equal(t, []float64{float64(4 * sec), float64(7 * sec)}, starts)
}

func decodeJSON(t *testing.T, res *analysis.Result) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, WriteJSON(&buf, res))
	var m map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &m))
	return m
}

// TestMarkdownEscapesTargetNames: names from the target stay literal in
// GitHub markdown (no HTML tag swallowed, no emphasis, no broken table).
func TestMarkdownEscapesTargetNames(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"std::vector<float>::push_back", `std::vector&lt;float&gt;::push\_back`},
		{"__init__ (model.py:3)", `\_\_init\_\_ (model.py:3)`},
		{"a|b*c`d[e]#f", "a\\|b\\*c\\`d\\[e\\]\\#f"},
		{`C:\path`, `C:\\path`},
	} {
		assert.Equal(t, tc.want, md(tc.in), tc.in)
	}
	assert.Equal(t, " ", cell(""))
}

// TestNoCallsSeen: CUDA probed in the target but not one call seen is said
// in one line in every rendering, never passed off as a quiet run; a
// library probed and calls seen, or nothing probed at all, say nothing.
func TestNoCallsSeen(t *testing.T) {
	lib := &event.Library{PID: 300, Path: "/usr/lib/libcudart.so.12", Symbols: []string{"cudaMalloc", "cudaFree"}}
	header := &event.Header{Version: 1, Tool: "vramprof 0.1.0", Mode: "attach", PID: 300, Start: sec}
	proc := &event.Process{PID: 300, Command: []string{"python", "serve.py"}, Time: sec}
	end := &event.End{Time: 2 * sec, Reason: "interrupted"}
	for _, tc := range []struct {
		name string
		recs []event.Record
		want bool
	}{
		{"probed, no calls", []event.Record{header, proc, lib, end}, true},
		{"nothing probed", []event.Record{header, proc, end}, false},
		{"probed, calls", append([]event.Record{lib}, attachRecords()...), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := mustResult(t, tc.recs)
			for name, w := range map[string]func(io.Writer, *analysis.Result) error{
				"summary": WriteSummary, "markdown": WriteMarkdown, "html": WriteHTML,
			} {
				var buf bytes.Buffer
				require.NoError(t, w(&buf, res))
				n := strings.Count(buf.String(), "no calls seen: CUDA was loaded and probed")
				if tc.want {
					assert.Equal(t, 1, n, "%s:\n%s", name, buf.String())
				} else {
					assert.Zero(t, n, name)
				}
			}
			run := decodeJSON(t, res)["run"].(map[string]any)
			assert.Equal(t, tc.want, run["no_calls_seen"])
			if tc.want {
				assert.Contains(t, run["note"], "no calls seen")
			} else {
				assert.NotContains(t, run, "note")
			}
		})
	}
}
