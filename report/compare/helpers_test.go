package compare

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The fixtures in testdata/ are hand-written report.json files and one
// baseline; every figure the tests expect is computed from their numbers.
// base: two processes of "python train.py", peak 3407872 bytes (device 0
// 2359296, device 1 1048576), stacks at the peak load_model 1572864+1048576
// (two processes, libc addresses that blank alike), forward 524288, warmup
// 262144; nothing live at the end.
// new: the same command, peak 3748659 (device 0 2695987, device 1 1048576,
// device 2 4096), load_model unchanged, forward 1123123, warmup gone, a new
// "python eval.py" with 4096 at evaluate; 65536 bytes live at the end from
// cache; 2 late events.
// lossy: 3 events lost of 1000 (997 recorded); peak 1000.
const (
	basePeak    = 2359296 + 1048576 // 3407872
	newPeak     = 2695987 + 1048576 + 4096
	newLive     = 65536
	modelBytes  = 1572864 + 1048576
	baseForward = 524288
	newForward  = 1123123
	warmupBytes = 262144
	evalBytes   = 4096
)

func fixture(name string) string {
	return filepath.Join("testdata", name, "report.json")
}

// mustLoad loads testdata/<name>/report.json as figures named name.
func mustLoad(tb testing.TB, name string) *Figures {
	tb.Helper()
	s, err := LoadReport(name, fixture(name))
	require.NoError(tb, err)
	return s
}

func textOf(v *Verdict) string {
	var b bytes.Buffer
	v.WriteText(&b)
	return b.String()
}

func u64(n uint64) *uint64 { return &n }

func intp(n int) *int { return &n }
