package allocspec

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// TestReturns: hand-assembled functions whose return offsets are known.
func TestReturns(t *testing.T) {
	const base = 0x1000
	for _, tc := range []struct {
		name  string
		parts []Code
		want  []uint64
		err   error
	}{
		{"one ret", []Code{{base, []byte{
			0x55,             // 0 push %rbp
			0x48, 0x89, 0xe5, // 1 mov %rsp,%rbp
			0x48, 0x89, 0xf8, // 4 mov %rdi,%rax
			0x5d, // 7 pop %rbp
			0xc3, // 8 ret
		}}}, []uint64{base + 8}, nil},
		{"two rets around a branch", []Code{{base, []byte{
			0x48, 0x85, 0xff, // 0 test %rdi,%rdi
			0x74, 0x03, // 3 je 8
			0x31, 0xc0, // 5 xor %eax,%eax
			0xc3,             // 7 ret
			0x48, 0x89, 0xf8, // 8 mov %rdi,%rax
			0xc3, // b ret
		}}}, []uint64{base + 7, base + 0xb}, nil},
		{"endbr64 and rep ret", []Code{{base, []byte{
			0xf3, 0x0f, 0x1e, 0xfa, // 0 endbr64
			0x31, 0xc0, // 4 xor %eax,%eax
			0xf3, 0xc3, // 6 repz ret
		}}}, []uint64{base + 6}, nil},
		{"a jump to the next instruction", []Code{{base, []byte{0xeb, 0x00, 0xc3}}}, []uint64{base + 2}, nil},
		{"a cold part", []Code{
			{base, []byte{
				0x48, 0x85, 0xff, // 0 test %rdi,%rdi
				0x0f, 0x85, 0xf7, 0x0f, 0x00, 0x00, // 3 jne 0x2000 (next 0x1009 + 0xff7)
				0xc3, // 9 ret
			}},
			{0x2000, []byte{0x31, 0xc0, 0xc3}}, // xor %eax,%eax; ret
		}, []uint64{base + 9, 0x2002}, nil},
		{"the cold part not passed", []Code{{base, []byte{
			0x48, 0x85, 0xff, 0x0f, 0x85, 0xf7, 0x0f, 0x00, 0x00, 0xc3,
		}}}, nil, ErrTailCall},
		{"tail call", []Code{{base, []byte{
			0x48, 0x89, 0xf8, // mov %rdi,%rax
			0xe9, 0x00, 0x10, 0x00, 0x00, // jmp +0x1000
		}}}, nil, ErrTailCall},
		{"tail call after a ret", []Code{{base, []byte{
			0x48, 0x85, 0xff, 0x74, 0x01, 0xc3, // test; je +1; ret
			0xe9, 0x00, 0x10, 0x00, 0x00, // jmp +0x1000
		}}}, nil, ErrTailCall},
		{"indirect jump", []Code{{base, []byte{0xff, 0xe0, 0xc3}}}, nil, ErrIndirectJump}, // jmp *%rax
		{"undecodable", []Code{{base, []byte{0x06, 0xc3}}}, nil, ErrUndecodable},          // push %es: not in 64-bit mode
		{"no return", []Code{{base, []byte{0x0f, 0x0b}}}, nil, ErrNoReturn},               // ud2
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Returns(tc.parts...)
			if tc.err != nil {
				require.Error(t, err)
				assert.True(t, errors.Is(err, tc.err), "got %v, want %v", err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestReturnsCompiled: on functions the compiler built (testdata's fake
// allocators, C++ with exception cleanups), Returns finds exactly the ret
// instructions objdump shows.
func TestReturnsCompiled(t *testing.T) {
	if _, err := exec.LookPath("objdump"); err != nil {
		t.Skip("objdump (binutils) not installed")
	}
	for _, tc := range []struct{ lib, sym string }{
		{"libtensorflow_framework.so.2", "_ZN3tsl12BFCAllocator11AllocateRawEmmRKNS_20AllocationAttributesE"},
		{"libtensorflow_framework.so.2", "_ZN3tsl12BFCAllocator13DeallocateRawEPv"},
		{"librmm.so", "_ZN3rmm2mr6detail30stream_ordered_memory_resourceINS0_20pool_memory_resourceINS0_20cuda_memory_resourceEEENS1_20coalescing_free_listEE11do_allocateEmNS_16cuda_stream_viewE"},
		{"librmm.so", "_ZN3rmm2mr20cuda_memory_resource11do_allocateEmNS_16cuda_stream_viewE"},
		{"libtinypool.so", "tiny_alloc"},
		{"libtinypool.so", "tiny_alloc7"},
		{"libcudart.so.12", "cudaMalloc"},
	} {
		t.Run(tc.sym, func(t *testing.T) {
			path := probetest.Lib(t, tc.lib)
			f, err := elf.Open(path)
			require.NoError(t, err)
			defer f.Close()
			syms, err := f.Symbols()
			require.NoError(t, err)
			var sym *elf.Symbol
			for i := range syms {
				if syms[i].Name == tc.sym && syms[i].Value != 0 {
					sym = &syms[i]
				}
			}
			require.NotNil(t, sym, "symbol %s in %s", tc.sym, path)
			text := f.Section(".text")
			data, err := text.Data()
			require.NoError(t, err)
			code := data[sym.Value-text.Addr : sym.Value-text.Addr+sym.Size]
			got, err := Returns(Code{Addr: sym.Value, Bytes: code})
			require.NoError(t, err)
			assert.Equal(t, objdumpRets(t, path, sym.Value, sym.Value+sym.Size), got)
		})
	}
}

// objdumpRets lists the addresses of ret instructions objdump disassembles
// in [start, end).
func objdumpRets(t *testing.T, path string, start, end uint64) []uint64 {
	t.Helper()
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn",
		"--start-address="+strconv.FormatUint(start, 10), "--stop-address="+strconv.FormatUint(end, 10), path).Output()
	require.NoError(t, err)
	line := regexp.MustCompile(`^\s*([0-9a-f]+):\s+(?:repz |rep |bnd |notrack )?(ret|retq)\b`)
	var rets []uint64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := line.FindStringSubmatch(sc.Text()); m != nil {
			a, err := strconv.ParseUint(m[1], 16, 64)
			require.NoError(t, err)
			rets = append(rets, a)
		}
	}
	require.NotEmpty(t, rets, "objdump shows no ret in %s [%#x, %#x)", path, start, end)
	return rets
}

// TestExits: the returns and the jumps out of hand-assembled functions; a
// tail call is listed, not refused, and Returns still refuses it.
func TestExits(t *testing.T) {
	const base = 0x1000
	for _, tc := range []struct {
		name  string
		code  []byte
		rets  []uint64
		tails []Tail
		err   error
	}{
		{"a ret and a tail call", []byte{
			0x48, 0x85, 0xff, // 0 test %rdi,%rdi
			0x74, 0x01, // 3 je 6
			0xc3,                         // 5 ret
			0xe9, 0xf5, 0x0f, 0x00, 0x00, // 6 jmp 0x2000 (0x100b + 0xff5)
		}, []uint64{base + 5}, []Tail{{At: base + 6, Target: 0x2000}}, nil},
		{"only a tail call", []byte{
			0xeb, 0x10, // 0 jmp 0x1012, outside
		}, nil, []Tail{{At: base, Target: base + 0x12}}, nil},
		{"a conditional tail call", []byte{
			0x0f, 0x84, 0x00, 0x01, 0x00, 0x00, // 0 je 0x1106
			0xc3, // 6 ret
		}, []uint64{base + 6}, []Tail{{At: base, Target: base + 0x106}}, nil},
		{"indirect jump", []byte{
			0xff, 0xe0, // 0 jmp *%rax
			0xc3, // 2 ret
		}, nil, nil, ErrIndirectJump},
		{"neither", []byte{0x90, 0x90}, nil, nil, ErrNoReturn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rets, tails, err := Exits(Code{base, tc.code})
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.rets, rets)
			assert.Equal(t, tc.tails, tails)
			_, err = Returns(Code{base, tc.code})
			assert.ErrorIs(t, err, ErrTailCall, "Returns refuses a tail call")
		})
	}
}
