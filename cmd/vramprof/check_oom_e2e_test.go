//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
	"github.com/vramprof/vramprof/report/units"
)

// poolOOMTruth is the part of a pool scenario's truth that describes its
// failed block allocations (testdata/README.md, "The block layer").
type poolOOMTruth struct {
	Fragmentation []struct {
		Func             string `json:"func"`
		ReservedBytes    uint64 `json:"reserved_bytes"`
		AllocatedBytes   uint64 `json:"allocated_bytes"`
		CachedFreeBytes  uint64 `json:"cached_free_bytes"`
		LargestFreeRange uint64 `json:"largest_free_range"`
		Segments         int    `json:"segments"`
		Kind             string `json:"oom_kind"`
	} `json:"fragmentation"`
}

// allocLine is the line of the first allocation call (TRUTH_MALLOC or
// C10_ALLOC) in function fn of a scenario's source: the site's line, read
// from the source, not from vramprof.
func allocLine(t *testing.T, source, fn string) int {
	t.Helper()
	f, err := os.Open(source)
	require.NoError(t, err)
	defer f.Close()
	def := regexp.MustCompile(`^\w.*\b` + regexp.QuoteMeta(fn) + `\(`)
	call := regexp.MustCompile(`(MALLOC|C10_ALLOC)\(`)
	in := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !in && def.MatchString(line) && !strings.HasSuffix(line, ";"):
			in = true
		case in && call.MatchString(line):
			return n
		}
	}
	t.Fatalf("%s: no allocation call in %s", source, fn)
	return 0
}

// TestCheckOOM: a command that runs out of memory fails the gate (exit 1,
// "FAIL: out of memory"), every limit held, whether it exits 1 (oom, the
// pool scenarios) or catches the failures and exits 0 (oom_loop). The text,
// the JUnit failure and the GitHub annotation carry the forensics: the
// failed request's bytes and site (file and line, relative to the
// checkout), what was live then, and the verdict (a pool's OOM kind). All
// expected figures are the scenarios' truth: the first failed call's size,
// the live bytes replayed from the calls before it, the allocator's own
// state at the failure; the line is read from the source.
func TestCheckOOM(t *testing.T) {
	probetest.RequirePrivilege(t)
	for _, name := range []string{"oom", "oom_loop", "pool_frag_oom", "pool_capacity_oom"} {
		t.Run(name, func(t *testing.T) {
			tmp := t.TempDir()
			truthPath, junit := filepath.Join(tmp, "truth.json"), filepath.Join(tmp, "j.xml")
			r := vramprof(t, execOpts{dir: tmp, env: []string{"VRAMPROF_TRUTH=" + truthPath, "GITHUB_ACTIONS=true",
				"GITHUB_WORKSPACE=" + probetest.Root()}},
				"check", "--max-peak", "1TiB", "--junit", junit, "--", probetest.Bin(t, name))
			truth := probetest.MustReadTruth(t, truthPath)

			// The truth: the first failed request, what was live before it,
			// and how many failed.
			var request, live uint64
			var fn string
			failed := 0
			sizes := map[uint64]uint64{}
			for _, c := range truth.Calls {
				switch {
				case c.Outcome == "failed":
					if failed == 0 {
						request, fn = c.Size, c.Func
						for _, s := range sizes {
							live += s
						}
					}
					failed++
				case c.Outcome == "ok" && c.API == "cudaMalloc":
					sizes[c.Ptr] = c.Size
				case c.Outcome == "ok" && c.API == "cudaFree":
					delete(sizes, c.Ptr)
				}
			}
			require.Positive(t, failed, "truth: a failed request")
			pool := mustReadJSON[poolOOMTruth](t, truthPath)
			if strings.HasPrefix(name, "pool_") {
				require.Len(t, pool.Fragmentation, 1, "truth: one failed block allocation")
				fn, failed = pool.Fragmentation[0].Func, 1 // the site is the block's caller; one failure the program saw
			}
			line := allocLine(t, filepath.Join(probetest.Root(), "testdata", "scenarios", name+".c"), fn)
			site := fmt.Sprintf("%s (scenarios/%s.c:%d)", fn, name, line)

			assert.Equal(t, exitCheckRegression, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			assert.Regexp(t, `^vramprof check: FAIL: out of memory \(1 of 2 checks failed\)`, r.stdout)
			assert.NotContains(t, r.stdout, "not a memory regression")
			assert.Contains(t, r.stdout, "PASS  max-peak", "every limit held")
			reqText := units.BytesExact(request)
			assert.Contains(t, r.stdout, fmt.Sprintf("FAIL  oom           %s ran out of memory; the first: %s at %s",
				map[bool]string{true: "1 request", false: fmt.Sprintf("%d requests", failed)}[failed == 1], reqText, site))
			assert.Contains(t, r.stdout, "  failed:    "+reqText)
			assert.Contains(t, r.stdout, "  site:      "+site)
			if strings.HasPrefix(name, "pool_") {
				fr := pool.Fragmentation[0]
				assert.Contains(t, r.stdout, fmt.Sprintf("  live then: %s reserved in %d segments, %s allocated to tensors, %s cached free",
					units.BytesExact(fr.ReservedBytes), fr.Segments, units.BytesExact(fr.AllocatedBytes), units.BytesExact(fr.CachedFreeBytes)))
				assert.Contains(t, r.stdout, fmt.Sprintf("the largest %s", units.BytesExact(fr.LargestFreeRange)))
				assert.Contains(t, r.stdout, "  verdict:   "+fr.Kind+" OOM: ")
			} else {
				assert.Contains(t, r.stdout, fmt.Sprintf("  live then: %s in the process", units.BytesExact(live)))
				assert.Contains(t, r.stdout, fmt.Sprintf("  verdict:   a request for %d bytes", request))
			}
			if failed > 1 {
				assert.Contains(t, r.stdout, fmt.Sprintf("  in all:    %d requests ran out of memory", failed))
			}

			msg := fmt.Sprintf("out of memory: a request for %s at %s failed with error 2 (cudaErrorMemoryAllocation)", reqText, site)
			cases := failedCases(mustReadJUnit(t, junit))
			assert.True(t, strings.HasPrefix(cases["oom"], msg), "junit oom case: %q", cases["oom"])
			assert.Equal(t, "", cases["max-peak"])
			assert.Contains(t, r.stdout, fmt.Sprintf("::error file=testdata/scenarios/%s.c,line=%d,title=vramprof check%%3A oom::%s", name, line, msg),
				"an annotation at the site's line, relative to the checkout")
		})
	}
}
