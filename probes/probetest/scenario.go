// Package probetest runs the ground-truth programs of testdata/ for tests:
// it builds them once, finds them, and reads the truth each one writes about
// itself. The truth is the programs' own record of what they did, never
// anything vramprof computed.
package probetest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Totals are a scenario's own counts (testdata/README.md, "Truth JSON").
type Totals struct {
	Allocations         uint64 `json:"allocations"`
	Frees               uint64 `json:"frees"`
	FailedAllocations   uint64 `json:"failed_allocations"`
	UnknownFrees        uint64 `json:"unknown_frees"`
	NullFrees           uint64 `json:"null_frees"`
	ZeroSizeAllocations uint64 `json:"zero_size_allocations"`
	AllocatedBytes      uint64 `json:"allocated_bytes"`
	PeakBytes           uint64 `json:"peak_bytes"`
	LiveBytesAtEnd      uint64 `json:"live_bytes_at_end"`
}

// Function is what one scenario function allocated.
type Function struct {
	Allocations       uint64 `json:"allocations"`
	AllocatedBytes    uint64 `json:"allocated_bytes"`
	LiveBytesAtEnd    uint64 `json:"live_bytes_at_end"`
	LiveBytesAtPeak   uint64 `json:"live_bytes_at_peak"`
	FailedAllocations uint64 `json:"failed_allocations"`
}

// Call is one CUDA call as the scenario recorded it.
type Call struct {
	API     string `json:"api"`
	Func    string `json:"func"`
	TID     uint32 `json:"tid"`
	Size    uint64 `json:"size"`
	Ptr     uint64 `json:"ptr"`
	Ret     int32  `json:"ret"`
	TimeNs  uint64 `json:"t_ns"`
	Outcome string `json:"outcome"`
	// Device is the call's device: for an allocation the one it is on,
	// for a set-device call the one it asked for.
	Device int32 `json:"device"`
}

// Truth is what a scenario wrote about itself.
type Truth struct {
	Scenario      string              `json:"scenario"`
	PID           uint32              `json:"pid"`
	CapacityBytes uint64              `json:"capacity_bytes"`
	Totals        Totals              `json:"totals"`
	ByFunction    map[string]Function `json:"by_function"`
	Preexisting   *struct {
		Allocations uint64 `json:"allocations"`
		Bytes       uint64 `json:"bytes"`
	} `json:"preexisting"`
	Calls []Call `json:"calls"`
	// Blocks is the block layer (a caching allocator's blocks), for the
	// scenarios built on testdata's libc10_cuda.so.
	Blocks *Blocks `json:"blocks"`
	// Label is a corpus program's verdict on itself (testdata/corpus):
	// nil when the program gave none.
	Label *Label `json:"label"`
}

// Label is what a corpus program says is wrong with it, independently of
// vramprof: healthy, or its defects.
type Label struct {
	Healthy bool     `json:"healthy"`
	Defects []Defect `json:"defects"`
	// Steps is the program's loop, when it marked its steps.
	Steps *Steps `json:"steps"`
}

// Steps is a program's loop as it counted it: its step function, how many
// steps began, and the median time between their starts.
type Steps struct {
	Func     string `json:"func"`
	Count    uint64 `json:"count"`
	PeriodNs uint64 `json:"period_ns"`
}

// Defect is one labelled problem: the finding kind it deserves, the C
// function that allocates the memory at stake (for churn, the one calling
// empty_cache) and the bytes at stake, from the program's own arithmetic.
type Defect struct {
	Kind  string `json:"kind"`
	Site  string `json:"site"`
	Bytes uint64 `json:"bytes"`
}

// Blocks are a caching allocator's own counts of the blocks it handed out.
type Blocks struct {
	Allocations        uint64 `json:"allocations"`
	Frees              uint64 `json:"frees"`
	FailedAllocations  uint64 `json:"failed_allocations"`
	AllocatedBytes     uint64 `json:"allocated_bytes"`
	PeakAllocatedBytes uint64 `json:"peak_allocated_bytes"`
	LiveBytesAtEnd     uint64 `json:"live_bytes_at_end"`
}

// Root is the repository root.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

var (
	buildOnce sync.Once
	buildErr  error
)

// Build builds testdata (make -C testdata) once per test binary.
func Build(tb testing.TB) {
	tb.Helper()
	buildOnce.Do(func() {
		out, err := exec.Command("make", "-s", "-C", filepath.Join(Root(), "testdata")).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("make -C testdata: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
}

// Bin returns the path of scenario program name, building testdata first.
func Bin(tb testing.TB, name string) string {
	tb.Helper()
	Build(tb)
	return filepath.Join(Root(), "testdata", "build", "bin", name)
}

// Lib returns the path of a built library, e.g. "libcudart.so.12".
func Lib(tb testing.TB, name string) string {
	tb.Helper()
	Build(tb)
	return filepath.Join(Root(), "testdata", "build", "lib", name)
}

// ReadTruth reads a truth file.
func ReadTruth(path string) (*Truth, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read truth: %w", err)
	}
	var t Truth
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("parse truth %s: %w", path, err)
	}
	return &t, nil
}

// MustReadTruth is ReadTruth for tests.
func MustReadTruth(tb testing.TB, path string) *Truth {
	tb.Helper()
	t, err := ReadTruth(path)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// RequirePrivilege skips a test that needs root (to load BPF and place
// uprobes) when it does not have it, saying why; under CI=true it fails
// instead, so a CI run can never pass by skipping its BPF tests.
func RequirePrivilege(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() == 0 {
		return
	}
	msg := "needs root to load BPF and attach uprobes (run: sudo make test)"
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg + "; CI=true: BPF tests must run")
	}
	tb.Skip(msg)
}
