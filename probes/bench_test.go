//go:build linux

package probes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/bare"
	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/probes/scenario"
)

// traceSink encodes every record as the trace writer would, into nothing:
// the benchmark prices the encoding, not the disk.
type traceSink struct{ w *event.Writer }

func (s traceSink) Write(rec event.Record) error { return s.w.Write(rec) }
func (s traceSink) Flush() error                 { return s.w.Flush() }

// pairCost runs bench_pairs for n pairs and returns its own ns/pair figure.
func pairCost(b *testing.B, out *bytes.Buffer) float64 {
	b.Helper()
	f := strings.Fields(out.String())
	require.Len(b, f, 2, "bench_pairs output %q", out.String())
	v, err := strconv.ParseFloat(f[1], 64)
	require.NoError(b, err)
	return v
}

// BenchmarkOverhead prices one cudaMalloc+cudaFree pair three ways in the
// same run, interleaved round by round so that machine noise hits all three
// alike: unprobed, under a bare counting probe at the same attach points
// (the floor any uprobe tracer pays), and under a full vramprof session
// (stacks, pairing, ring buffer, reader, trace encoding). The ratios are the
// figures that matter: probed/bare is vramprof's own cost over the floor.
// b.N is the number of pairs per run; use -benchtime 20000x.
func BenchmarkOverhead(b *testing.B) {
	scenario.RequirePrivilege(b)
	if b.N < 1000 {
		// The framework's first call (b.N == 1) only sizes the run; with
		// -benchtime Nx the real one follows. Too few pairs to price.
		return
	}
	bin := scenario.Bin(b, "bench_pairs")
	// The functions one pair goes through: cudaMalloc and cudaFree in the
	// runtime, cuMemAlloc_v2 and cuMemFree_v2 nested in the driver.
	// vramprof probes these four; so does the bare counting probe.
	offsetsIn := func(lib string, apis ...event.API) []uint64 {
		pf, err := scanFile(candidate{Path: lib, OpenPath: lib}, cudaProbes, false)
		require.NoError(b, err)
		require.NotNil(b, pf)
		var offs []uint64
		for _, t := range pf.Targets {
			if slices.Contains(apis, t.Spec.API) {
				offs = append(offs, t.Offset)
			}
		}
		require.Len(b, offs, len(apis))
		return offs
	}
	cudart, cuda := scenario.Lib(b, "libcudart.so.12"), scenario.Lib(b, "libcuda.so.1")
	cudartOffs := offsetsIn(cudart, event.APICudaMalloc, event.APICudaFree)
	cudaOffs := offsetsIn(cuda, event.APICuMemAlloc, event.APICuMemFree)
	n := strconv.Itoa(b.N)
	const rounds = 9
	var unprobed, counted, probed []float64

	runPlain := func() float64 {
		var out bytes.Buffer
		cmd := exec.Command(bin, n)
		cmd.Stdout = &out
		require.NoError(b, cmd.Run())
		return pairCost(b, &out)
	}
	for range rounds {
		unprobed = append(unprobed, runPlain())

		p1, err := bare.Attach(cudart, cudartOffs...)
		require.NoError(b, err)
		p2, err := bare.Attach(cuda, cudaOffs...)
		require.NoError(b, err)
		counted = append(counted, runPlain())
		for _, p := range []*bare.Probe{p1, p2} {
			enters, returns, err := p.Counts()
			require.NoError(b, err)
			require.NoError(b, p.Close())
			// The counting probe fires system-wide: at least our calls.
			require.GreaterOrEqual(b, enters, uint64(2*b.N))
			require.GreaterOrEqual(b, returns, uint64(2*b.N))
		}

		w, err := event.NewWriter(io.Discard, &event.Header{Mode: "run"})
		require.NoError(b, err)
		s, err := NewSession(Options{Sink: traceSink{w}})
		require.NoError(b, err)
		var out bytes.Buffer
		cmd, err := s.Launch(LaunchOptions{Argv: []string{bin, n}, Stdout: &out})
		require.NoError(b, err)
		done := make(chan error, 1)
		go func() { done <- s.Run(context.Background()) }()
		require.NoError(b, cmd.Wait())
		require.NoError(b, <-done)
		probed = append(probed, pairCost(b, &out))
		// Every call of every pair (and of the warm-up) was recorded, the
		// nested driver calls too, and nothing was lost.
		require.EqualValues(b, 4*(b.N+100), s.Stats().Events.Load())
		require.Zero(b, s.Stats().Lost.Load())
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
	fmt.Printf("\nper cudaMalloc+cudaFree pair, median of %d interleaved rounds of %d pairs:\n"+
		"  unprobed %8.0f ns\n  bare     %8.0f ns  (%.2fx unprobed)\n  vramprof %8.0f ns  (%.2fx unprobed, %.2fx bare; target <= 1.3x bare)\n",
		rounds, b.N, u, c, c/u, p, p/u, p/c)
}
