package usdt

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProbesMatchReadelf(t *testing.T) {
	a := mustBuild(t)
	for _, bin := range binaries {
		t.Run(bin, func(t *testing.T) {
			want := readelfNotes(t, a.path(bin))
			require.Len(t, want, 4, "readelf sees the four probes")
			got, _ := mustProbes(t, a.path(bin))
			require.Len(t, got, len(want))
			for i, w := range want {
				g := got[i]
				assert.Equal(t, w.provider, g.Provider, "note %d", i)
				assert.Equal(t, w.name, g.Name, "note %d", i)
				assert.Equal(t, w.pc, g.PC, "%s pc", g)
				assert.Equal(t, w.base, g.Base, "%s base", g)
				assert.Equal(t, w.semaphore, g.Semaphore, "%s semaphore", g)
				assert.Equal(t, w.args, g.ArgSpec, "%s args", g)
				raw := []string{}
				for _, arg := range g.Args {
					raw = append(raw, arg.Raw)
				}
				assert.Equal(t, strings.Fields(w.args), raw, "%s parsed args", g)
			}
		})
	}
}

func TestFileOffsets(t *testing.T) {
	a := mustBuild(t)
	for _, bin := range binaries {
		t.Run(bin, func(t *testing.T) {
			data, f := mustRead(t, a.path(bin))
			probes, byName := mustProbes(t, a.path(bin))
			for _, p := range probes {
				require.Less(t, p.Offset, uint64(len(data)), p.String())
				assert.Equal(t, byte(0x90), data[p.Offset], "%s: an SDT probe is a nop", p)
			}
			probesSec := f.Section(".probes")
			require.NotNil(t, probesSec, "the semaphore's section")
			for name, p := range byName {
				if name != "guarded" {
					assert.Zero(t, p.Semaphore, name)
					assert.Zero(t, p.SemaphoreOffset, name)
					continue
				}
				assert.Equal(t, probesSec.Addr, p.Semaphore, "the only semaphore opens .probes")
				assert.GreaterOrEqual(t, p.SemaphoreOffset, probesSec.Offset)
				assert.Less(t, p.SemaphoreOffset, probesSec.Offset+probesSec.Size)
				assert.Equal(t, []byte{0, 0}, data[p.SemaphoreOffset:p.SemaphoreOffset+2], "a semaphore starts at 0")
			}
		})
	}
}

// TestArgsOfCompiledProbes checks what the argument types imply whatever
// registers the compiler picked, and that the locations seen in real
// binaries cover every kind.
func TestArgsOfCompiledProbes(t *testing.T) {
	a := mustBuild(t)
	type shape struct {
		size   int
		signed bool
	}
	want := map[string][]shape{
		"alloc":   {{8, false}, {4, true}, {8, false}, {8, false}}, // void *, int, size_t, b->size
		"free":    {{8, false}, {4, true}, {4, true}},              // void *, -5, int counter
		"mark":    nil,
		"guarded": {{8, true}, {1, false}, {2, true}}, // long, unsigned char, short
	}
	kinds := map[Kind]bool{}
	for _, bin := range binaries {
		_, byName := mustProbes(t, a.path(bin))
		for name, shapes := range want {
			p, ok := byName[name]
			require.True(t, ok, "%s in %s", name, bin)
			require.Len(t, p.Args, len(shapes), "%s in %s", name, bin)
			for i, s := range shapes {
				arg := p.Args[i]
				assert.Equal(t, s, shape{arg.Size, arg.Signed}, "%s arg %d in %s: %s", name, i, bin, arg.Raw)
				kinds[arg.Kind] = true
				if arg.Kind == KindReg || arg.Kind == KindMem {
					assert.NotEmpty(t, arg.Reg.Name, arg.Raw)
				}
			}
			if name == "free" {
				neg := p.Args[1]
				assert.Equal(t, KindConst, neg.Kind, bin)
				assert.Equal(t, int64(-5), neg.Value, bin)
			}
		}
	}
	// Registers (-O2), stack slots (-O0), the constant, and the global
	// passed as counter(%rip) in the executables.
	for _, k := range []Kind{KindReg, KindConst, KindMem, KindUnsupported} {
		assert.True(t, kinds[k], "some compiled argument is %v", k)
	}
}

// TestPrelinkShift moves the notes' addresses as prelink would leave them:
// the file relocated by delta, the notes still saying where things were.
// The offsets must not change.
func TestPrelinkShift(t *testing.T) {
	a := mustBuild(t)
	path := a.path("libsdt.so")
	_, before := mustProbes(t, path)
	data, f := mustRead(t, path)
	const delta = 0x10000
	for _, n := range mustRawNotes(t, data, f) {
		for i := range 3 {
			at := n.desc + 8*i
			v := f.ByteOrder.Uint64(data[at:])
			if v != 0 {
				f.ByteOrder.PutUint64(data[at:], v-delta)
			}
		}
	}
	after, err := probesOf(t, data)
	require.NoError(t, err)
	for _, p := range after {
		b := before[p.Name]
		assert.Equal(t, b.PC-delta, p.PC, "the note's pc is reported as written")
		assert.Equal(t, b.Base-delta, p.Base)
		assert.Equal(t, b.Offset, p.Offset, "%s: offset follows .stapsdt.base", p)
		assert.Equal(t, b.SemaphoreOffset, p.SemaphoreOffset, "%s: semaphore follows .stapsdt.base", p)
	}
}

func TestMalformedNotes(t *testing.T) {
	a := mustBuild(t)
	data, f := mustRead(t, a.path("libsdt.so"))
	notes := mustRawNotes(t, data, f)
	require.Len(t, notes, 4)
	order := f.ByteOrder
	tests := []struct {
		name  string
		patch func(b []byte)
		note  string
		is    error
	}{
		{"desc overruns the section", func(b []byte) {
			order.PutUint32(b[notes[2].header+4:], 1<<20)
		}, "note 2:", ErrMalformedNote},
		{"name overruns the section", func(b []byte) {
			order.PutUint32(b[notes[3].header:], 0xffffffff)
		}, "note 3:", ErrMalformedNote},
		{"desc too short for the addresses", func(b []byte) {
			order.PutUint32(b[notes[1].header+4:], 20)
		}, "note 1:", ErrMalformedNote},
		{"strings not terminated", func(b []byte) {
			n := notes[0]
			for i := n.desc + 24; i < n.desc+n.descsz; i++ {
				if b[i] == 0 {
					b[i] = 'x'
				}
			}
		}, "note 0:", ErrMalformedNote},
		{"empty provider", func(b []byte) {
			b[notes[1].desc+24] = 0
		}, "note 1:", ErrMalformedNote},
		{"pc outside the loadable segments", func(b []byte) {
			order.PutUint64(b[notes[3].desc:], 1<<40)
		}, "note 3 (vramtest:guarded)", ErrNotLoaded},
		{"semaphore outside the loadable segments", func(b []byte) {
			order.PutUint64(b[notes[3].desc+16:], 1<<40)
		}, "note 3 (vramtest:guarded): semaphore", ErrNotLoaded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := bytes.Clone(data)
			tt.patch(b)
			_, err := probesOf(t, b)
			require.ErrorIs(t, err, tt.is)
			assert.Contains(t, err.Error(), tt.note)
		})
	}
}

func TestOtherNotesSkipped(t *testing.T) {
	order := binary.LittleEndian
	note := func(owner string, typ uint32, desc []byte) []byte {
		var b []byte
		name := append([]byte(owner), 0)
		b = order.AppendUint32(b, uint32(len(name)))
		b = order.AppendUint32(b, uint32(len(desc)))
		b = order.AppendUint32(b, typ)
		b = append(b, name...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		b = append(b, desc...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	desc := order.AppendUint64(nil, 0x1000)
	desc = order.AppendUint64(desc, 0x2000)
	desc = order.AppendUint64(desc, 0)
	desc = append(desc, "prov\x00nm\x00-4@%eax\x00"...)
	var sec []byte
	sec = append(sec, note("GNU", 3, []byte{1, 2, 3, 4})...)
	sec = append(sec, note("stapsdt", 2, []byte{0})...)
	sec = append(sec, note("stapsdt", 3, desc)...)
	got, err := parseNotes(sec, order, 8)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, 2, got[0].index, "indexes count every note")
	assert.Equal(t, Probe{Provider: "prov", Name: "nm", PC: 0x1000, Base: 0x2000, ArgSpec: "-4@%eax"}, got[0].probe)

	// 32-bit notes carry 4-byte addresses.
	desc32 := order.AppendUint32(nil, 0x1000)
	desc32 = order.AppendUint32(desc32, 0x2000)
	desc32 = order.AppendUint32(desc32, 0x3000)
	desc32 = append(desc32, "p\x00n\x00\x00"...)
	got, err = parseNotes(note("stapsdt", 3, desc32), order, 4)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, Probe{Provider: "p", Name: "n", PC: 0x1000, Base: 0x2000, Semaphore: 0x3000}, got[0].probe)

	_, err = parseNotes(sec[:len(sec)-40], order, 8)
	assert.ErrorIs(t, err, ErrMalformedNote, "cut in the middle of a note")
	_, err = parseNotes(sec[:5], order, 8)
	assert.ErrorIs(t, err, ErrMalformedNote, "cut in a header")
}

func TestNoNotes(t *testing.T) {
	// A Go binary has no SDT probes.
	exe, err := os.Executable()
	require.NoError(t, err)
	_, err = Open(exe)
	require.ErrorIs(t, err, ErrNoNotes)
	assert.Contains(t, err.Error(), exe)

	_, err = Open("testdata/sdtprobes.c")
	var fe *elf.FormatError
	assert.True(t, errors.As(err, &fe), "not ELF: %v", err)
	_, err = Open("testdata/missing")
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// FuzzNotes feeds arbitrary section contents to the note parser: errors
// are fine, panics are not.
func FuzzNotes(f *testing.F) {
	order := binary.LittleEndian
	seed := order.AppendUint32(nil, 8)
	seed = order.AppendUint32(seed, 30)
	seed = order.AppendUint32(seed, 3)
	seed = append(seed, "stapsdt\x00"...)
	seed = append(seed, make([]byte, 24)...)
	seed = append(seed, "a\x00b\x00\x00\x00"...)
	f.Add(seed, true)
	f.Add(seed[:20], false)
	f.Fuzz(func(t *testing.T, data []byte, wide bool) {
		size := 4
		if wide {
			size = 8
		}
		notes, err := parseNotes(data, order, size)
		if err != nil {
			return
		}
		for _, n := range notes {
			_, _ = ParseArgs(n.probe.ArgSpec)
		}
	})
}
