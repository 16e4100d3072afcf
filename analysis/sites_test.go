package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

// siteMappings are the files of the site tests' process (pid 100): the
// program, the CUDA runtime, FFI and interpreter glue, and libc.
var siteMappings = []event.Record{
	&event.Mapping{ID: 1, PID: 100, Start: 0x1000, Limit: 0x9000, File: "/srv/train"},
	&event.Mapping{ID: 2, PID: 100, Start: 0x7f0000, Limit: 0x7f9000, File: "/usr/lib/libcudart.so.12"},
	&event.Mapping{ID: 3, PID: 100, Start: 0x7fa000, Limit: 0x7fb000, File: "/usr/lib/x86_64-linux-gnu/libffi.so.8.1.2"},
	&event.Mapping{ID: 4, PID: 100, Start: 0x7fc000, Limit: 0x7fd000, File: "/usr/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so"},
	&event.Mapping{ID: 5, PID: 100, Start: 0x400000, Limit: 0x500000, File: "/usr/bin/python3.11"},
	&event.Mapping{ID: 6, PID: 100, Start: 0x7fe000, Limit: 0x7ff000, File: "/usr/lib/x86_64-linux-gnu/libc.so.6"},
}

// cframe is a frame of the program (mapping 1); rt one of the runtime; py a
// Python frame (no mapping).
func cframe(fn string, line int64) event.Frame {
	return event.Frame{Addr: 0x1000 + uint64(line), Mapping: 1, Function: fn, File: "train.c", Line: line}
}

func rt(fn string) event.Frame { return event.Frame{Addr: 0x7f0100, Mapping: 2, Function: fn} }

func py(fn, file string, line int64) event.Frame {
	return event.Frame{Function: fn, File: file, Line: line}
}

// TestSites checks the site rule (doc.go, "Sites") on hand-made processes:
// each case is the process's allocation stacks, and the site each gets.
func TestSites(t *testing.T) {
	libcMain := event.Frame{Addr: 0x7fe100, Mapping: 6, Function: "__libc_start_main"}
	tests := []struct {
		name   string
		stacks [][]event.Frame
		want   []string
	}{{
		name: "a helper shared by three callers names each caller",
		stacks: [][]event.Frame{
			{rt("cudaMalloc"), cframe("dev_alloc", 10), cframe("load_weights", 20), cframe("main", 90), libcMain},
			{rt("cudaMalloc"), cframe("dev_alloc", 10), cframe("save_checkpoint", 30), cframe("main", 91), libcMain},
			{rt("cudaMalloc"), cframe("dev_alloc", 10), cframe("log_metrics", 40), cframe("step", 50), cframe("main", 92), libcMain},
		},
		want: []string{
			"load_weights (train.c:20) -> dev_alloc (train.c:10)",
			"save_checkpoint (train.c:30) -> dev_alloc (train.c:10)",
			"log_metrics (train.c:40) -> dev_alloc (train.c:10)",
		},
	}, {
		name: "a helper called from one place is the site",
		stacks: [][]event.Frame{
			{rt("cudaMalloc"), cframe("dev_alloc", 10), cframe("load_weights", 20), cframe("main", 90)},
			{rt("cudaMalloc"), cframe("init_cache", 60), cframe("main", 93)},
		},
		want: []string{"dev_alloc (train.c:10)", "init_cache (train.c:60)"},
	}, {
		name: "one function allocating at two lines from one path is one caller",
		stacks: [][]event.Frame{
			{rt("cudaMalloc"), cframe("load_weights", 20), cframe("main", 90)},
			{rt("cudaMalloc"), cframe("load_weights", 21), cframe("main", 90)},
		},
		want: []string{"load_weights (train.c:20)", "load_weights (train.c:21)"},
	}, {
		name: "a leaf shared by all through one path stays the site",
		stacks: [][]event.Frame{
			{rt("cudaMalloc"), cframe("dev_alloc", 10), cframe("load_weights", 20), cframe("main", 90)},
			{rt("cudaMalloc"), cframe("dev_alloc", 10), cframe("load_weights", 22), cframe("main", 90)},
		},
		want: []string{"dev_alloc (train.c:10)", "dev_alloc (train.c:10)"},
	}, {
		name: "recursion at any depth is one caller",
		stacks: [][]event.Frame{
			{rt("cudaMalloc"), cframe("dev_alloc", 10), cframe("build", 70), cframe("build", 71), cframe("build", 71), cframe("main", 90)},
			{rt("cudaMalloc"), cframe("dev_alloc", 10), cframe("build", 70), cframe("main", 90)},
			{rt("cudaMalloc"), cframe("dev_alloc", 10), cframe("log_metrics", 40), cframe("main", 92)},
		},
		want: []string{
			"build (train.c:70) -> dev_alloc (train.c:10)",
			"build (train.c:70) -> dev_alloc (train.c:10)",
			"log_metrics (train.c:40) -> dev_alloc (train.c:10)",
		},
	}, {
		name: "a chain of helpers names the first caller apart",
		stacks: [][]event.Frame{
			{rt("cudaMalloc"), cframe("dev_alloc", 10), cframe("alloc_tensor", 15), cframe("load_weights", 20), cframe("main", 90)},
			{rt("cudaMalloc"), cframe("dev_alloc", 10), cframe("alloc_tensor", 15), cframe("log_metrics", 40), cframe("main", 92)},
		},
		want: []string{
			"load_weights (train.c:20) -> alloc_tensor (train.c:15)",
			"log_metrics (train.c:40) -> alloc_tensor (train.c:15)",
		},
	}, {
		name: "a stack cut short at the helper keeps the helper",
		stacks: [][]event.Frame{
			{rt("cudaMalloc"), cframe("dev_alloc", 10)},
			{rt("cudaMalloc"), cframe("dev_alloc", 10), cframe("log_metrics", 40), cframe("main", 92)},
		},
		want: []string{"dev_alloc (train.c:10)", "log_metrics (train.c:40) -> dev_alloc (train.c:10)"},
	}, {
		name: "python through ctypes: glue and unnamed frames never make a site",
		stacks: [][]event.Frame{
			{rt("cudaMalloc"), {Addr: 0x7fa010, Mapping: 3}, {Addr: 0x7fa020, Mapping: 3, Function: "ffi_call"},
				{Addr: 0x7fc010, Mapping: 4, Function: "_ctypes_callproc"}, {Addr: 0x400100, Mapping: 5, Function: "_PyEval_EvalFrameDefault"},
				py("cache_embeddings", "model.py", 22), py("<module>", "model.py", 30),
				{Addr: 0x400200, Mapping: 5, Function: "Py_RunMain"}, libcMain},
			{rt("cudaMalloc"), {Addr: 0x7fa010, Mapping: 3}, {Addr: 0x7fa020, Mapping: 3, Function: "ffi_call"},
				{Addr: 0x400100, Mapping: 5, Function: "_PyEval_EvalFrameDefault"},
				py("_call_with_frames_removed", "<frozen importlib._bootstrap>", 241),
				py("load", "model.py", 12), py("<module>", "model.py", 29)},
			{rt("cudaMalloc"), {Addr: 0x7fa010, Mapping: 3}, {Addr: 0x5555aa00, Function: "<python code 0x5555aa00>"},
				py("<module>", "model.py", 31)},
		},
		want: []string{"cache_embeddings (model.py:22)", "load (model.py:12)", "<module> (model.py:31)"},
	}, {
		name: "python: the user's frame before an installed library's",
		stacks: [][]event.Frame{
			{rt("cudaMalloc"), py("linear", "/usr/lib/python3/dist-packages/torch/nn/functional.py", 2300),
				py("Linear.forward", "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", 116),
				py("Model.forward", "/srv/model.py", 40), py("<module>", "/srv/model.py", 90)},
			{rt("cudaMalloc"), py("copy", "/usr/lib/python3.11/copy.py", 70), py("<module>", "/srv/model.py", 91)},
			{rt("cudaMalloc"), py("linear", "/usr/lib/python3/dist-packages/torch/nn/functional.py", 2300),
				py("run", "/usr/lib/python3.11/threading.py", 975)},
		},
		want: []string{"Model.forward (/srv/model.py:40)", "<module> (/srv/model.py:91)",
			"linear (/usr/lib/python3/dist-packages/torch/nn/functional.py:2300)"},
	}, {
		name: "a runtime linked into the program is told by its API names",
		stacks: [][]event.Frame{
			{cframe("cudaMalloc", 199), cframe("static_alloc", 16), cframe("main", 26)},
			{cframe("cuMemAlloc_v2", 300), cframe("cudart::driverAlloc", 250), cframe("cudaMallocAsync_ptsz", 210),
				cframe("stream_alloc", 30), cframe("main", 27)},
		},
		want: []string{"static_alloc (train.c:16)", "stream_alloc (train.c:30)"},
	}, {
		name: "nothing named outside the runtime: the leaf-most frame outside it",
		stacks: [][]event.Frame{
			{rt("cudaMalloc"), {Addr: 0x7fa010, Mapping: 3}},
			{rt("cudaMalloc")},
		},
		want: []string{"0x7fa010 (libffi.so.8.1.2)", "cudaMalloc"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs := append([]event.Record{}, eventtest.NewStream().Recs[:2]...)
			recs = append(recs, siteMappings...)
			for i, frames := range tt.stacks {
				recs = append(recs, &event.Stack{ID: event.StackID(i + 1), PID: 100, Frames: frames})
			}
			for i := range tt.stacks {
				recs = append(recs, &event.Event{PID: 100, Time: uint64(i + 1), Addr: uint64(i+1) << 20, Size: 1 << 20,
					Stack: event.StackID(i + 1), Kind: event.KindAlloc, API: event.APICudaMalloc, Layer: event.LayerSegment})
			}
			r := mustAnalyze(t, Options{}, recs)
			var got []string
			for i := range tt.stacks {
				got = append(got, r.Site(event.StackID(i+1)))
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestSitesPerProcess: stacks of another process do not make a helper
// shared: each process is compared with itself only.
func TestSitesPerProcess(t *testing.T) {
	recs := append([]event.Record{}, eventtest.NewStream().Recs[:2]...)
	recs = append(recs, siteMappings...)
	recs = append(recs,
		&event.Stack{ID: 1, PID: 100, Frames: []event.Frame{rt("cudaMalloc"), cframe("dev_alloc", 10), cframe("load_weights", 20)}},
		&event.Stack{ID: 2, PID: 200, Frames: []event.Frame{rt("cudaMalloc"), cframe("dev_alloc", 10), cframe("log_metrics", 40)}},
		&event.Event{PID: 100, Time: 1, Addr: 1 << 20, Size: 1, Stack: 1, Kind: event.KindAlloc, API: event.APICudaMalloc, Layer: event.LayerSegment},
		&event.Event{PID: 200, Time: 2, Addr: 2 << 20, Size: 1, Stack: 2, Kind: event.KindAlloc, API: event.APICudaMalloc, Layer: event.LayerSegment},
	)
	r := mustAnalyze(t, Options{}, recs)
	assert.Equal(t, "dev_alloc (train.c:10)", r.Site(1))
	assert.Equal(t, "dev_alloc (train.c:10)", r.Site(2))
}

func TestGlueFiles(t *testing.T) {
	for file, want := range map[string]bool{
		"/usr/lib/x86_64-linux-gnu/libffi.so.8.1.2":                                        true,
		"/usr/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so":          true,
		"/venv/lib/python3.12/site-packages/_cffi_backend.cpython-312-x86_64-linux-gnu.so": true,
		"/usr/lib/x86_64-linux-gnu/libpython3.13.so.1.0":                                   true,
		"/usr/bin/python3.11":                            true,
		"/usr/bin/python3":                               true,
		"/opt/py/bin/python3.13-shared":                  true,
		"/usr/lib/x86_64-linux-gnu/libc.so.6":            true,
		"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2": true,
		"/srv/train":                                     false,
		"/srv/pythonic_tool":                             false,
		"/usr/lib/libcudart.so.12":                       false, // the runtime: IsRuntimeFile
		"/usr/lib/x86_64-linux-gnu/libcrypto.so.3":       false,
	} {
		assert.Equal(t, want, IsGlueFile(file), file)
	}
}
