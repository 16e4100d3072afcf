package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustOpen(tb testing.TB, path string) *File {
	tb.Helper()
	f, err := OpenFile(path)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = f.Close() })
	return f
}

func TestLookup(t *testing.T) {
	a := mustBuild(t)
	libSyms := readelfSymbols(t, a.path("libfoo.so"))
	nopieSyms := readelfSymbols(t, a.path("prog-nopie"))
	tests := []struct {
		name    string
		file    string
		lookup  string
		found   bool
		value   uint64
		version string
		hidden  bool
		size0   bool
	}{
		{"bare name finds default version", "libfoo.so", "foo", true, libSyms["foo@@LIBFOO_1.0"], "LIBFOO_1.0", false, false},
		{"default version by name", "libfoo.so", "foo@@LIBFOO_1.0", true, libSyms["foo@@LIBFOO_1.0"], "LIBFOO_1.0", false, false},
		{"old version by name", "libfoo.so", "foo@LIBFOO_0.9", true, libSyms["foo@LIBFOO_0.9"], "LIBFOO_0.9", true, false},
		{"unknown version", "libfoo.so", "foo@LIBFOO_7", false, 0, "", false, false},
		{"local symbol", "libfoo.so", "foo_old", true, libSyms["foo_old"], "", false, false},
		{"size zero", "libfoo.so", "bare", true, libSyms["bare"], "LIBFOO_1.0", false, true},
		{"missing", "libfoo.so", "cudaMalloc", false, 0, "", false, false},
		{"import is not a definition", "prog-pie", "foo", false, 0, "", false, false},
		{"non-PIE executable", "prog-nopie", "leaf", true, nopieSyms["leaf"], "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := mustOpen(t, a.path(tt.file))
			s, ok := f.Lookup(tt.lookup)
			require.Equal(t, tt.found, ok)
			if !ok {
				return
			}
			require.NotZero(t, tt.value, "readelf saw the symbol")
			assert.Equal(t, tt.value, s.Value)
			assert.Equal(t, tt.version, s.Version)
			assert.Equal(t, tt.hidden, s.Hidden)
			assert.Equal(t, tt.size0, s.Size == 0)
			assert.True(t, s.Func)
		})
	}
}

// TestSymbolsNoDuplicates: foo is in .symtab and, versioned, in .dynsym; it
// must come back once per version, not once per table.
func TestSymbolsNoDuplicates(t *testing.T) {
	f := mustOpen(t, mustBuild(t).path("libfoo.so"))
	foos := f.Symbols(func(name string) bool { return name == "foo" })
	require.Len(t, foos, 2)
	assert.Equal(t, "LIBFOO_1.0", foos[0].Version, "default version first")
	assert.Equal(t, "LIBFOO_0.9", foos[1].Version)
	names := map[string]int{}
	for _, s := range f.Symbols(nil) {
		names[s.Name+"@"+s.Version]++
	}
	for name, n := range names {
		assert.Equal(t, 1, n, name)
	}
}

func TestBuildID(t *testing.T) {
	a := mustBuild(t)
	for _, name := range []string{"libfoo.so", "prog-pie", "prog-nopie", "libwidget.so"} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, readelfBuildID(t, a.path(name)), mustOpen(t, a.path(name)).BuildID())
		})
	}
}

func TestDemangle(t *testing.T) {
	f := mustOpen(t, mustBuild(t).path("libwidget.so"))
	tests := []struct {
		name     string
		contains string
		want     string
		marker   string
	}{
		{"method", "Widget4grow", "ns::Widget::grow", "LINE_GROW"},
		{"template", "5twice", "ns::twice", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			syms := f.Symbols(func(n string) bool { return strings.Contains(n, tt.contains) })
			require.Len(t, syms, 1)
			assert.True(t, strings.HasPrefix(syms[0].Name, "_Z"), "linker names stay mangled")
			got, ok := f.FunctionAt(syms[0].Value)
			require.True(t, ok)
			assert.Equal(t, tt.want, got)
			if tt.marker != "" {
				file, line, ok := f.LineAt(syms[0].Value)
				require.True(t, ok)
				assert.Equal(t, "widget.cc", filepath.Base(file))
				assert.Equal(t, markerLine(t, "widget.cc", tt.marker), line)
			}
		})
	}
	assert.Equal(t, "cudaMalloc", Demangle("cudaMalloc"), "C names unchanged")
}

func TestAddressLookups(t *testing.T) {
	a := mustBuild(t)
	f := mustOpen(t, a.path("libfoo.so"))
	foo, ok := f.Lookup("foo")
	require.True(t, ok)
	bare, ok := f.Lookup("bare")
	require.True(t, ok)

	tests := []struct {
		name  string
		vaddr uint64
		want  string
	}{
		{"entry", foo.Value, "foo"},
		{"inside", foo.Value + foo.Size - 1, "foo"},
		{"size zero extends to the next function", bare.Value, "bare"},
		{"before any function", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := f.FunctionAt(tt.vaddr)
			assert.Equal(t, tt.want, got)
		})
	}

	file, line, ok := f.LineAt(foo.Value)
	require.True(t, ok)
	assert.Equal(t, "libfoo.c", filepath.Base(file))
	assert.Equal(t, markerLine(t, "libfoo.c", "LINE_FOO"), line)
	assert.NoError(t, f.LinesErr())
}

// TestFileOffset checks the attach-side conversion against the section
// headers, an independent view of the same layout.
func TestFileOffset(t *testing.T) {
	a := mustBuild(t)
	for _, tt := range []struct{ file, sym string }{{"libfoo.so", "foo"}, {"prog-nopie", "leaf"}, {"prog-pie", "caller"}} {
		t.Run(tt.file, func(t *testing.T) {
			f := mustOpen(t, a.path(tt.file))
			s, ok := f.Lookup(tt.sym)
			require.True(t, ok)
			ef, err := elf.Open(a.path(tt.file))
			require.NoError(t, err)
			defer ef.Close()
			text := ef.Section(".text")
			require.NotNil(t, text)
			off, err := f.FileOffset(s.Value)
			require.NoError(t, err)
			assert.Equal(t, s.Value-text.Addr+text.Offset, off)
		})
	}
	f := mustOpen(t, a.path("libfoo.so"))
	_, err := f.FileOffset(1 << 60)
	assert.ErrorIs(t, err, ErrNotLoaded)
}

// TestReadVirtual reads a function's first bytes by its link-time address
// and checks them against .text read through the section headers.
func TestReadVirtual(t *testing.T) {
	a := mustBuild(t)
	for _, tt := range []struct{ file, sym string }{{"libfoo.so", "foo"}, {"prog-nopie", "leaf"}, {"prog-pie", "caller"}} {
		t.Run(tt.file, func(t *testing.T) {
			f := mustOpen(t, a.path(tt.file))
			s, ok := f.Lookup(tt.sym)
			require.True(t, ok)
			require.NotZero(t, s.Size)
			ef, err := elf.Open(a.path(tt.file))
			require.NoError(t, err)
			defer ef.Close()
			text := ef.Section(".text")
			require.NotNil(t, text)
			data, err := text.Data()
			require.NoError(t, err)
			got, err := f.ReadVirtual(s.Value, s.Size)
			require.NoError(t, err)
			assert.Equal(t, data[s.Value-text.Addr:s.Value-text.Addr+s.Size], got)
		})
	}
	f := mustOpen(t, a.path("libfoo.so"))
	_, err := f.ReadVirtual(1<<60, 4)
	assert.ErrorIs(t, err, ErrNotLoaded)
}

// TestLoadBias finds where running programs mapped a library: the bias
// from their first mapping of it, added to foo's link-time address, must
// be the address of foo they print. A fixed-address executable's bias is 0.
func TestLoadBias(t *testing.T) {
	a := mustBuild(t)
	lib := mustOpen(t, a.path("libfoo.so"))
	foo, ok := lib.Lookup("foo")
	require.True(t, ok)
	for _, prog := range []string{"prog-pie", "prog-nopie"} {
		t.Run(prog, func(t *testing.T) {
			tg := mustStart(t, a.path(prog))
			maps, err := ReadMaps(int(tg.pid))
			require.NoError(t, err)
			exe := mustOpen(t, a.path(prog))
			leaf, ok := exe.Lookup("leaf")
			require.True(t, ok)
			var libBias, exeBias uint64
			var libSeen, exeSeen bool
			for i := range maps {
				m := &maps[i]
				switch {
				case m.Path == a.path("libfoo.so") && !libSeen:
					libBias, libSeen = lib.LoadBias(m)
					require.True(t, libSeen)
				case m.Path == a.path(prog) && !exeSeen:
					exeBias, exeSeen = exe.LoadBias(m)
					require.True(t, exeSeen)
				}
			}
			require.True(t, libSeen && exeSeen, "both files mapped")
			assert.Equal(t, tg.foo, foo.Value+libBias)
			assert.Equal(t, tg.leaf, leaf.Value+exeBias)
			if prog == "prog-nopie" {
				assert.Zero(t, exeBias)
			}
		})
	}
	_, ok = lib.LoadBias(&MapEntry{Start: 0x7f0000000000, End: 0x7f0000001000, Offset: 1 << 40})
	assert.False(t, ok, "an offset past every segment")
}

func TestOpenFileErrors(t *testing.T) {
	_, err := OpenFile(filepath.Join("testdata", "prog.c"))
	assert.ErrorIs(t, err, ErrNotELF)
	_, err = OpenFile(filepath.Join(t.TempDir(), "missing.so"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestFindNote(t *testing.T) {
	le := binary.LittleEndian
	assert.Nil(t, findNote([]byte{1, 2, 3}, le, "GNU", 3), "short")
	bad := []byte{0xff, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 'G', 'N', 'U', 0}
	assert.Nil(t, findNote(bad, le, "GNU", 3), "name size past the end")
	good := []byte{4, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 'G', 'N', 'U', 0, 0xab, 0xcd, 0, 0}
	assert.Equal(t, []byte{0xab, 0xcd}, findNote(good, le, "GNU", 3))
}
