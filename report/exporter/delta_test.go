package exporter

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	gprofile "github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

// sampleTotal sums a sample type over a profile's samples.
func sampleTotal(t *testing.T, p *gprofile.Profile, typ string) int64 {
	t.Helper()
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == typ {
			idx = i
		}
	}
	require.GreaterOrEqual(t, idx, 0, "no %s in the profile", typ)
	var sum int64
	for _, s := range p.Sample {
		sum += s.Value[idx]
	}
	return sum
}

// TestDeltaProfile: /debug/pprof/allocs?seconds=1 takes its base, says so
// (the response's headers), waits the second and returns what was
// allocated meanwhile only; heap?seconds=1 the change of live memory.
func TestDeltaProfile(t *testing.T) {
	x := New(Options{Alive: func(uint32, uint64) bool { return true }})
	feed(t, x, 4242, 0, 3) // before the window: 6 allocations, 15 MiB, 3 MiB live
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()

	for i, tc := range []struct {
		path, sample string
		want         int64
	}{
		// In each window: 4 allocations of 2 MiB, one of them freed.
		{"/debug/pprof/allocs?seconds=1&pid=4242", "alloc_space", 8 * int64(MiB)},
		{"/debug/pprof/allocs?seconds=1&pid=4242", "alloc_objects", 4},
		{"/debug/pprof/heap?seconds=1", "inuse_space", 6 * int64(MiB)},
		{"/debug/pprof/inuse?seconds=1&pid=4242", "inuse_objects", 3},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tc.path)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			// The headers came: the base is taken. Allocate in the window.
			base := uint64(i+1) << 36
			t0 := uint64(1000 * (i + 1))
			for j := range uint64(4) {
				require.NoError(t, x.Write(&event.Event{Time: t0 + j, Addr: base + j<<21, Size: 2 * MiB, PID: 4242,
					Kind: event.KindAlloc, API: event.APICudaMalloc, Layer: event.LayerSegment, Stack: 1}))
			}
			require.NoError(t, x.Write(&event.Event{Time: t0 + 10, Addr: base, PID: 4242,
				Kind: event.KindFree, API: event.APICudaFree, Layer: event.LayerSegment, Stack: 1}))
			p, err := gprofile.Parse(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, tc.want, sampleTotal(t, p, tc.sample))
			assert.Equal(t, int64(1e9), p.DurationNanos)
		})
	}
}

// TestDeltaRefused: a peak has no delta, and seconds must be a whole
// number within the write timeout; each refusal says so.
func TestDeltaRefused(t *testing.T) {
	x := New(Options{Alive: func(uint32, uint64) bool { return true }})
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()
	for path, want := range map[string]string{
		"/debug/pprof/peak?seconds=5":     "peak profile has no ?seconds delta",
		"/debug/pprof/allocs?seconds=x":   "not a whole number of seconds",
		"/debug/pprof/allocs?seconds=0":   "not a whole number of seconds",
		"/debug/pprof/allocs?seconds=999": "from 1 to 90",
	} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, path)
		assert.Contains(t, string(b), want, path)
	}
}

// TestPprofIndex: /debug/pprof/ lists every profile with its link, and
// each process held with links to its profiles.
func TestPprofIndex(t *testing.T) {
	x := New(Options{Alive: func(uint32, uint64) bool { return true }, Start: func(uint32) (uint64, error) { return 77, nil }})
	feed(t, x, 4242, 0, 1)
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/debug/pprof")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	page := string(b)
	for name := range Profiles {
		assert.Contains(t, page, `<a href="`+name+`">`+name+`</a>`)
		// Every link the index gives answers with a profile.
		r, err := http.Get(srv.URL + "/debug/pprof/" + name)
		require.NoError(t, err)
		_, perr := gprofile.Parse(r.Body)
		r.Body.Close()
		assert.Equal(t, http.StatusOK, r.StatusCode, name)
		assert.NoError(t, perr, name)
	}
	assert.Contains(t, page, `<a href="allocs?pid=4242&amp;start=77">allocs</a>`)
	assert.Contains(t, page, "<td>trainer</td>")
}
