//go:build linux

package probes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/probetest"
	"github.com/vramprof/vramprof/probes/probetest/bare"
)

// traceSink encodes every record as the trace writer would, into nothing:
// the benchmark prices the encoding, not the disk. It counts the stacks
// that hold Python frames.
type traceSink struct {
	w        *event.Writer
	pyStacks *int
}

func (s traceSink) Write(rec event.Record) error {
	if st, ok := rec.(*event.Stack); ok && slices.ContainsFunc(st.Frames, func(f event.Frame) bool { return strings.HasSuffix(f.File, ".py") }) {
		*s.pyStacks++
	}
	return s.w.Write(rec)
}
func (s traceSink) Flush() error { return s.w.Flush() }

// threadCPU is the CPU time the calling thread has used; 0 when the
// kernel cannot tell (before 2.6.26).
func threadCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pairCost runs bench_pairs for n pairs and returns its own ns/pair figure.
func pairCost(b *testing.B, out *bytes.Buffer) float64 {
	b.Helper()
	f := strings.Fields(out.String())
	require.Len(b, f, 2, "bench_pairs output %q", out.String())
	v, err := strconv.ParseFloat(f[1], 64)
	require.NoError(b, err)
	return v
}

// hitCosts is what each hot program cost over a run, from the kernel's
// BPF stats, by hit kind: "entry" (call_enter), "return" (call_return),
// "site" (usdt_block); for the bare probe, its counting programs at the
// same points.
type hitCosts map[string]ebpf.ProgramStats

// hit is a hot program whose cost per hit a workload reports: target is
// its budget in ns (0: none), min the hits a run of pairs must make at
// least (every probe fired).
type hit struct {
	name   string
	target float64
	min    func(pairs int) uint64
}

// vramprofCosts reads the session's hot programs' BPF stats (both the
// uprobe_multi and the single-uprobe variants, whichever were loaded).
func vramprofCosts(b *testing.B, s *Session) hitCosts {
	b.Helper()
	sum := func(progs ...*ebpf.Program) ebpf.ProgramStats {
		var all ebpf.ProgramStats
		for _, p := range progs {
			if p == nil {
				continue // loaded on first use: never used
			}
			st, err := p.Stats()
			require.NoError(b, err, "bpf stats of %s", p)
			all.Runtime += st.Runtime
			all.RunCount += st.RunCount
		}
		return all
	}
	return hitCosts{
		"entry":  sum(s.loader.objs.CallEnter, s.loader.objs.CallEnterMulti),
		"return": sum(s.loader.objs.CallReturn, s.loader.objs.CallReturnMulti),
		"site":   sum(s.loader.objs.UsdtBlock),
	}
}

// nsPerHit is a program's mean run time per hit; 0 when it never ran.
func nsPerHit(st ebpf.ProgramStats) float64 {
	if st.RunCount == 0 {
		return 0
	}
	return float64(st.Runtime.Nanoseconds()) / float64(st.RunCount)
}

// workload is one side-by-side overhead measurement: a program that times
// its own loop of pairs, a bare counting probe at the attach points
// vramprof uses for it, and the events one pair makes.
type workload struct {
	name       string   // "cudaMalloc+cudaFree", for the printout
	argv       []string // the program; N (pairs) is appended
	env        []string // added to this process's environment
	attachBare func(b *testing.B) (check func(b *testing.B, pairs int) hitCosts)
	// attachUret, when set, is the bare probe with a uretprobe at each
	// function instead of uprobes at its return instructions: what the
	// returns cost before vramprof stopped using uretprobes, priced in the
	// same rounds. calls is the probed function calls one pair makes.
	attachUret func(b *testing.B) (check func(b *testing.B, pairs int) hitCosts)
	calls      int
	events     func(pairs int) uint64 // records vramprof must deliver
	opts       Options
	target     string // the goal the ratio is held to, if any
	hits       []hit  // hot programs priced per hit (BPF stats)
	python     bool   // the stacks must hold Python frames
}

// measure runs the workload unprobed, under the bare probe (and its
// uretprobe variant, when the workload has one) and under a full vramprof
// session, interleaved round by round so that machine noise hits them all
// alike, and reports the medians and their ratios. probed/bare is
// vramprof's own cost over the floor any uprobe tracer pays. It also
// reports the CPU time of the session's reader thread per event, and the
// run time per hit of each of w.hits, vramprof's program against the
// bare probe's at the same points (kernel BPF stats, on for the run).
func measure(b *testing.B, w workload) {
	n := strconv.Itoa(b.N)
	const rounds = 15
	var unprobed, counted, uret, probed, reader []float64
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	require.NoError(b, err, "enable BPF stats")
	defer stats.Close()
	perHit := map[string][]float64{} // name -> ns per hit, a round each
	bareHit := map[string][]float64{}
	hitsPerPair := map[string][]float64{}
	var hitsAll, records []float64 // per pair: every program of w.hits; the session's events
	argv := append(slices.Clone(w.argv), n)
	env := append(os.Environ(), w.env...)
	runPlain := func() float64 {
		var out bytes.Buffer
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		cmd.Stdout = &out
		require.NoError(b, cmd.Run())
		return pairCost(b, &out)
	}
	for range rounds {
		unprobed = append(unprobed, runPlain())

		check := w.attachBare(b)
		counted = append(counted, runPlain())
		bc := check(b, b.N)
		for _, h := range w.hits {
			bareHit[h.name] = append(bareHit[h.name], nsPerHit(bc[h.name]))
		}

		if w.attachUret != nil {
			check := w.attachUret(b)
			uret = append(uret, runPlain())
			check(b, b.N)
		}

		tw, err := event.NewWriter(io.Discard, &event.Header{Mode: "run"})
		require.NoError(b, err)
		opts := w.opts
		pyStacks := 0
		opts.Sink = traceSink{tw, &pyStacks}
		s, err := NewSession(opts)
		require.NoError(b, err)
		var out bytes.Buffer
		cmd, err := s.Launch(LaunchOptions{Argv: argv, Env: env, Stdout: &out})
		require.NoError(b, err)
		done := make(chan error, 1)
		var runCPU time.Duration
		go func() {
			// Locked first, so the thread's CPU time is the reader's
			// alone (Run locks it for good).
			runtime.LockOSThread()
			start := threadCPU()
			err := s.Run(context.Background())
			runCPU = threadCPU() - start
			done <- err
		}()
		require.NoError(b, cmd.Wait())
		require.NoError(b, <-done)
		probed = append(probed, pairCost(b, &out))
		reader = append(reader, float64(runCPU.Nanoseconds())/float64(s.Stats().Events.Load()))
		// Every event of every pair (and of the warm-up) was recorded, and
		// nothing was lost.
		require.EqualValues(b, w.events(b.N+100), s.Stats().Events.Load())
		require.Zero(b, s.Stats().Lost.Load())
		if w.python {
			// The Python frames were read: what is being priced.
			require.Positive(b, pyStacks, "stacks with Python frames")
		}
		records = append(records, float64(s.Stats().Events.Load())/float64(b.N+100))
		vc := vramprofCosts(b, s)
		var all uint64
		for _, h := range w.hits {
			all += vc[h.name].RunCount
			st := vc[h.name]
			// Every probe fired: a hit per probed call at least.
			require.GreaterOrEqual(b, st.RunCount, h.min(b.N+100), "%s hits", h.name)
			perHit[h.name] = append(perHit[h.name], nsPerHit(st))
			hitsPerPair[h.name] = append(hitsPerPair[h.name], float64(st.RunCount)/float64(b.N+100))
		}
		if len(w.hits) > 0 {
			hitsAll = append(hitsAll, float64(all)/float64(b.N+100))
		}
		require.NoError(b, s.Close())
	}
	med := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
	u, c, p := med(unprobed), med(counted), med(probed)
	b.ReportMetric(u, "ns/pair-unprobed")
	b.ReportMetric(c, "ns/pair-bare")
	b.ReportMetric(p, "ns/pair-vramprof")
	b.ReportMetric(p/c, "vramprof/bare")
	b.ReportMetric(p/u, "vramprof/unprobed")
	b.ReportMetric(c/u, "bare/unprobed")
	fmt.Printf("\nper %s pair, median of %d interleaved rounds of %d pairs:\n"+
		"  unprobed %8.0f ns\n  bare     %8.0f ns  (%.2fx unprobed)\n  vramprof %8.0f ns  (%.2fx unprobed, %.2fx bare%s)\n",
		w.name, rounds, b.N, u, c, c/u, p, p/u, p/c, w.target)
	rd := med(reader)
	b.ReportMetric(rd, "reader-cpu-ns/event")
	// Over a whole run: the reader's thread also symbolizes each stack
	// once, and wakes for the few events of each poll.
	fmt.Printf("  reader   %8.0f ns of CPU per event over the run, the ring buffer read to the trace record "+
		"(target <= %d ns at full rate: BenchmarkReader)\n", rd, readerTarget)
	for _, h := range w.hits {
		v, bv, hp := med(perHit[h.name]), med(bareHit[h.name]), med(hitsPerPair[h.name])
		b.ReportMetric(v, "ns/hit-"+h.name)
		b.ReportMetric(bv, "ns/hit-"+h.name+"-bare")
		b.ReportMetric(hp, "hits/pair-"+h.name)
		target := ""
		if h.target > 0 {
			target = fmt.Sprintf(", target <= %.0f ns", h.target)
		}
		fmt.Printf("  BPF per %-6s hit %4.0f ns  (bare counting probe %3.0f ns%s; %.2f hits per pair; kernel BPF stats)\n",
			h.name, v, bv, target, hp)
		// The programs run for every process that calls the probed
		// functions, and one that is not traced leaves at the filter: its
		// cheap hits pull the mean down.
		if want := float64(h.min(b.N+100)) / float64(b.N+100); hp > 1.01*want {
			fmt.Printf("  (%.2f %s hits per pair, %.0f expected: other processes called the probed functions "+
				"during the run, and their filtered hits are in the mean)\n", hp, h.name, want)
		}
	}
	// What one pair costs in probe sites and records: the figures a
	// context call that changes nothing must not add to.
	rp := med(records)
	b.ReportMetric(rp, "records/pair")
	if len(hitsAll) > 0 {
		hp := med(hitsAll)
		b.ReportMetric(hp, "hits/pair")
		fmt.Printf("  per pair: %.2f probe hits (%s; kernel BPF run counts over the run's pairs and warm-up), "+
			"%.2f records (the session's events)\n", hp, hitNames(w.hits), rp)
	} else {
		fmt.Printf("  per pair: %.2f records (the session's events)\n", rp)
	}
	if len(uret) > 0 {
		// The bare probe both ways: the entries are the same uprobes, so
		// what differs is the returns. Per call: (probed - unprobed) over
		// the probed calls of a pair.
		r := med(uret)
		perRet, perUret := (c-u)/float64(w.calls), (r-u)/float64(w.calls)
		b.ReportMetric(r, "ns/pair-bare-uretprobe")
		b.ReportMetric(perRet, "ns/call-return-insns")
		b.ReportMetric(perUret, "ns/call-uretprobe")
		b.ReportMetric(perRet/perUret, "return-insns/uretprobe")
		fmt.Printf("  returns: uprobes on the return instructions (vramprof, bare above) against uretprobes (bare, before):\n"+
			"  bare with uretprobes %8.0f ns per pair  (%.2fx unprobed)\n"+
			"  per probed call (entry + return, %d calls a pair): return instructions %.0f ns, uretprobe %.0f ns: %.2fx\n",
			r, r/u, w.calls, perRet, perUret, perRet/perUret)
	}
}

// hitNames lists hits' names, joined by " + ".
func hitNames(hits []hit) string {
	var names []string
	for _, h := range hits {
		names = append(names, h.name)
	}
	return strings.Join(names, " + ")
}

// callHits are a cudaMalloc+cudaFree pair's hot programs: an entry and a
// return for each of its 4 probed calls (the runtime's and the driver's
// nested in it), at least.
var callHits = []hit{
	{name: "entry", target: 150, min: func(pairs int) uint64 { return uint64(4 * pairs) }},
	{name: "return", target: 150, min: func(pairs int) uint64 { return uint64(4 * pairs) }},
}

// BenchmarkOverhead prices one cudaMalloc+cudaFree pair (and the driver
// calls nested in it). b.N is the number of pairs per run; use -benchtime
// 20000x.
func BenchmarkOverhead(b *testing.B) {
	probetest.RequirePrivilege(b)
	if b.N < 1000 {
		// The framework's first call (b.N == 1) only sizes the run; with
		// -benchtime Nx the real one follows. Too few pairs to price.
		return
	}
	atRets, uret := barePairs(b)
	measure(b, workload{
		name:       "cudaMalloc+cudaFree",
		argv:       []string{probetest.Bin(b, "bench_pairs")},
		attachBare: atRets,
		attachUret: uret,
		calls:      4,
		// Runtime call and nested driver call, for both halves.
		events: func(pairs int) uint64 { return uint64(4 * pairs) },
		target: "; target <= 1.3x bare",
		hits:   callHits,
	})
}

// BenchmarkGuardOverhead prices context calls: the same pairs as
// BenchmarkOverhead, each call preceded by cudaSetDevice(0) as a
// framework's device guard does (bench_pairs with BENCH_GUARD=1), so a
// pair is cudaSetDevice, cudaMalloc, cudaSetDevice, cudaFree, each
// cudaSetDevice calling cuCtxSetCurrent in the driver. Only the first
// cudaSetDevice (of the warm-up) changes the thread's device and context:
// it is the only one recorded, with its cuCtxSetCurrent, and
// cuCtxSetCurrent has no return probe. The bare probe counts at the same
// points (cudaSetDevice and cuCtxSetCurrent's entry too). Use -benchtime
// 20000x.
func BenchmarkGuardOverhead(b *testing.B) {
	probetest.RequirePrivilege(b)
	if b.N < 1000 {
		return // sizing call; see BenchmarkOverhead
	}
	atRets, _ := barePoints(b, []event.API{event.APICudaSetDevice, event.APICudaMalloc, event.APICudaFree},
		[]event.API{event.APICuCtxSetCurrent, event.APICuMemAlloc, event.APICuMemFree})
	// Probed calls a pair makes: cudaMalloc, cudaFree and the driver call
	// nested in each, and two cudaSetDevice with their cuCtxSetCurrent,
	// which alone returns unprobed.
	const calls, returns = 8, 6
	measure(b, workload{
		name:       "cudaSetDevice+cudaMalloc+cudaSetDevice+cudaFree (a device guard)",
		argv:       []string{probetest.Bin(b, "bench_pairs")},
		env:        []string{"BENCH_GUARD=1"},
		attachBare: atRets,
		calls:      calls,
		// The allocation and the free (runtime and nested driver), and
		// once, the cudaSetDevice that made device 0 current (the
		// thread's device was unknown) with its cuCtxSetCurrent.
		events: func(pairs int) uint64 { return uint64(4*pairs) + 2 },
		hits: []hit{
			{name: "entry", min: func(pairs int) uint64 { return uint64(calls * pairs) }},
			{name: "return", min: func(pairs int) uint64 { return uint64(returns * pairs) }},
		},
	})
}

// benchThreads is BenchmarkThreadsOverhead's thread count: as many threads
// as churn_threads runs, calling at once.
const benchThreads = 16

// BenchmarkThreadsOverhead prices the same pairs made by 16 threads at
// once on this host's cores: the wall time of a round of 16 pairs, where
// the reader competes with the traced threads for the CPU. b.N is the
// pairs per thread; use -benchtime 2000x.
func BenchmarkThreadsOverhead(b *testing.B) {
	probetest.RequirePrivilege(b)
	if b.N < 1000 {
		return // sizing call; see BenchmarkOverhead
	}
	atRets, _ := barePairs(b)
	measure(b, workload{
		name:       fmt.Sprintf("round of %d concurrent cudaMalloc+cudaFree", benchThreads),
		argv:       []string{probetest.Bin(b, "bench_pairs")},
		env:        []string{fmt.Sprintf("BENCH_THREADS=%d", benchThreads)},
		attachBare: atRets,
		calls:      4,
		events:     func(pairs int) uint64 { return uint64(4 * pairs * benchThreads) },
		target:     "; target <= 1.03x bare",
	})
}

// barePairs returns the bare counting probe's attach for a
// cudaMalloc+cudaFree workload: the functions one pair goes through,
// cudaMalloc and cudaFree in the runtime, cuMemAlloc_v2 and cuMemFree_v2
// nested in the driver. vramprof probes these four at their entries and
// return instructions; so does the bare probe (atReturns), and uret is the
// same with a uretprobe at each function instead, as vramprof did before.
func barePairs(b *testing.B) (atReturns, uret func(b *testing.B) func(*testing.B, int) hitCosts) {
	return barePoints(b, []event.API{event.APICudaMalloc, event.APICudaFree}, []event.API{event.APICuMemAlloc, event.APICuMemFree})
}

// barePoints is barePairs for the runtime functions rt (libcudart) and the
// driver functions drv (libcuda): their entries, and the return
// instructions vramprof probes them at (none for a function it probes at
// its entry only).
func barePoints(b *testing.B, rt, drv []event.API) (atReturns, uret func(b *testing.B) func(*testing.B, int) hitCosts) {
	type points struct{ entries, returns []uint64 }
	pointsIn := func(lib string, apis ...event.API) points {
		pf, err := scanFile(candidate{Path: lib, OpenPath: lib}, cudaProbes, false, nil)
		require.NoError(b, err)
		require.NotNil(b, pf)
		var p points
		for _, t := range pf.Targets {
			if slices.Contains(apis, t.Spec.API) {
				p.entries = append(p.entries, t.Offset)
				if t.Spec.AtEntry {
					continue // vramprof probes its entry only
				}
				for _, r := range t.Call.Returns {
					p.returns = append(p.returns, r.Offset)
				}
			}
		}
		require.Len(b, p.entries, len(apis))
		return p
	}
	cudart, cuda := probetest.Lib(b, "libcudart.so.12"), probetest.Lib(b, "libcuda.so.1")
	cudartAt := pointsIn(cudart, rt...)
	cudaAt := pointsIn(cuda, drv...)
	checks := func(p1, p2 *bare.Probe) func(*testing.B, int) hitCosts {
		return func(b *testing.B, pairs int) hitCosts {
			costs := hitCosts{}
			for _, p := range []*bare.Probe{p1, p2} {
				enters, returns, err := p.Counts()
				require.NoError(b, err)
				entry, ret, _, err := p.Runs()
				require.NoError(b, err)
				require.NoError(b, p.Close())
				// The counting probe fires system-wide: at least our calls.
				require.GreaterOrEqual(b, enters, uint64(2*pairs))
				require.GreaterOrEqual(b, returns, uint64(2*pairs))
				for name, st := range map[string]ebpf.ProgramStats{"entry": entry, "return": ret} {
					all := costs[name]
					all.Runtime += st.Runtime
					all.RunCount += st.RunCount
					costs[name] = all
				}
			}
			return costs
		}
	}
	atReturns = func(b *testing.B) func(*testing.B, int) hitCosts {
		p1, err := bare.AttachAtReturns(cudart, cudartAt.entries, cudartAt.returns)
		require.NoError(b, err)
		p2, err := bare.AttachAtReturns(cuda, cudaAt.entries, cudaAt.returns)
		require.NoError(b, err)
		return checks(p1, p2)
	}
	uret = func(b *testing.B) func(*testing.B, int) hitCosts {
		p1, err := bare.Attach(cudart, cudartAt.entries...)
		require.NoError(b, err)
		p2, err := bare.Attach(cuda, cudaAt.entries...)
		require.NoError(b, err)
		return checks(p1, p2)
	}
	return atReturns, uret
}

// BenchmarkPythonOverhead prices Python stacks: the same pairs as
// BenchmarkOverhead, made by CPython through ctypes about 20 Python frames
// deep, so every allocation record carries the frame chain read in BPF.
// Use -benchtime 20000x.
func BenchmarkPythonOverhead(b *testing.B) {
	probetest.RequirePrivilege(b)
	if b.N < 1000 {
		return // sizing call; see BenchmarkOverhead
	}
	python := "/usr/bin/python3.11" // Debian's: the interpreter CI has
	if _, err := os.Stat(python); err != nil {
		b.Fatalf("%s: %v (the Python benchmark needs Debian's python3.11)", python, err)
	}
	atRets, uret := barePairs(b)
	measure(b, workload{
		name:       "cudaMalloc+cudaFree from CPython (~20 Python frames, --python auto)",
		argv:       []string{python, filepath.Join(probetest.Root(), "testdata", "python", "bench_pairs.py")},
		env:        []string{"FAKECUDA_LIB=" + probetest.Lib(b, "libcudart.so.12")},
		attachBare: atRets,
		attachUret: uret,
		calls:      4,
		events:     func(pairs int) uint64 { return uint64(4 * pairs) },
		target:     "; target <= 1.6x bare",
		hits:       callHits,
		python:     true,
	})
}

// BenchmarkPoolOverhead prices --pool: one c10_alloc+c10_free pair through
// the caching allocator, its segment cached, so the loop makes no CUDA call
// and the only probes that fire are the allocator's two USDT sites. The
// bare probe counts at those sites, attached the same way (semaphores
// raised); unprobed, the semaphores are down and the sites are skipped.
func BenchmarkPoolOverhead(b *testing.B) {
	probetest.RequirePrivilege(b)
	if b.N < 1000 {
		return // sizing call; see BenchmarkOverhead
	}
	lib := probetest.Lib(b, "libc10_cuda.so")
	pf, err := scanFile(candidate{Path: lib, OpenPath: lib}, nil, true, nil)
	require.NoError(b, err)
	require.NotNil(b, pf)
	var offs, refs []uint64
	for _, t := range pf.Targets {
		// The allocator's two USDT sites; the file's other targets (OOM
		// reports, scopes) never fire in this loop.
		if t.USDT == nil || t.USDT.Provider != "pytorch" {
			continue
		}
		offs = append(offs, t.Offset)
		refs = append(refs, t.USDT.SemaphoreOffset)
	}
	require.Len(b, offs, 2, "pytorch:malloc and pytorch:free")
	measure(b, workload{
		name: "c10_alloc+c10_free (block layer, --pool)",
		argv: []string{probetest.Bin(b, "bench_blocks")},
		attachBare: func(b *testing.B) func(*testing.B, int) hitCosts {
			p, err := bare.AttachSites(lib, offs, refs)
			require.NoError(b, err)
			return func(b *testing.B, pairs int) hitCosts {
				sites, err := p.Sites()
				require.NoError(b, err)
				_, _, site, err := p.Runs()
				require.NoError(b, err)
				require.NoError(b, p.Close())
				require.GreaterOrEqual(b, sites, uint64(2*pairs))
				return hitCosts{"site": site}
			}
		},
		hits: []hit{{name: "site", target: 200, min: func(pairs int) uint64 { return uint64(2 * pairs) }}},
		// The segment's one cudaMalloc (+ nested cuMemAlloc_v2) at warm-up,
		// then a block alloc and free per pair; the segment is never freed.
		events: func(pairs int) uint64 { return uint64(2*pairs) + 2 },
	})
}
