//go:build linux

package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	gprofile "github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// TestServePprofDelta fetches /debug/pprof/allocs?seconds=8 of longrun
// from `vramprof serve` across longrun's traced phase: serve takes its base
// and sends the headers, the test then starts the phase (SIGUSR1), and the
// profile that comes after the window holds what the phase allocated,
// exactly longrun's truth (its top-level totals are that phase alone),
// nothing of what it allocated before. Then `go tool pprof -raw` reads
// allocs?seconds=1 over a quiet second: nothing allocated. The index
// /debug/pprof/ lists the profiles.
func TestServePprofDelta(t *testing.T) {
	probetest.RequirePrivilege(t)
	lrCmd := exec.Command(probetest.Bin(t, "longrun"))
	lrCmd.Env = append(os.Environ(), "LONGRUN_MAX_SECONDS=60")
	lr := startLongrunCmd(t, lrCmd)
	addr := freeLoopback(t)
	_, stop := startDaemon(t, nil, "vramprof: serving http://"+addr, "serve", "--listen", addr)
	base := "http://" + addr
	pid := strconv.Itoa(lr.pid)

	resp, err := http.Get(base + "/debug/pprof/allocs?seconds=8&pid=" + pid)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// The base is taken: run the phase inside the window.
	require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1))
	lr.expect(t, "done")
	truth := probetest.MustReadTruth(t, lr.truth)
	p, err := gprofile.Parse(resp.Body)
	require.NoError(t, err, "the delta profile")
	assert.Equal(t, "alloc_space", p.DefaultSampleType)
	assert.Equal(t, int64(8e9), p.DurationNanos)
	assert.Equal(t, int64(truth.Totals.AllocatedBytes), profileTotal(t, p, "alloc_space"), "bytes allocated in the window")
	assert.Equal(t, int64(truth.Totals.Allocations), profileTotal(t, p, "alloc_objects"), "allocations in the window")
	t.Logf("allocs?seconds=8: %d allocations, %d bytes (truth of longrun's phase)", truth.Totals.Allocations, truth.Totals.AllocatedBytes)

	// longrun now waits for SIGTERM: a quiet second allocates nothing.
	assert.Equal(t, uint64(0), pprofTotal(t, base+"/debug/pprof/allocs?seconds=1&pid="+pid, "alloc_space"))

	idx, err := http.Get(base + "/debug/pprof/")
	require.NoError(t, err)
	page, err := io.ReadAll(idx.Body)
	idx.Body.Close()
	require.NoError(t, err)
	for _, name := range []string{"allocs", "heap", "peak"} {
		assert.Contains(t, string(page), `<a href="`+name+`">`+name+`</a>`)
	}
	stop()
}

// profileTotal sums a sample type over a profile's samples.
func profileTotal(t *testing.T, p *gprofile.Profile, typ string) int64 {
	t.Helper()
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == typ {
			idx = i
		}
	}
	require.GreaterOrEqual(t, idx, 0, "no %s", typ)
	var sum int64
	for _, s := range p.Sample {
		sum += s.Value[idx]
	}
	return sum
}
