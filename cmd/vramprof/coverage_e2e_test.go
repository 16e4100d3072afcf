//go:build linux

package main

// End-to-end tests of the coverage scenarios (testdata/README.md): every
// allocation API, VMM, pinned host memory, several devices, a runtime linked
// in and stripped, forked workers and exec'd ranks, a runtime unloaded and
// loaded again. Every expected figure is a scenario's own truth, or
// arithmetic on it (sums over processes, a replay of its calls[]).

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	gprofile "github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// covTruth is the part of a truth file that probetest.Truth leaves out:
// devices, host, vmm, books, the process tree, and each call's device.
type covTruth struct {
	Scenario  string                  `json:"scenario"`
	PID       uint32                  `json:"pid"`
	ParentPID *uint32                 `json:"parent_pid"`
	Children  []uint32                `json:"children"`
	Totals    probetest.Totals        `json:"totals"`
	Devices   map[string]covTruthDev  `json:"devices"`
	Host      covTruthHost            `json:"host"`
	VMM       covTruthVMM             `json:"vmm"`
	Books     map[string]covTruthBook `json:"books"`
	Calls     []covTruthCall          `json:"calls"`
}

type covTruthDev struct {
	Allocations    uint64 `json:"allocations"`
	AllocatedBytes uint64 `json:"allocated_bytes"`
	PeakBytes      uint64 `json:"peak_bytes"`
	LiveBytesAtEnd uint64 `json:"live_bytes_at_end"`
}

type covTruthHost struct {
	Allocations    uint64 `json:"allocations"`
	Frees          uint64 `json:"frees"`
	AllocatedBytes uint64 `json:"allocated_bytes"`
	PeakBytes      uint64 `json:"peak_bytes"`
	LiveBytesAtEnd uint64 `json:"live_bytes_at_end"`
}

type covTruthVMM struct {
	Reserves           uint64 `json:"reserves"`
	Unreserves         uint64 `json:"unreserves"`
	ReservedBytesPeak  uint64 `json:"reserved_bytes_peak"`
	ReservedBytesAtEnd uint64 `json:"reserved_bytes_at_end"`
	Creates            uint64 `json:"creates"`
	Releases           uint64 `json:"releases"`
	PhysicalBytesPeak  uint64 `json:"physical_bytes_peak"`
	PhysicalBytesAtEnd uint64 `json:"physical_bytes_at_end"`
	Maps               uint64 `json:"maps"`
	Unmaps             uint64 `json:"unmaps"`
	MappedBytesAtEnd   uint64 `json:"mapped_bytes_at_end"`
}

type covTruthBook struct {
	Allocations    uint64 `json:"allocations"`
	Frees          uint64 `json:"frees"`
	AllocatedBytes uint64 `json:"allocated_bytes"`
}

type covTruthCall struct {
	API     string `json:"api"`
	Size    uint64 `json:"size"`
	Outcome string `json:"outcome"`
	Device  int    `json:"device"`
}

func mustReadCovTruth(tb testing.TB, path string) *covTruth {
	tb.Helper()
	return mustReadJSON[covTruth](tb, path)
}

// devicePeakSplit replays a truth's calls[] in their recorded order and
// returns, per device, what was live there when the process's device memory
// first reached its peak, with that peak and each device's own peak (which
// the truth also states: a check of the replay itself).
func (t *covTruth) devicePeakSplit() (atPeak map[int]uint64, peak uint64, devPeak map[int]uint64) {
	live, devPeak, atPeak := map[int]uint64{}, map[int]uint64{}, map[int]uint64{}
	var total uint64
	for _, c := range t.Calls {
		if c.Outcome != "ok" || c.Device < 0 {
			continue // failed calls; host memory and address reservations
		}
		switch {
		case strings.Contains(c.API, "Map") || strings.Contains(c.API, "SetDevice") || strings.Contains(c.API, "CtxSetCurrent"):
			continue
		case strings.Contains(c.API, "Free") || strings.Contains(c.API, "Release"):
			live[c.Device] -= c.Size
			total -= c.Size
		case strings.Contains(c.API, "Malloc") || strings.Contains(c.API, "Alloc") || c.API == "cuMemCreate":
			live[c.Device] += c.Size
			total += c.Size
			devPeak[c.Device] = max(devPeak[c.Device], live[c.Device])
			if total > peak {
				peak = total
				clear(atPeak)
				for d, b := range live {
					if b > 0 {
						atPeak[d] = b
					}
				}
			}
		}
	}
	return atPeak, peak, devPeak
}

// covReport is report.json's coverage fields (report/json.go), declared here
// so that a renamed field fails a test.
type covReport struct {
	Totals    covTotals    `json:"totals"`
	Books     covBooks     `json:"books"`
	Host      *covHost     `json:"host"`
	VMM       *covVMM      `json:"vmm"`
	Devices   []covDevice  `json:"devices"`
	Processes []covProcess `json:"processes"`
	Libraries []struct {
		PID     uint32   `json:"pid"`
		Path    string   `json:"path"`
		Symbols []string `json:"symbols"`
	} `json:"libraries"`
	Findings []struct {
		Kind        string   `json:"kind"`
		Severity    string   `json:"severity"`
		Bytes       uint64   `json:"bytes"`
		PID         uint32   `json:"pid"`
		Summary     string   `json:"summary"`
		Remediation []string `json:"remediation"`
		Stacks      []struct {
			Frames []string `json:"frames"`
		} `json:"stacks"`
	} `json:"findings"`
	Run struct {
		NestedEvents uint64 `json:"nested_events"`
	} `json:"run"`
}

type covTotals struct {
	Allocations       uint64 `json:"allocations"`
	Frees             uint64 `json:"frees"`
	FailedAllocations uint64 `json:"failed_allocations"`
	UnknownFrees      uint64 `json:"unknown_frees"`
	LostEvents        uint64 `json:"lost_events"`
	AllocatedBytes    uint64 `json:"allocated_bytes"`
	PeakBytes         uint64 `json:"peak_bytes"`
	LiveBytesAtEnd    uint64 `json:"live_bytes_at_end"`
	FailedFrees       uint64 `json:"failed_frees"`
}

type covBook struct {
	Allocations    uint64 `json:"allocations"`
	Frees          uint64 `json:"frees"`
	AllocatedBytes uint64 `json:"allocated_bytes"`
}

type covBooks struct {
	Runtime covBook `json:"runtime"`
	Driver  covBook `json:"driver"`
}

type covHost struct {
	Allocations    uint64 `json:"allocations"`
	Frees          uint64 `json:"frees"`
	AllocatedBytes uint64 `json:"allocated_bytes"`
	PeakBytes      uint64 `json:"peak_bytes"`
	LiveBytesAtEnd uint64 `json:"live_bytes_at_end"`
}

type covVMM struct {
	Reserves           uint64 `json:"reserves"`
	Unreserves         uint64 `json:"unreserves"`
	Creates            uint64 `json:"creates"`
	Releases           uint64 `json:"releases"`
	Maps               uint64 `json:"maps"`
	Unmaps             uint64 `json:"unmaps"`
	FailedCalls        uint64 `json:"failed_calls"`
	ReservedPeakBytes  uint64 `json:"reserved_peak_bytes"`
	ReservedBytesAtEnd uint64 `json:"reserved_bytes_at_end"`
	PhysicalPeakBytes  uint64 `json:"physical_peak_bytes"`
	PhysicalBytesAtEnd uint64 `json:"physical_bytes_at_end"`
	MappedBytesAtEnd   uint64 `json:"mapped_bytes_at_end"`
}

type covDevice struct {
	Index          int32  `json:"index"`
	PeakBytes      uint64 `json:"peak_bytes"`
	LiveBytesAtEnd uint64 `json:"live_bytes_at_end"`
}

type covProcess struct {
	PID               uint32      `json:"pid"`
	PPID              uint32      `json:"ppid"`
	Command           string      `json:"command"`
	Exe               string      `json:"exe"`
	Allocations       uint64      `json:"allocations"`
	Frees             uint64      `json:"frees"`
	FailedAllocations uint64      `json:"failed_allocations"`
	UnknownFrees      uint64      `json:"unknown_frees"`
	AllocatedBytes    uint64      `json:"allocated_bytes"`
	PeakBytes         uint64      `json:"peak_bytes"`
	LiveBytesAtEnd    uint64      `json:"live_bytes_at_end"`
	Devices           []covDevice `json:"devices"`
	Books             covBooks    `json:"books"`
	Host              covHost     `json:"host"`
	VMM               *covVMM     `json:"vmm"`
}

func mustReadCovReport(tb testing.TB, path string) *covReport {
	tb.Helper()
	return mustReadJSON[covReport](tb, path)
}

// wantBooks is what a truth's books say a profiler probing both libraries
// sees. driver_only is the exception: its runtime is linked in and stripped
// (testdata/README.md: "only cuMemAlloc_v2/cuMemFree_v2 are visible"), so no
// profiler can see its runtime level, though the truth lists it.
func wantBooks(t *covTruth) covBooks {
	b := covBooks{Runtime: covBook(t.Books["runtime"]), Driver: covBook(t.Books["driver"])}
	if t.Scenario == "driver_only" {
		b.Runtime = covBook{}
	}
	return b
}

func wantVMM(tv covTruthVMM) *covVMM {
	if tv == (covTruthVMM{}) {
		return nil // report.json leaves vmm out when no VMM call was traced
	}
	// The truth has no mapped peak and no per-device split; its scenarios
	// make no failing VMM call (failed_calls 0).
	return &covVMM{Reserves: tv.Reserves, Unreserves: tv.Unreserves, Creates: tv.Creates, Releases: tv.Releases,
		Maps: tv.Maps, Unmaps: tv.Unmaps, ReservedPeakBytes: tv.ReservedBytesPeak,
		ReservedBytesAtEnd: tv.ReservedBytesAtEnd, PhysicalPeakBytes: tv.PhysicalBytesPeak,
		PhysicalBytesAtEnd: tv.PhysicalBytesAtEnd, MappedBytesAtEnd: tv.MappedBytesAtEnd}
}

func wantDevices(t *covTruth) []covDevice {
	var out []covDevice
	for k, d := range t.Devices {
		i, err := strconv.Atoi(k)
		if err != nil {
			i = -1
		}
		out = append(out, covDevice{Index: int32(i), PeakBytes: d.PeakBytes, LiveBytesAtEnd: d.LiveBytesAtEnd})
	}
	sortDevices(out)
	return out
}

func sortDevices(ds []covDevice) []covDevice {
	sort.Slice(ds, func(i, j int) bool { return ds[i].Index < ds[j].Index })
	return ds
}

// checkProcessFigures compares one process's figures in report.json with its
// own truth file.
func checkProcessFigures(t *testing.T, p covProcess, tr *covTruth) {
	t.Helper()
	w := tr.Totals
	name := fmt.Sprintf("%s pid %d", tr.Scenario, tr.PID)
	assert.Equal(t, w.Allocations, p.Allocations, "%s allocations", name)
	assert.Equal(t, w.Frees, p.Frees, "%s frees", name)
	assert.Equal(t, w.FailedAllocations, p.FailedAllocations, "%s failed_allocations", name)
	assert.Equal(t, w.UnknownFrees, p.UnknownFrees, "%s unknown_frees", name)
	assert.Equal(t, w.AllocatedBytes, p.AllocatedBytes, "%s allocated_bytes", name)
	assert.Equal(t, w.PeakBytes, p.PeakBytes, "%s peak_bytes", name)
	assert.Equal(t, w.LiveBytesAtEnd, p.LiveBytesAtEnd, "%s live_bytes_at_end", name)
	assert.Equal(t, wantDevices(tr), sortDevices(append([]covDevice(nil), p.Devices...)), "%s devices", name)
	assert.Equal(t, wantBooks(tr), p.Books, "%s books", name)
	assert.Equal(t, covHost(tr.Host), p.Host, "%s host", name)
	assert.Equal(t, wantVMM(tr.VMM), p.VMM, "%s vmm", name)
	if tr.ParentPID != nil {
		assert.Equal(t, *tr.ParentPID, p.PPID, "%s ppid", name)
	}
}

// checkProcessImage checks that a process is named after the image it ran
// last: a forked worker after its parent's, a rank exec'd by the launcher
// "rank", not "launcher", however short-lived.
func checkProcessImage(t *testing.T, p covProcess, tr *covTruth) {
	t.Helper()
	name := fmt.Sprintf("%s pid %d", tr.Scenario, tr.PID)
	assert.Equal(t, tr.Scenario, filepath.Base(p.Exe), "%s exe (%q)", name, p.Exe)
	assert.Equal(t, tr.Scenario, filepath.Base(strings.Fields(p.Command + " ?")[0]), "%s command (%q)", name, p.Command)
}

// profileSums are a profile's values summed by pid, by (pid, device label)
// and by space class ("host" or device memory).
type profileSums struct {
	dev     map[string][]int64 // pid -> values, device and physical samples
	devByID map[string][]int64 // pid/device -> values
	host    map[string][]int64 // pid -> values, host samples
}

func sumProfile(t *testing.T, path string) profileSums {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	p, err := gprofile.Parse(f)
	require.NoError(t, err)
	require.NoError(t, p.CheckValid())
	s := profileSums{dev: map[string][]int64{}, devByID: map[string][]int64{}, host: map[string][]int64{}}
	add := func(m map[string][]int64, k string, v []int64) {
		if m[k] == nil {
			m[k] = make([]int64, len(v))
		}
		for i := range v {
			m[k][i] += v[i]
		}
	}
	for _, smp := range p.Sample {
		one := func(k string) string {
			require.Len(t, smp.Label[k], 1, "sample label %q: %v", k, smp.Label)
			return smp.Label[k][0]
		}
		pid, space := one("pid"), one("space")
		if space == "host" {
			add(s.host, pid, smp.Value)
			continue
		}
		add(s.dev, pid, smp.Value)
		add(s.devByID, pid+"/"+one("device"), smp.Value)
	}
	return s
}

// checkProfileAgainst compares one process's samples with its truth: device
// memory (all but space=host) per process and per device label, and pinned
// host memory apart.
func checkProfileAgainst(t *testing.T, s profileSums, tr *covTruth) {
	t.Helper()
	pid := strconv.FormatUint(uint64(tr.PID), 10)
	name := fmt.Sprintf("%s pid %d", tr.Scenario, tr.PID)
	got := s.dev[pid]
	if tr.Totals.Allocations == 0 {
		assert.Empty(t, got, "%s: no device samples", name)
	} else if assert.NotNil(t, got, "%s: device samples", name) {
		assert.EqualValues(t, tr.Totals.Allocations, got[0], "%s alloc_objects", name)
		assert.EqualValues(t, tr.Totals.AllocatedBytes, got[1], "%s alloc_space", name)
		assert.EqualValues(t, tr.Totals.LiveBytesAtEnd, got[3], "%s inuse_space", name)
		assert.EqualValues(t, tr.Totals.PeakBytes, got[5], "%s peak_space (device, not host)", name)
	}

	atPeak, peak, devPeak := tr.devicePeakSplit()
	require.Equal(t, tr.Totals.PeakBytes, peak, "%s: replay of the truth's calls gives its peak", name)
	for d, dv := range tr.Devices {
		i, _ := strconv.Atoi(d)
		require.Equal(t, dv.PeakBytes, devPeak[i], "%s: replay of the truth's calls gives device %s's peak", name, d)
		v := s.devByID[pid+"/"+d]
		if !assert.NotNil(t, v, "%s: samples with device=%s", name, d) {
			continue
		}
		assert.EqualValues(t, dv.Allocations, v[0], "%s device %s alloc_objects", name, d)
		assert.EqualValues(t, dv.AllocatedBytes, v[1], "%s device %s alloc_space", name, d)
		assert.EqualValues(t, dv.LiveBytesAtEnd, v[3], "%s device %s inuse_space", name, d)
		assert.EqualValues(t, atPeak[i], v[5], "%s device %s peak_space (live there at the process's peak)", name, d)
	}
	for k := range s.devByID {
		if strings.HasPrefix(k, pid+"/") {
			_, ok := tr.Devices[strings.TrimPrefix(k, pid+"/")]
			assert.True(t, ok, "%s: device label of %s is one the truth names (%v)", name, k, tr.Devices)
		}
	}

	h := s.host[pid]
	if tr.Host.Allocations == 0 {
		assert.Nil(t, h, "%s: no host samples", name)
	} else if assert.NotNil(t, h, "%s: samples with space=host", name) {
		assert.EqualValues(t, tr.Host.Allocations, h[0], "%s host alloc_objects", name)
		assert.EqualValues(t, tr.Host.AllocatedBytes, h[1], "%s host alloc_space", name)
		assert.EqualValues(t, tr.Host.LiveBytesAtEnd, h[3], "%s host inuse_space", name)
		assert.EqualValues(t, tr.Host.PeakBytes, h[5], "%s host peak_space (at the host peak)", name)
	}
}

// truthFiles reads "$VRAMPROF_TRUTH.<pid>" of the root and of every child it
// lists (recursively), keyed by pid.
func truthFiles(t *testing.T, base string, root *covTruth) map[uint32]*covTruth {
	t.Helper()
	out := map[uint32]*covTruth{}
	var walk func(pid uint32)
	walk = func(pid uint32) {
		tr := mustReadCovTruth(t, fmt.Sprintf("%s.%d", base, pid))
		require.Equal(t, pid, tr.PID, "truth file of pid %d", pid)
		out[pid] = tr
		for _, c := range tr.Children {
			walk(c)
		}
	}
	walk(root.PID)
	return out
}

var coverageScenarios = []struct {
	name  string
	procs int // processes in the tree, 1 for a single process
}{
	{name: "vmm", procs: 1},
	{name: "async_streams", procs: 1},
	{name: "managed_pinned", procs: 1},
	{name: "four_devices", procs: 1},
	{name: "ctx_guard", procs: 1},
	{name: "ctx_destroy", procs: 1},
	{name: "driver_only", procs: 1},
	{name: "reload", procs: 1},
	{name: "workers", procs: 5},
	{name: "launcher", procs: 3},
}

// TestRunCoverageScenarios profiles each coverage scenario with `vramprof
// run` and compares report.json and the profile with the truth exactly:
// totals, devices, host, VMM, books, per process for process trees.
func TestRunCoverageScenarios(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, tc := range coverageScenarios {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, truth, r := runScenario(t, tc.name)
			require.Equal(t, 0, r.code, "exit code; stderr:\n%s", r.stderr)
			truthPath := filepath.Join(filepath.Dir(dir), "truth.json")
			root := mustReadCovTruth(t, truthPath)
			want := outputFiles
			if tc.name == "driver_only" || tc.name == "managed_pinned" {
				// Requests beyond the device fail with out-of-memory: a
				// moment report each (the first, then rate-limited).
				want = withMoments(want)
			}
			assertDirHolds(t, dir, want)
			rep := mustReadCovReport(t, filepath.Join(dir, "report.json"))
			prof := sumProfile(t, filepath.Join(dir, "profile.pb.gz"))
			assert.Zero(t, rep.Totals.LostEvents, "lost_events")

			if tc.procs == 1 {
				require.Empty(t, root.Children, "truth: a single process")
				// The checks every scenario gets (by-function stacks,
				// pprof top, replay).
				full := mustReadReport(t, filepath.Join(dir, "report.json"))
				t.Run("report", func(t *testing.T) { checkReport(t, full, truth) })
				t.Run("pprof", func(t *testing.T) { checkProfile(t, tc.name, filepath.Join(dir, "profile.pb.gz"), truth) })
				t.Run("replay", func(t *testing.T) { checkReplay(t, dir) })

				w := root.Totals
				assert.Equal(t, covTotals{Allocations: w.Allocations, Frees: w.Frees,
					FailedAllocations: w.FailedAllocations, UnknownFrees: w.UnknownFrees,
					AllocatedBytes: w.AllocatedBytes, PeakBytes: w.PeakBytes, LiveBytesAtEnd: w.LiveBytesAtEnd},
					rep.Totals, "totals")
				assert.Equal(t, wantDevices(root), sortDevices(rep.Devices), "devices")
				if assert.NotNil(t, rep.Host, "report.json has host") {
					assert.Equal(t, covHost(root.Host), *rep.Host, "host")
				}
				assert.Equal(t, wantVMM(root.VMM), rep.VMM, "vmm")
				assert.Equal(t, wantBooks(root), rep.Books, "books (never summed)")
				require.Len(t, rep.Processes, 1)
				checkProcessFigures(t, rep.Processes[0], root)
				t.Run("image", func(t *testing.T) { checkProcessImage(t, rep.Processes[0], root) })
				checkProfileAgainst(t, prof, root)
				// Nesting: every runtime call made one driver call, which
				// is in the books, never twice in totals.
				if b := root.Books["runtime"]; b.Allocations > 0 && tc.name != "driver_only" {
					assert.Equal(t, b.Allocations, root.Totals.Allocations, "truth: each runtime allocation counted once")
					assert.NotZero(t, rep.Run.NestedEvents, "nested driver calls seen")
				}
				return
			}

			// A process tree: each process against its own file.
			trees := truthFiles(t, truthPath, root)
			require.Len(t, trees, tc.procs, "truth files")
			byPID := map[uint32]covProcess{}
			for _, p := range rep.Processes {
				byPID[p.PID] = p
			}
			var pids []uint32
			for pid := range trees {
				pids = append(pids, pid)
			}
			got := make([]uint32, 0, len(byPID))
			for pid := range byPID {
				got = append(got, pid)
			}
			sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
			sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
			assert.Equal(t, pids, got, "report.json processes are the tree's")

			var sum covTotals
			devLive := map[int32]uint64{}
			devPeakMax, devPeakSum := map[int32]uint64{}, map[int32]uint64{}
			var sumBooks covBooks
			for pid, tr := range trees {
				p, ok := byPID[pid]
				if !assert.True(t, ok, "%s pid %d traced", tr.Scenario, pid) {
					continue
				}
				checkProcessFigures(t, p, tr)
				checkProfileAgainst(t, prof, tr)
				t.Run(fmt.Sprintf("image_%d", pid), func(t *testing.T) { checkProcessImage(t, p, tr) })
				sum.Allocations += tr.Totals.Allocations
				sum.Frees += tr.Totals.Frees
				sum.FailedAllocations += tr.Totals.FailedAllocations
				sum.AllocatedBytes += tr.Totals.AllocatedBytes
				sum.LiveBytesAtEnd += tr.Totals.LiveBytesAtEnd
				for _, d := range wantDevices(tr) {
					devLive[d.Index] += d.LiveBytesAtEnd
					devPeakMax[d.Index] = max(devPeakMax[d.Index], d.PeakBytes)
					devPeakSum[d.Index] += d.PeakBytes
				}
				b := wantBooks(tr)
				sumBooks.Runtime.Allocations += b.Runtime.Allocations
				sumBooks.Runtime.Frees += b.Runtime.Frees
				sumBooks.Runtime.AllocatedBytes += b.Runtime.AllocatedBytes
				sumBooks.Driver.Allocations += b.Driver.Allocations
				sumBooks.Driver.Frees += b.Driver.Frees
				sumBooks.Driver.AllocatedBytes += b.Driver.AllocatedBytes
			}
			tt := rep.Totals
			assert.Equal(t, sum.Allocations, tt.Allocations, "totals.allocations = sum over processes")
			assert.Equal(t, sum.Frees, tt.Frees, "totals.frees = sum over processes")
			assert.Equal(t, sum.FailedAllocations, tt.FailedAllocations, "totals.failed_allocations = sum")
			assert.Equal(t, sum.AllocatedBytes, tt.AllocatedBytes, "totals.allocated_bytes = sum over processes")
			assert.Equal(t, sum.LiveBytesAtEnd, tt.LiveBytesAtEnd, "totals.live_bytes_at_end = sum over processes")
			assert.Equal(t, sumBooks, rep.Books, "books = sum over processes")
			var maxPeak, sumPeak uint64
			for _, tr := range trees {
				maxPeak = max(maxPeak, tr.Totals.PeakBytes)
				sumPeak += tr.Totals.PeakBytes
			}
			assert.GreaterOrEqual(t, tt.PeakBytes, maxPeak, "totals.peak_bytes at least each process's")
			assert.LessOrEqual(t, tt.PeakBytes, sumPeak, "totals.peak_bytes at most the sum of the peaks")
			gotDev := map[int32]covDevice{}
			for _, d := range rep.Devices {
				gotDev[d.Index] = d
			}
			assert.Len(t, gotDev, len(devLive), "devices: those the truths name")
			for i, live := range devLive {
				d := gotDev[i]
				assert.Equal(t, live, d.LiveBytesAtEnd, "device %d live_bytes_at_end = sum over processes", i)
				assert.GreaterOrEqual(t, d.PeakBytes, devPeakMax[i], "device %d peak at least each process's", i)
				assert.LessOrEqual(t, d.PeakBytes, devPeakSum[i], "device %d peak at most the sum", i)
			}
		})
	}
}
