package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/event/eventtest"
)

func TestIsRuntimeFunction(t *testing.T) {
	tests := []struct {
		fn   string
		want bool
	}{
		{"cudaMalloc", true},
		{"cudaMallocAsync_ptsz", true},
		{"cuMemAlloc_v2", true},
		{"cudaMalloc<float>(float**, unsigned long)", true},
		{"cudaError cudaMalloc<float>(float**, unsigned long)", true},
		{"cudaMallocHost(void**, unsigned long, unsigned int)", true},
		{"__cudart1234", true},
		{"__cudaRegisterFatBinary", true},
		{"cudart::cudaApiMalloc(void**, unsigned long)", true},
		{"cudart::globalState::initializeDriver()", true},
		{"static_alloc", false},
		{"main", false},
		{"cuda", false},
		{"cudaless_helper", false},
		{"cublasSgemm_v2", false},
		{"curand", false},
		{"cu", false},
		{"train_step(float*, unsigned long)", false},
		{"ns::cudaMalloc(void**)", false},
		{"", false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, IsRuntimeFunction(tt.fn), "%q", tt.fn)
	}
}

// TestSiteStaticRuntime: a runtime linked into the executable (nvcc's
// default) puts cudaMalloc, its template wrapper and its internals in the
// executable's own mapping; the site is still the user's caller (before:
// "cudaMalloc (cudart.c:199)").
func TestSiteStaticRuntime(t *testing.T) {
	s := eventtest.NewStream()
	s.Recs = append(s.Recs, &event.Stack{ID: 1, PID: 100, Frames: []event.Frame{
		{Addr: 0x1100, Mapping: 1, Function: "cudaMalloc", File: "cudart.c", Line: 199},
		{Addr: 0x1200, Mapping: 1, Function: "cudaError cudaMalloc<float>(float**, unsigned long)", File: "/usr/include/cuda_runtime.h", Line: 550},
		{Addr: 0x1300, Mapping: 1, Function: "alloc_template", File: "static.cpp", Line: 20},
		{Addr: 0x2000, Mapping: 1, Function: "main", File: "static.cpp", Line: 40},
	}}, &event.Stack{ID: 2, PID: 100, Frames: []event.Frame{
		// The driver under a static runtime: libcuda, then the runtime's
		// obfuscated internals in the executable.
		{Addr: 0x7f0100, Mapping: 2, Function: "cuMemAlloc_v2"},
		{Addr: 0x1400, Mapping: 1, Function: "__cudart1017"},
		{Addr: 0x1500, Mapping: 1, Function: "cudart::cudaApiMalloc(void**, unsigned long)"},
		{Addr: 0x1100, Mapping: 1, Function: "cudaMalloc"},
		{Addr: 0x1600, Mapping: 1, Function: "alloc_plain", File: "static.cpp", Line: 12},
	}})
	s.Alloc(10, 0x7f2000000000, 1<<20, 1).Alloc(20, 0x7f2000100000, 1<<20, 2)
	r := mustAnalyze(t, Options{}, s.Recs)
	assert.Equal(t, "alloc_template (static.cpp:20)", r.Site(1))
	assert.Equal(t, "alloc_plain (static.cpp:12)", r.Site(2))
	assert.Equal(t, []bool{true, true, false, false}, r.Stacks[1].Runtime)
}

// TestSiteStrippedRuntime: under a runtime linked in with its symbols
// stripped, the driver's call is seen from nameless frames of the
// executable: the site is the first named frame after them in that file
// (before: "0x1400 (app)"), and the nameless frames count as the runtime's;
// in a file stripped whole the site stays the first nameless frame. In a
// file not marked stripped the site rule alone (nameless frames never make
// a site) names the same frame, but the nameless frames are not taken for
// the runtime's.
func TestSiteStrippedRuntime(t *testing.T) {
	stack := func(id event.StackID, pid uint32, named bool) *event.Stack {
		user := event.Frame{Addr: 0x1600, Mapping: 1}
		if named {
			user.Function, user.File, user.Line = "hidden_alloc", "app.c", 12
		}
		return &event.Stack{ID: id, PID: pid, Frames: []event.Frame{
			{Addr: 0x7f0100, Mapping: 2, Function: "cuMemAlloc_v2"},
			{Addr: 0x1400, Mapping: 1},
			{Addr: 0x1500, Mapping: 1},
			user,
			{Addr: 0x9100, Mapping: 3, Function: "__libc_start_call_main"},
		}}
	}
	for _, tc := range []struct {
		name     string
		stripped bool
		named    bool
		want     string
		runtime  []bool
	}{
		{"runtime stripped, user named", true, true, "hidden_alloc (app.c:12)", []bool{true, true, true, false, false}},
		{"all stripped", true, false, "0x1400 (app)", []bool{true, false, false, false, false}},
		{"not marked", false, true, "hidden_alloc (app.c:12)", []bool{true, false, false, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs := []event.Record{
				&event.Header{Version: 1, Tool: "vramprof test", Mode: "run", PID: 100, Host: "h"},
				&event.Process{PID: 100, Command: []string{"app"}, Exe: "/opt/app"},
				&event.Library{PID: 100, Path: "/opt/app", StrippedRuntime: tc.stripped},
				&event.Library{PID: 100, Path: "/usr/lib/libcuda.so.1", Symbols: []string{"cuMemAlloc_v2"}},
				&event.Mapping{ID: 1, PID: 100, Start: 0x1000, Limit: 0x9000, File: "/opt/app"},
				&event.Mapping{ID: 2, PID: 100, Start: 0x7f0000, Limit: 0x7f9000, File: "/usr/lib/libcuda.so.1"},
				&event.Mapping{ID: 3, PID: 100, Start: 0x9000, Limit: 0xa000, File: "/usr/lib/libc.so.6"},
				stack(1, 100, tc.named),
				&event.Event{Time: 10, PID: 100, Addr: 0x7f2000000000, Size: 1 << 20, Stack: 1, Kind: event.KindAlloc,
					API: event.APICuMemAlloc, Layer: event.LayerSegment},
			}
			r := mustAnalyze(t, Options{}, recs)
			assert.Equal(t, tc.want, r.Site(1))
			assert.Equal(t, tc.runtime, r.Stacks[1].Runtime)
		})
	}
}
