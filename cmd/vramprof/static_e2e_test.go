//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// realStaticRuntime returns NVIDIA's libcudart_static.a and the directory
// holding cuda_runtime.h, fetched by `testdata/nvidia/fetch.sh static`
// (Debian's nvidia-cuda-dev; a no-op once fetched: `make test` fetches it
// beforehand).
func realStaticRuntime(t *testing.T) (archive, include string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(probetest.Root(), "testdata", "nvidia", "fetch.sh"), "static")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		skipOrFail(t, "testdata/nvidia/fetch.sh static: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 2, "fetch.sh static prints the archive and the include directory:\n%s", out)
	return lines[0], lines[1]
}

// buildRealStatic builds testdata/nvidia/static/realstatic.cpp against
// NVIDIA's static runtime with the host compiler (no nvcc), at -O0 so that
// cuda_runtime.h's template cudaMalloc<float> is a frame of its own.
func buildRealStatic(t *testing.T, dir string) string {
	t.Helper()
	archive, include := realStaticRuntime(t)
	cxx, err := exec.LookPath("g++")
	if err != nil {
		skipOrFail(t, "needs g++ to build the test program")
	}
	// NVIDIA's runtime must find no driver: none installed, and the fake
	// one (testdata/build/lib) not on any search path.
	if out, err := exec.Command("ldconfig", "-p").Output(); err == nil && strings.Contains(string(out), "libcuda.so.1") {
		skipOrFail(t, "a libcuda.so.1 is installed (ldconfig -p): the real runtime would find a driver")
	}
	prog := filepath.Join(dir, "realstatic")
	src := filepath.Join(probetest.Root(), "testdata", "nvidia", "static", "realstatic.cpp")
	out, err := exec.Command(cxx, "-O0", "-g", "-fno-omit-frame-pointer", "-I"+include, "-o", prog, src,
		archive, "-ldl", "-lpthread", "-lrt").CombinedOutput()
	require.NoError(t, err, "g++: %s", out)
	return prog
}

// noDriver is the environment under which NVIDIA's runtime finds no driver.
var noDriver = []string{"LD_LIBRARY_PATH=", "LD_PRELOAD=", "FAKECUDA_DRIVER="}

// staticCall is one line of realstatic's own log.
type staticCall struct {
	API, Caller string
	Bytes       uint64
	Ret         int
}

// parseStaticCalls reads realstatic's "call <api> <caller> <bytes> <ret>"
// lines.
func parseStaticCalls(t *testing.T, stdout string) []staticCall {
	t.Helper()
	var calls []staticCall
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 5 || f[0] != "call" {
			continue
		}
		n, err := strconv.ParseUint(f[3], 10, 64)
		require.NoError(t, err, "line %q", sc.Text())
		ret, err := strconv.Atoi(f[4])
		require.NoError(t, err, "line %q", sc.Text())
		calls = append(calls, staticCall{API: f[1], Caller: f[2], Bytes: n, Ret: ret})
	}
	return calls
}

// staticReport is what these tests read of report.json.
type staticReport struct {
	Totals struct {
		Allocations       uint64 `json:"allocations"`
		Frees             uint64 `json:"frees"`
		FailedAllocations uint64 `json:"failed_allocations"`
		FailedFrees       uint64 `json:"failed_frees"`
		FailedBytes       uint64 `json:"failed_bytes"`
		AllocatedBytes    uint64 `json:"allocated_bytes"`
		PeakBytes         uint64 `json:"peak_bytes"`
		LiveBytesAtEnd    uint64 `json:"live_bytes_at_end"`
		LostEvents        uint64 `json:"lost_events"`
	} `json:"totals"`
	Run struct {
		StrippedRuntimes []string `json:"stripped_runtimes"`
	} `json:"run"`
	Processes []struct {
		PID          uint32 `json:"pid"`
		FailedStacks []struct {
			Site   string   `json:"site"`
			Frames []string `json:"frames"`
			Bytes  uint64   `json:"bytes"`
			Count  uint64   `json:"count"`
		} `json:"failed_stacks"`
	} `json:"processes"`
	Libraries []struct {
		PID             uint32   `json:"pid"`
		Path            string   `json:"path"`
		Symbols         []string `json:"symbols"`
		StrippedRuntime bool     `json:"stripped_runtime"`
	} `json:"libraries"`
	Books *struct {
		Runtime struct {
			Allocations uint64 `json:"allocations"`
		} `json:"runtime"`
		Driver struct {
			Allocations uint64 `json:"allocations"`
		} `json:"driver"`
	} `json:"books"`
}

// TestRealStaticRuntime runs a program with NVIDIA's runtime linked in
// statically (libcudart_static.a, CUDA 11.8), calling cudaMalloc through
// cuda_runtime.h's C API and its C++ template, with no driver: every call
// fails with 35. vramprof, run or attached, must probe the runtime by its
// .symtab symbols, record each failed call, and name the program's own
// function as the site of each (before: "cudaMalloc", the runtime itself,
// for all four).
func TestRealStaticRuntime(t *testing.T) {
	probetest.RequirePrivilege(t)
	tmp := t.TempDir()
	prog := buildRealStatic(t, tmp)
	// Linked in: cudaMalloc is the executable's own (.symtab), not an
	// import.
	syms, err := exec.Command("nm", prog).Output()
	require.NoError(t, err)
	assert.Regexp(t, `(?m) [tT] cudaMalloc$`, string(syms), "the runtime is in the executable")

	t.Run("run", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "out")
		r := vramprof(t, execOpts{dir: tmp, env: noDriver}, "run", "-o", dir, "--", prog)
		require.Equal(t, 0, r.code, "exit code; stderr:\n%s", r.stderr)
		checkRealStatic(t, prog, dir, r.stdout)
		assert.Contains(t, r.stderr, "at alloc_plain (", "the summary names the caller")
	})
	t.Run("attach", func(t *testing.T) {
		t.Parallel()
		cmd, stdin, stdout := startHeld(t, prog)
		a := startAttach(t, cmd.Process.Pid)
		require.NoError(t, stdin.Close()) // the calls, then exit
		out, err := io.ReadAll(stdout)
		require.NoError(t, err)
		require.NoError(t, cmd.Wait())
		require.Equal(t, 0, a.wait(t, 20*time.Second), "exit code; stderr:\n%s", a.stderr.String())
		checkRealStatic(t, prog, a.dir, string(out))
	})
}

// startHeld starts realstatic (or a stripped copy) with "hold" and waits
// for its "ready" line: it makes its calls when stdin is closed.
func startHeld(t *testing.T, prog string) (*exec.Cmd, io.WriteCloser, io.Reader) {
	t.Helper()
	cmd := exec.Command(prog, "hold")
	cmd.Env = append(os.Environ(), noDriver...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	br := bufio.NewReader(stdout)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	return cmd, stdin, br
}

// checkRealStatic compares the outputs in dir with realstatic's own log.
func checkRealStatic(t *testing.T, prog, dir, stdout string) {
	t.Helper()
	calls := parseStaticCalls(t, stdout)
	require.Len(t, calls, 5, "the program's calls; stdout:\n%s", stdout)

	var failedMallocs, failedFrees, failedBytes uint64
	wantSites := map[string]uint64{} // caller -> bytes of its failed cudaMalloc calls
	for _, c := range calls {
		require.Equal(t, 35, c.Ret, "no driver: cudaErrorInsufficientDriver; %+v", c)
		switch c.API {
		case "cudaMalloc":
			failedMallocs++
			failedBytes += c.Bytes
			wantSites[c.Caller] += c.Bytes
		case "cudaFree":
			failedFrees++
		}
	}

	rep := mustReadJSON[staticReport](t, filepath.Join(dir, "report.json"))
	tt := rep.Totals
	assert.Equal(t, failedMallocs, tt.FailedAllocations, "failed_allocations = the program's failed cudaMalloc calls")
	assert.Equal(t, failedBytes, tt.FailedBytes, "failed_bytes")
	assert.Equal(t, failedFrees, tt.FailedFrees, "failed_frees")
	assert.Zero(t, tt.Allocations+tt.Frees+tt.AllocatedBytes+tt.PeakBytes+tt.LiveBytesAtEnd+tt.LostEvents,
		"nothing allocated, freed or lost: %+v", tt)

	// Sites: the caller, never the runtime: neither cudaMalloc nor the
	// template cudaMalloc<float> (which demangles to "cudaMalloc" too).
	require.Len(t, rep.Processes, 1)
	got := map[string]uint64{}
	var template bool
	for _, s := range rep.Processes[0].FailedStacks {
		got[frameFunction(s.Site)] += s.Bytes
		for _, f := range s.Frames {
			template = template || strings.Contains(f, "cuda_runtime.h")
		}
	}
	assert.Equal(t, wantSites, got, "failed cudaMalloc bytes by site")
	assert.True(t, template, "a stack passes through cuda_runtime.h's template wrapper: %+v", rep.Processes[0].FailedStacks)

	// The executable itself is the probed runtime, with symbols.
	var found bool
	for _, l := range rep.Libraries {
		if l.Path == prog {
			found = true
			assert.Contains(t, l.Symbols, "cudaMalloc")
			assert.False(t, l.StrippedRuntime)
		}
	}
	assert.True(t, found, "libraries list %s: %+v", prog, rep.Libraries)
	assert.Empty(t, rep.Run.StrippedRuntimes)
}

// strippedLine is the one line every output says about a stripped runtime.
func strippedLine(pid int, path, driver string) string {
	return fmt.Sprintf("pid %d: %s has a statically linked, stripped CUDA runtime: its cudaMalloc calls cannot be probed; %s",
		pid, path, driver)
}

const (
	noDriverLoaded = "the driver probes (libcuda.so.1) still see them when a driver is present; none was loaded"
	driverTraced   = "the driver's calls under them (libcuda.so.1) are traced instead"
)

// strip copies prog to dir/name and strips it with args.
func strip(t *testing.T, prog, dir, name string, args ...string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	b, err := exec.Command("strip", append(args, "-o", out, prog)...).CombinedOutput()
	require.NoError(t, err, "strip %v: %s", args, b)
	syms, _ := exec.Command("nm", out).CombinedOutput()
	require.NotContains(t, string(syms), "cudaMalloc", "%s keeps no runtime symbol", out)
	return out
}

var stripModes = []struct {
	name string
	args []string
}{
	{"strip-all", []string{"-s"}},
	{"strip-unneeded", []string{"--strip-unneeded"}},
}

// TestStrippedRealStaticRuntime: the same program stripped (a release
// build). Its runtime cannot be probed and there is no driver: `run` says
// so in one line in the summary and the reports and ends with the program;
// `attach` refuses in one line that names the file (before: nothing said
// in run; attach said "has not loaded libcudart or libcuda; pass --wait",
// which would have waited forever).
func TestStrippedRealStaticRuntime(t *testing.T) {
	probetest.RequirePrivilege(t)
	tmp := t.TempDir()
	prog := buildRealStatic(t, tmp)
	for _, mode := range stripModes {
		t.Run(mode.name, func(t *testing.T) {
			bin := strip(t, prog, tmp, "realstatic-"+mode.name, mode.args...)

			t.Run("run", func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "out")
				start := time.Now()
				r := vramprof(t, execOpts{dir: tmp, env: noDriver}, "run", "-o", dir, "--", bin)
				require.Equal(t, 0, r.code, "exit code; stderr:\n%s", r.stderr)
				assert.Less(t, time.Since(start), 30*time.Second, "run ends with the program")
				require.Len(t, parseStaticCalls(t, r.stdout), 5, "the program ran; stdout:\n%s", r.stdout)

				rep := mustReadJSON[staticReport](t, filepath.Join(dir, "report.json"))
				require.Len(t, rep.Processes, 1)
				want := strippedLine(int(rep.Processes[0].PID), bin, noDriverLoaded)
				assert.Equal(t, []string{want}, rep.Run.StrippedRuntimes, "report.json")
				assert.Contains(t, r.stderr, "note:               "+want+"\n", "the summary")
				md, err := os.ReadFile(filepath.Join(dir, "report.md"))
				require.NoError(t, err)
				assert.Contains(t, string(md), "**Note:** "+strings.ReplaceAll(want, "_", `\_`)+".", "report.md")
				var marked bool
				for _, l := range rep.Libraries {
					if l.Path == bin {
						marked = l.StrippedRuntime
						assert.Empty(t, l.Symbols, "nothing probed in %s", bin)
					}
				}
				assert.True(t, marked, "libraries mark %s: %+v", bin, rep.Libraries)
				assert.Zero(t, rep.Totals.FailedAllocations, "no call was seen")
			})

			t.Run("attach", func(t *testing.T) {
				cmd, stdin, stdout := startHeld(t, bin)
				start := time.Now()
				r := vramprof(t, execOpts{dir: t.TempDir()}, "attach", "-p", strconv.Itoa(cmd.Process.Pid), "-o", filepath.Join(t.TempDir(), "out"))
				assert.Less(t, time.Since(start), 30*time.Second, "attach refuses at once")
				assert.NotZero(t, r.code, "attach refuses")
				lines := r.stderrLines()
				require.Len(t, lines, 1, "one line; stderr:\n%s", r.stderr)
				assert.Equal(t, fmt.Sprintf("vramprof: pid %d: %s has a statically linked, stripped CUDA runtime: its cudaMalloc calls cannot be probed, "+
					"and no driver (libcuda.so.1) is loaded yet to probe instead "+
					"(pass --wait to trace the driver's calls from the process's first CUDA call on (if it has a driver to load), "+
					"or rebuild it unstripped or with nvcc --cudart shared to trace the runtime's)", cmd.Process.Pid, bin), lines[0])
				assert.NotContains(t, r.stderr, "has not loaded libcudart")
				_ = stdin.Close()
				_, _ = io.Copy(io.Discard, stdout)
				require.NoError(t, cmd.Wait(), "the program ran to its end")
			})
		})
	}
}

// TestStrippedFakeStaticRuntime: testdata's static_runtime (the fake
// runtime linked in) stripped, with the fake driver present: the runtime's
// calls are invisible, the driver's under them are traced exactly (totals
// = the scenario's truth), and every output says in one line that the
// runtime is stripped and the driver traced instead.
func TestStrippedFakeStaticRuntime(t *testing.T) {
	probetest.RequirePrivilege(t)
	tmp := t.TempDir()
	driver := filepath.Join(probetest.Root(), "testdata", "build", "lib", "libcuda.so.1")
	for _, mode := range stripModes {
		t.Run(mode.name, func(t *testing.T) {
			bin := strip(t, probetest.Bin(t, "static_runtime"), tmp, "static_runtime-"+mode.name, mode.args...)
			truthPath := filepath.Join(t.TempDir(), "truth.json")
			dir := filepath.Join(t.TempDir(), "out")
			// Copied out of build/bin, its RUNPATH ($ORIGIN/../lib) finds no
			// driver: FAKECUDA_DRIVER names it.
			r := vramprof(t, execOpts{dir: tmp, env: []string{"VRAMPROF_TRUTH=" + truthPath, "FAKECUDA_DRIVER=" + driver}},
				"run", "-o", dir, "--", bin)
			require.Equal(t, 0, r.code, "exit code; stderr:\n%s", r.stderr)
			truth := probetest.MustReadTruth(t, truthPath)

			rep := mustReadJSON[staticReport](t, filepath.Join(dir, "report.json"))
			tt, want := rep.Totals, truth.Totals
			assert.Equal(t, want.Allocations, tt.Allocations, "allocations")
			assert.Equal(t, want.Frees, tt.Frees, "frees")
			assert.Equal(t, want.FailedAllocations, tt.FailedAllocations, "failed_allocations")
			assert.Equal(t, want.AllocatedBytes, tt.AllocatedBytes, "allocated_bytes")
			assert.Equal(t, want.PeakBytes, tt.PeakBytes, "peak_bytes")
			assert.Equal(t, want.LiveBytesAtEnd, tt.LiveBytesAtEnd, "live_bytes_at_end")
			assert.Zero(t, tt.LostEvents, "lost_events")
			if assert.NotNil(t, rep.Books, "books") {
				assert.Zero(t, rep.Books.Runtime.Allocations, "no runtime call can be seen")
				assert.Equal(t, want.Allocations, rep.Books.Driver.Allocations, "the driver's calls, one per cudaMalloc")
			}

			require.Len(t, rep.Processes, 1)
			line := strippedLine(int(rep.Processes[0].PID), bin, driverTraced)
			assert.Equal(t, []string{line}, rep.Run.StrippedRuntimes, "report.json")
			assert.Contains(t, r.stderr, "note:               "+line+"\n", "the summary")
		})
	}
}

// TestLinkedInSites: where the runtime is linked into the program or a
// library, every site (each stack at the peak, the first failure) is the
// program's own function, as the truth names it, never the runtime's.
// Before: "cudaMalloc (cuda/cudart.c:199)" for static_runtime and
// static_lib's engine; "0x55d0... (driver_only)" for driver_only, whose
// runtime is linked in with only its own symbols stripped (the driver's
// calls come from nameless runtime frames under the program's functions).
func TestLinkedInSites(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tc := range []struct {
		name         string
		firstFailure string // the first failure's site function; "" for none
		note         string // the stripped-runtime line's tail; "" for none
	}{
		{name: "static_runtime"},
		{name: "static_lib"},
		{name: "driver_only", firstFailure: "hidden_failures", note: driverTraced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkLinkedInSites(t, tc.name, tc.firstFailure, tc.note)
		})
	}
}

func checkLinkedInSites(t *testing.T, name, firstFailure, note string) {
	dir, truth, r := runScenario(t, name)
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	rep := mustReadJSON[struct {
		Processes []struct {
			PeakStacks []struct {
				Site  string `json:"site"`
				Bytes uint64 `json:"bytes"`
			} `json:"peak_stacks"`
			FirstFailure *struct {
				Site string `json:"site"`
			} `json:"first_failure"`
		} `json:"processes"`
	}](t, filepath.Join(dir, "report.json"))
	require.Len(t, rep.Processes, 1)
	p := rep.Processes[0]
	got := map[string]uint64{}
	for _, s := range p.PeakStacks {
		got[frameFunction(s.Site)] += s.Bytes
	}
	want := map[string]uint64{}
	for fn, f := range truth.ByFunction {
		if f.LiveBytesAtPeak > 0 {
			want[fn] = f.LiveBytesAtPeak
		}
	}
	assert.Equal(t, want, got, "bytes at the peak by site")
	if firstFailure != "" && assert.NotNil(t, p.FirstFailure) {
		assert.Equal(t, firstFailure, frameFunction(p.FirstFailure.Site), "first failure's site")
	}
	if note != "" {
		assert.Contains(t, r.stderr, name+" has a statically linked, stripped CUDA runtime: its cudaMalloc calls cannot be probed; "+note+"\n")
	} else {
		assert.NotContains(t, r.stderr, "stripped CUDA runtime")
	}
}
