package python

import (
	"bytes"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// addr2Line picks the decoder of a minor version of 3.
func addr2Line(minor int) func(table []byte, firstLine, offset int) int {
	if minor < 11 {
		return addr2Line310
	}
	return addr2Line311
}

// checkDump compares the decoder with co_lines() at every instruction of
// every code object in d, one code unit before the first (co_firstlineno)
// and past the last (no line).
func checkDump(t *testing.T, d *linetableDump) {
	t.Helper()
	require.NotEmpty(t, d.Code)
	decode := addr2Line(d.Version[1])
	for _, c := range d.Code {
		table, err := hex.DecodeString(c.Linetable)
		require.NoError(t, err)
		want := map[int]int{}
		end := 0
		for _, r := range c.Lines {
			for off := r[0]; off < r[1]; off += 2 {
				want[off] = r[2]
			}
			end = max(end, r[1])
		}
		for off := 0; off < c.CodeBytes; off += 2 {
			w, ok := want[off]
			if !ok {
				w = noLine
			}
			if got := decode(table, c.FirstLineno, off); got != w {
				t.Errorf("%s (3.%d) offset %d: line %d, co_lines() says %d", c.Name, d.Version[1], off, got, w)
			}
		}
		assert.Equal(t, c.FirstLineno, decode(table, c.FirstLineno, -2), "%s: before the first instruction", c.Name)
		assert.Equal(t, noLine, decode(table, c.FirstLineno, end), "%s: past the table", c.Name)
	}
}

// TestAddr2LineFixtures checks the decoders against committed dumps of
// real code objects (stacks_mod, textwrap, json.decoder), made by
// `python3.X testdata/python/stacks.py tables textwrap json.decoder` under
// pyenv's 3.10.13, 3.11.7, 3.12.1 and 3.13.0.
func TestAddr2LineFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "linetables-*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			m := fixtureName.FindStringSubmatch(filepath.Base(name))
			require.NotNil(t, m)
			f, err := os.Open(name)
			require.NoError(t, err)
			defer f.Close()
			d := readLinetableDump(t, f)
			require.Equal(t, m[1], strconv.Itoa(d.Version[1]))
			checkDump(t, d)
		})
	}
}

// TestAddr2LineLive does the same with the interpreters installed here,
// on a larger module (argparse).
func TestAddr2LineLive(t *testing.T) {
	ins := supportedInterpreters(t)
	if len(ins) == 0 {
		t.Skip("no CPython 3.10-3.14 installed")
	}
	for _, py := range ins {
		t.Run(py.name, func(t *testing.T) {
			out, err := exec.Command(py.python, scriptPath, "tables", "argparse", "json.decoder").Output()
			require.NoError(t, err)
			checkDump(t, readLinetableDump(t, bytes.NewReader(out)))
		})
	}
}

// TestAddr2LineEdges: hand-made tables for what real code rarely shows.
func TestAddr2LineEdges(t *testing.T) {
	tests := []struct {
		name    string
		decode  func([]byte, int, int) int
		table   []byte
		first   int
		offsets map[int]int // offset -> line
	}{
		{
			name: "3.10 pairs, zero-length ranges carry line deltas, -128 is no line",
			// [0,6) +1; (zero length) +3; [6,10) +0; [10,12) no line; [12,14) -2
			decode: addr2Line310, table: []byte{6, 1, 0, 3, 4, 0, 2, 0x80, 2, 0xfe}, first: 10,
			offsets: map[int]int{-2: 10, 0: 11, 4: 11, 6: 14, 8: 14, 10: noLine, 12: 12, 14: noLine},
		},
		{
			name:   "3.10 empty table",
			decode: addr2Line310, table: nil, first: 5,
			offsets: map[int]int{-2: 5, 0: noLine},
		},
		{
			name:   "3.11 short, one-line, no-columns, long and none forms",
			decode: addr2Line311, first: 100,
			table: []byte{
				0x80 | 0<<3 | 1, 0x05, // short form, 2 units: line 100
				0x80 | 11<<3, 1, 2, // one-line +1, 1 unit (length bits 0): 101
				0x80 | 13<<3 | 2, 0x03, // no columns, varint 3 = -1, 3 units: 100
				0x80 | 14<<3, 0x40 | 0x08, 0x01, 0, 1, 1, // long, varint 8+64=72 -> +36, 1 unit: 136
				0x80 | 15<<3 | 1,   // none, 2 units
				0x80 | 12<<3, 0, 0, // one-line +2, 1 unit: 138
			},
			offsets: map[int]int{-2: 100, 0: 100, 2: 100, 4: 101, 6: 100, 10: 100, 12: 136, 14: noLine, 16: noLine, 18: 138, 20: noLine},
		},
		{
			name:   "3.11 varint cut short by the end of the table",
			decode: addr2Line311, table: []byte{0x80 | 13<<3, 0x40 | 0x02}, first: 1,
			offsets: map[int]int{0: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for off, want := range tt.offsets {
				assert.Equal(t, want, tt.decode(tt.table, tt.first, off), "offset %d", off)
			}
		})
	}
}

// FuzzAddr2Line: any bytes, any offset: no panic (the Resolver decodes
// tables read from another process), and an offset before the code answers
// co_firstlineno.
func FuzzAddr2Line(f *testing.F) {
	f.Add([]byte{6, 1, 0, 3, 4, 0, 2, 0x80}, 10, 8)
	f.Add([]byte{0x80 | 14<<3, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f}, 1, 0)
	for _, name := range []string{"linetables-3.10.json", "linetables-3.12.json"} {
		if fh, err := os.Open(filepath.Join("testdata", name)); err == nil {
			d := readLinetableDump(f, fh)
			fh.Close()
			for _, c := range d.Code[:min(len(d.Code), 8)] {
				b, _ := hex.DecodeString(c.Linetable)
				f.Add(b, c.FirstLineno, c.CodeBytes/2)
			}
		}
	}
	f.Fuzz(func(t *testing.T, table []byte, first, offset int) {
		for _, decode := range []func([]byte, int, int) int{addr2Line310, addr2Line311} {
			line := decode(table, first, offset)
			if offset < 0 {
				assert.Equal(t, first, line)
			}
		}
	})
}
