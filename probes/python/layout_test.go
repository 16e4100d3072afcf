package python

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLayoutTables compares every table with offsetof() compiled from the
// headers of each interpreter installed here. Debian's python3.11-dev
// headers are required in CI (.ci/run installs them).
func TestLayoutTables(t *testing.T) {
	tested := map[int]bool{}
	for _, in := range supportedInterpreters(t) {
		table, ok := tableLayout(Version{3, in.minor, 0})
		if in.include == "" || !ok { // no table: Find reads _Py_DebugOffsets (TestDebugOffsetsFields)
			continue
		}
		t.Run(in.name, func(t *testing.T) {
			want := mustCompileOffsets(t, in.include)
			assertLayout(t, want, table)
			tested[in.minor] = true
		})
	}
	if !tested[11] {
		msg := "no CPython 3.11 headers (/usr/include/python3.11, package python3.11-dev): the 3.11 table is untested"
		if inCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// assertLayout compares each field of got with the compiled offsets;
// FrameSize must cover the frame fields (offsets.c's FrameEnd), in whole
// 8-byte words, within the walker's 128 bytes.
func assertLayout(t *testing.T, want map[string]string, got Layout) {
	t.Helper()
	rv := reflect.ValueOf(got)
	for i := range rv.NumField() {
		name := rv.Type().Field(i).Name
		if name == "FrameSize" {
			continue
		}
		assert.Equal(t, offsetOf(t, want, name), rv.Field(i).Int(), "Layout.%s (headers of %s)", name, want["version"])
	}
	end := offsetOf(t, want, "FrameEnd")
	assert.GreaterOrEqual(t, got.FrameSize, end, "FrameSize")
	assert.Less(t, got.FrameSize, end+8, "FrameSize")
	assert.Zero(t, got.FrameSize%8, "FrameSize")
	assert.LessOrEqual(t, got.FrameSize, int64(128), "FrameSize")
	assert.Equal(t, got.FrameSize, frameSize(&got), "FrameSize")
}

// TestDebugOffsetsFields checks the 3.13 field list of _Py_DebugOffsets
// against offsetof() compiled from 3.13 headers, where installed.
func TestDebugOffsetsFields(t *testing.T) {
	var include string
	for _, in := range supportedInterpreters(t) {
		if in.minor == 13 && in.include != "" {
			include = in.include
		}
	}
	if include == "" {
		msg := "no CPython 3.13 headers (testdata/python/fetch.sh unpacks Debian trixie's libpython3.13-dev)"
		if inCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	needGCC(t)
	var src strings.Builder
	src.WriteString("#include <Python.h>\n#include <stdio.h>\n#include <stddef.h>\n#include \"pycore_runtime.h\"\nint main(void) {\n")
	for _, f := range debugFields313 {
		fmt.Fprintf(&src, "    printf(\"%%ld\\n\", (long)offsetof(_Py_DebugOffsets, %s));\n", f)
	}
	fmt.Fprintf(&src, "    printf(\"%%ld\\n\", (long)sizeof(_Py_DebugOffsets));\n    return 0;\n}\n")
	dir := t.TempDir()
	c := filepath.Join(dir, "debug.c")
	require.NoError(t, os.WriteFile(c, []byte(src.String()), 0o644))
	out, err := exec.Command("gcc", append(includeFlags(include), "-o", filepath.Join(dir, "debug"), c)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(filepath.Join(dir, "debug")).Output()
	require.NoError(t, err)
	lines := strings.Fields(string(out))
	require.Len(t, lines, len(debugFields313)+1)
	for i, f := range debugFields313 {
		assert.Equal(t, fmt.Sprint(8*i), lines[i], "offsetof(_Py_DebugOffsets, %s)", f)
	}
}

// TestBoundary is the owner byte's meaning per version (enum _frameowner
// and is_entry; see Layout.Boundary).
func TestBoundary(t *testing.T) {
	tests := []struct {
		name             string
		v                Version
		owner            uint8
		skip, entryAfter bool
	}{
		{"3.10 every frame", Version{3, 10, 0}, 0, false, true},
		{"3.11 not entry", Version{3, 11, 7}, 0, false, false},
		{"3.11 is_entry", Version{3, 11, 7}, 1, false, true},
		{"3.12 thread", Version{3, 12, 1}, 0, false, false},
		{"3.12 generator", Version{3, 12, 1}, 1, false, false},
		{"3.12 frame object", Version{3, 12, 1}, 2, false, false},
		{"3.12 cstack", Version{3, 12, 1}, 3, true, true},
		{"3.13 cstack", Version{3, 13, 0}, 3, true, true},
		{"3.14 interpreter", Version{3, 14, 0}, 3, true, true},
		{"3.14 cstack", Version{3, 14, 0}, 4, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _ := tableLayout(tt.v)
			skip, entryAfter := l.Boundary(tt.v, tt.owner)
			assert.Equal(t, tt.skip, skip, "skip")
			assert.Equal(t, tt.entryAfter, entryAfter, "entryAfter")
		})
	}
}
