package compare

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeFile is a plain WriteFile for Outputs.
func writeFile(path string, write func(io.Writer) error) error {
	var b bytes.Buffer
	if err := write(&b); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// mustOutputs returns Outputs that write every file into a new directory.
func mustOutputs(tb testing.TB) Outputs {
	tb.Helper()
	dir := tb.TempDir()
	return Outputs{JUnit: filepath.Join(dir, "junit.xml"), StepSummary: filepath.Join(dir, "summary.md"),
		Baseline: filepath.Join(dir, "baseline.json"), Tool: "vramprof test", WriteFile: writeFile}
}

// TestPublish: the text on stdout, the JUnit report, the step summary
// appended (twice: two checks in one job) and the baseline, which holds the
// figures' peak.
func TestPublish(t *testing.T) {
	v := Judge(mustLoad(t, "base"), nil, Limits{MaxPeak: u64(basePeak)}, nil)
	o := mustOutputs(t)
	var stdout bytes.Buffer
	for range 2 {
		regression, err := v.Publish(&stdout, o)
		require.NoError(t, err)
		assert.False(t, regression)
	}
	assert.Equal(t, textOf(v)+textOf(v), stdout.String())

	var junit, summary bytes.Buffer
	require.NoError(t, v.WriteJUnit(&junit))
	require.NoError(t, v.WriteMarkdown(&summary))
	assert.Equal(t, junit.String(), string(mustReadFile(t, o.JUnit)))
	assert.Equal(t, summary.String()+summary.String(), string(mustReadFile(t, o.StepSummary)), "appended")
	b, err := LoadBaseline(o.Baseline)
	require.NoError(t, err)
	assert.Equal(t, uint64(basePeak), b.Peak)

	t.Run("annotations", func(t *testing.T) {
		o := Outputs{Annotations: true}
		var stdout, want bytes.Buffer
		v := Judge(mustLoad(t, "base"), nil, Limits{MaxPeak: u64(basePeak - 1)}, nil)
		regression, err := v.Publish(&stdout, o)
		require.NoError(t, err)
		assert.True(t, regression, "a byte over the peak")
		v.WriteText(&want)
		v.WriteAnnotations(&want)
		assert.Equal(t, want.String(), stdout.String())
	})
}

// TestPublishNoBaseline: a failed command's recording, or one whose verdict
// is unknown, writes no baseline; the outcome is the verdict's error.
func TestPublishNoBaseline(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    *Verdict
		want error
	}{
		{"command failed", Judge(mustLoad(t, "base"), nil, Limits{MaxPeak: u64(basePeak)}, intp(3)), ErrCommandFailed},
		{"events lost", Judge(mustLoad(t, "lossy"), nil, Limits{MaxPeak: u64(1000)}, nil), ErrLostEvents},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := mustOutputs(t)
			_, err := tc.v.Publish(io.Discard, o)
			require.ErrorIs(t, err, tc.want)
			assert.FileExists(t, o.JUnit, "the report of the failure")
			assert.NoFileExists(t, o.Baseline)
		})
	}
}

// TestPublishWriteError: a file that cannot be written is an error naming
// its flag.
func TestPublishWriteError(t *testing.T) {
	o := mustOutputs(t)
	bad := errors.New("disk full")
	o.WriteFile = func(string, func(io.Writer) error) error { return bad }
	_, err := Judge(mustLoad(t, "base"), nil, Limits{}, nil).Publish(io.Discard, o)
	require.ErrorIs(t, err, bad)
	assert.Equal(t, "--junit: disk full", err.Error())
}

func mustReadFile(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	require.NoError(tb, err)
	return b
}
