package event

import (
	"compress/gzip"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// v1Fixtures are traces that `vramprof run` recorded in format 1 from the
// scenarios in testdata/scenarios (gzipped: format 1 is very redundant).
// They are the record of what version 1 wrote, so that every later reader
// can be checked against it.
var v1Fixtures = []string{"steady", "leak", "spike", "oom", "threads", "dlopen_runtime", "static_runtime",
	"hashed", "static_lib", "pool_steady", "vmm", "four_devices", "async_streams", "managed_pinned"}

// mustFixture returns the ungzipped bytes of testdata/v1/NAME.vpt.gz.
func mustFixture(tb testing.TB, name string) []byte {
	tb.Helper()
	f, err := os.Open(filepath.Join("testdata", "v1", name+".vpt.gz"))
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = f.Close() })
	zr, err := gzip.NewReader(f)
	require.NoError(tb, err)
	data, err := io.ReadAll(zr)
	require.NoError(tb, err)
	return data
}

// dumpRecords renders a header and records one per line, every field, for
// golden files that do not depend on the code that wrote the trace.
func dumpRecords(h *Header, recs []Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%T %+v\n", h, *h)
	for _, r := range recs {
		switch r := r.(type) {
		case *Event:
			fmt.Fprintf(&b, "%T %+v\n", r, *r)
		case *Stack:
			fmt.Fprintf(&b, "%T %+v\n", r, *r)
		default:
			fmt.Fprintf(&b, "%T %+v\n", r, r)
		}
	}
	return b.String()
}

// TestV1Fixtures reads the format 1 traces back to the records they were
// recorded with: a digest of every field of every record per trace in
// testdata/v1/golden.txt, and the full dump of the smallest.
func TestV1Fixtures(t *testing.T) {
	var digests strings.Builder
	for _, name := range v1Fixtures {
		data := mustFixture(t, name)
		r, recs, err := readAll(t, data)
		require.NoError(t, err, name)
		assert.False(t, r.Truncated(), name)
		assert.Equal(t, uint16(1), r.Header().Version, name)
		dump := dumpRecords(r.Header(), recs)
		events := 0
		for _, rec := range recs {
			if _, ok := rec.(*Event); ok {
				events++
			}
		}
		fmt.Fprintf(&digests, "%s records=%d events=%d bytes=%d sha256=%x\n",
			name, len(recs), events, len(data), sha256.Sum256([]byte(dump)))
		// Written again in the current format: the same records.
		h := *r.Header()
		r2, again, err := readAll(t, mustTrace(t, &h, recs...))
		require.NoError(t, err, name)
		h.Version = Version
		assert.Equal(t, &h, r2.Header(), name)
		assert.Equal(t, recs, again, "%s in format %d", name, Version)
		if name == "vmm" {
			checkGolden(t, filepath.Join("testdata", "v1", "vmm.txt"), dump)
		}
	}
	checkGolden(t, filepath.Join("testdata", "v1", "golden.txt"), digests.String())
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	if string(want) != got {
		wl, gl := strings.Split(string(want), "\n"), strings.Split(got, "\n")
		i := 0
		for i < min(len(wl), len(gl)) && wl[i] == gl[i] {
			i++
		}
		t.Errorf("%s differs from line %d (rerun with -update if the change is intended):\nwant: %s\ngot:  %s",
			path, i+1, lineAt(wl, i), lineAt(gl, i))
	}
}

func lineAt(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end)"
}
