package usdt

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reg is a register operand as the table expects it.
func reg(name string, width int) Reg {
	return Reg{Name: name, Offset: ptRegOffset(name), Width: width}
}

func TestParseArg(t *testing.T) {
	high := reg("ax", 1)
	high.High = true
	tests := []struct {
		name string
		spec string
		want Arg // Raw is filled in from spec
		bad  bool
	}{
		{"64-bit register", "8@%rax", Arg{Size: 8, Kind: KindReg, Reg: reg("ax", 8)}, false},
		{"signed 32-bit register", "-4@%ebx", Arg{Size: 4, Signed: true, Kind: KindReg, Reg: reg("bx", 4)}, false},
		{"low byte", "1@%al", Arg{Size: 1, Kind: KindReg, Reg: reg("ax", 1)}, false},
		{"high byte", "1@%ah", Arg{Size: 1, Kind: KindReg, Reg: high}, false},
		{"16-bit", "-2@%dx", Arg{Size: 2, Signed: true, Kind: KindReg, Reg: reg("dx", 2)}, false},
		{"sil", "1@%sil", Arg{Size: 1, Kind: KindReg, Reg: reg("si", 1)}, false},
		{"r8d", "4@%r8d", Arg{Size: 4, Kind: KindReg, Reg: reg("r8", 4)}, false},
		{"r11", "8@%r11", Arg{Size: 8, Kind: KindReg, Reg: reg("r11", 8)}, false},
		{"r15b", "1@%r15b", Arg{Size: 1, Kind: KindReg, Reg: reg("r15", 1)}, false},
		{"stack pointer", "8@%rsp", Arg{Size: 8, Kind: KindReg, Reg: reg("sp", 8)}, false},
		{"stack slot", "2@-2(%rbp)", Arg{Size: 2, Kind: KindMem, Reg: reg("bp", 8), Offset: -2}, false},
		{"struct field", "8@8(%r12)", Arg{Size: 8, Kind: KindMem, Reg: reg("r12", 8), Offset: 8}, false},
		{"no displacement", "8@(%rdi)", Arg{Size: 8, Kind: KindMem, Reg: reg("di", 8)}, false},
		{"hex displacement", "-4@0x10(%rsp)", Arg{Size: 4, Signed: true, Kind: KindMem, Reg: reg("sp", 8), Offset: 16}, false},
		{"negative hex displacement", "4@-0x10(%rbp)", Arg{Size: 4, Kind: KindMem, Reg: reg("bp", 8), Offset: -16}, false},
		{"constant", "8@$42", Arg{Size: 8, Kind: KindConst, Value: 42}, false},
		{"negative constant", "-8@$-1", Arg{Size: 8, Signed: true, Kind: KindConst, Value: -1}, false},
		{"hex constant", "4@$0x10", Arg{Size: 4, Kind: KindConst, Value: 16}, false},
		{"unsigned 64-bit constant", "8@$0xffffffffffffffff", Arg{Size: 8, Kind: KindConst, Value: -1}, false},

		// Well-formed, not evaluated.
		{"displacement expression", "8@16+8(%rsp)", Arg{Size: 8, Reg: reg("sp", 8)}, false},
		{"rip-relative symbol", "-4@counter(%rip)", Arg{Size: 4, Signed: true, Reg: reg("ip", 8)}, false},
		{"rip-relative symbol plus offset", "4@counter+4(%rip)", Arg{Size: 4, Reg: reg("ip", 8)}, false},
		{"rip-relative number", "8@8(%rip)", Arg{Size: 8, Reg: reg("ip", 8)}, false},
		{"segment", "8@%fs:0x28", Arg{Size: 8}, false},
		{"segment with base", "8@%fs:8(%rax)", Arg{Size: 8}, false},
		{"indexed", "4@(%rax,%rbx,4)", Arg{Size: 4, Reg: reg("ax", 8)}, false},
		{"index without base", "4@8(,%rbx,4)", Arg{Size: 4}, false},
		{"symbol constant", "8@$table", Arg{Size: 8}, false},
		{"absolute symbol", "4@counter", Arg{Size: 4}, false},
		{"absolute address", "4@0x601040", Arg{Size: 4}, false},
		{"32-bit base", "4@8(%eax)", Arg{Size: 4, Reg: reg("ax", 4)}, false},

		// Malformed.
		{"empty location", "8@", Arg{Size: 8}, true},
		{"empty size", "@%rax", Arg{}, true},
		{"size 3", "3@%rax", Arg{}, true},
		{"size 16", "16@%rax", Arg{}, true},
		{"size 0", "0@%rax", Arg{}, true},
		{"unknown register", "8@%xyz", Arg{Size: 8}, true},
		{"no size", "%rax", Arg{}, true},
		{"empty", "", Arg{}, true},
		{"dangling $", "8@$", Arg{Size: 8}, true},
		{"bad constant", "8@$1x", Arg{Size: 8}, true},
		{"unknown base", "8@8(%xyz)", Arg{Size: 8}, true},
		{"base not a register", "8@8(rax)", Arg{Size: 8}, true},
		{"unclosed", "8@8(%rax", Arg{Size: 8}, true},
		{"trailing junk", "8@16+8(%rsp)?", Arg{Size: 8}, true},
		{"nested", "8@((%rax))", Arg{Size: 8}, true},
		{"no base", "8@8()", Arg{Size: 8}, true},
		{"bad displacement", "8@8?(%rax)", Arg{Size: 8}, true},
		{"bad segment", "8@%zz:8", Arg{Size: 8}, true},
		{"register with junk", "8@%rax)", Arg{Size: 8}, true},
		{"underscore number", "8@$1_000", Arg{Size: 8}, true},
		{"upper case", "8@%RAX", Arg{Size: 8}, true},
		{"size overflow", "99999999999999999999@%rax", Arg{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseArg(tt.spec)
			tt.want.Raw = tt.spec
			if tt.bad {
				require.ErrorIs(t, err, ErrArgSpec)
				assert.Contains(t, err.Error(), strconv.Quote(tt.spec))
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseArgs(t *testing.T) {
	args, err := ParseArgs("8@%rax  -4@%ebx 3@%rax 2@-2(%rbp)")
	require.ErrorIs(t, err, ErrArgSpec)
	assert.Contains(t, err.Error(), "argument 2:")
	require.Len(t, args, 4, "a bad spec still holds its place")
	assert.Equal(t, []Kind{KindReg, KindReg, KindUnsupported, KindMem},
		[]Kind{args[0].Kind, args[1].Kind, args[2].Kind, args[3].Kind})
	assert.Equal(t, "3@%rax", args[2].Raw)

	args, err = ParseArgs("")
	assert.NoError(t, err)
	assert.Empty(t, args)
	args, err = ParseArgs(" 8@$1\t")
	assert.NoError(t, err)
	assert.Len(t, args, 1)
}

// TestRegisterTable checks every name against the 21 pt_regs fields: each
// field reachable by its 64-bit name, sub-registers sharing their field.
func TestRegisterTable(t *testing.T) {
	assert.Equal(t, 168, PtRegsSize)
	for name, r := range registers {
		assert.Equal(t, ptRegOffset(r.Name), r.Offset, name)
		assert.Contains(t, []int{1, 2, 4, 8}, r.Width, name)
		assert.Less(t, r.ReadOffset(), PtRegsSize, name)
	}
	for _, tt := range []struct {
		names []string
		field string
	}{
		{[]string{"rax", "eax", "ax", "al", "ah"}, "ax"},
		{[]string{"rbx", "ebx", "bx", "bl", "bh"}, "bx"},
		{[]string{"rcx", "ecx", "cx", "cl", "ch"}, "cx"},
		{[]string{"rdx", "edx", "dx", "dl", "dh"}, "dx"},
		{[]string{"rsi", "esi", "si", "sil"}, "si"},
		{[]string{"rdi", "edi", "di", "dil"}, "di"},
		{[]string{"rbp", "ebp", "bp", "bpl"}, "bp"},
		{[]string{"rsp", "esp", "sp", "spl"}, "sp"},
		{[]string{"r8", "r8d", "r8w", "r8b"}, "r8"},
		{[]string{"r9", "r9d", "r9w", "r9b"}, "r9"},
		{[]string{"r10", "r10d", "r10w", "r10b"}, "r10"},
		{[]string{"r11", "r11d", "r11w", "r11b"}, "r11"},
		{[]string{"r12", "r12d", "r12w", "r12b"}, "r12"},
		{[]string{"r13", "r13d", "r13w", "r13b"}, "r13"},
		{[]string{"r14", "r14d", "r14w", "r14b"}, "r14"},
		{[]string{"r15", "r15d", "r15w", "r15b"}, "r15"},
		{[]string{"rip", "eip"}, "ip"},
	} {
		for _, n := range tt.names {
			r, ok := LookupReg("%" + n)
			if assert.True(t, ok, n) {
				assert.Equal(t, tt.field, r.Name, n)
			}
		}
	}
	r, _ := LookupReg("ch")
	assert.Equal(t, 89, r.ReadOffset(), "%ch is the second byte of cx")
}

// TestPtRegsOffsets checks the pt_regs table against the C compiler:
// glibc's struct user_regs_struct (what ptrace returns) has the kernel's
// pt_regs layout for its first 21 fields, under the old r-prefixed names.
func TestPtRegsOffsets(t *testing.T) {
	needTools(t, "gcc")
	cNames := map[string]string{
		"bp": "rbp", "bx": "rbx", "ax": "rax", "cx": "rcx", "dx": "rdx", "si": "rsi", "di": "rdi",
		"orig_ax": "orig_rax", "ip": "rip", "flags": "eflags", "sp": "rsp",
	}
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include <sys/user.h>\nint main(void) {\n")
	for _, f := range ptRegs {
		c := f
		if n, ok := cNames[f]; ok {
			c = n
		}
		src.WriteString("\tprintf(\"" + f + " %zu\\n\", offsetof(struct user_regs_struct, " + c + "));\n")
	}
	src.WriteString("\treturn 0;\n}\n")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "regs.c"), []byte(src.String()), 0o644))
	out, err := exec.Command("gcc", "-o", filepath.Join(dir, "regs"), filepath.Join(dir, "regs.c")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(filepath.Join(dir, "regs")).Output()
	require.NoError(t, err)
	sc := bufio.NewScanner(bytes.NewReader(out))
	n := 0
	for sc.Scan() {
		var field string
		var off int
		f := strings.Fields(sc.Text())
		require.Len(t, f, 2)
		field = f[0]
		off, err = strconv.Atoi(f[1])
		require.NoError(t, err)
		assert.Equal(t, off, ptRegOffset(field), field)
		n++
	}
	assert.Equal(t, len(ptRegs), n)
}

func TestEncodeLayout(t *testing.T) {
	tests := []struct {
		spec string
		want uint64
	}{
		// kind | size<<4 | signed<<8 | reg<<16 | uint32(word)<<32
		{"8@%rax", 1 | 8<<4 | 80<<16},
		{"-4@%ebx", 1 | 4<<4 | 1<<8 | 40<<16},
		{"1@%ah", 1 | 1<<4 | 81<<16},
		{"8@%eax", 1 | 4<<4 | 80<<16}, // never reads past the named register
		{"2@-2(%rbp)", 3 | 2<<4 | 32<<16 | 0xfffffffe<<32},
		{"8@8(%r12)", 3 | 8<<4 | 24<<16 | 8<<32},
		{"8@(%rdi)", 3 | 8<<4 | 112<<16},
		{"8@$42", 2 | 8<<4 | 42<<32},
		{"-8@$-1", 2 | 8<<4 | 1<<8 | 0xffffffff<<32},
		{"8@$0x100000000", 0}, // out of int32
		{"8@0x80000000(%rax)", 0},
		{"-4@counter(%rip)", 0},
		{"8@%fs:0x28", 0},
		{"3@%rax", 0},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			a, _ := ParseArg(tt.spec)
			assert.Equal(t, tt.want, a.Encode(), "%#x", a.Encode())
		})
	}
	assert.Zero(t, Arg{}.Encode(), "the zero Arg is unsupported")
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, spec := range strings.Fields("8@%rax -4@%ebx 1@%al 1@%dh 2@-2(%rbp) 8@$42 -8@$-1 8@(%rdi) " +
		"4@%r8d 8@%r11 -4@$-2147483648 4@$2147483647 8@-2147483648(%rsp) 8@2147483647(%r15) -2@%r9w") {
		t.Run(spec, func(t *testing.T) {
			a, err := ParseArg(spec)
			require.NoError(t, err)
			d := Decode(a.Encode())
			assert.Equal(t, a.Kind, d.Kind)
			assert.Equal(t, min(a.Size, cmpWidth(a)), d.Size)
			assert.Equal(t, a.Signed, d.Signed)
			assert.Equal(t, a.Offset, d.Offset)
			assert.Equal(t, a.Value, d.Value)
			assert.Equal(t, a.Reg.Name, d.Reg.Name)
			assert.Equal(t, a.Reg.Offset, d.Reg.Offset)
			assert.Equal(t, a.Reg.High, d.Reg.High)
		})
	}
}

// cmpWidth is the register width bounding an encoded size.
func cmpWidth(a Arg) int {
	if a.Kind == KindReg {
		return a.Reg.Width
	}
	return math.MaxInt
}

// FuzzArgSpec: any string parses to an Arg per field or an error, never a
// panic, and what parses encodes into something Decode reads back.
func FuzzArgSpec(f *testing.F) {
	for _, s := range []string{
		"8@%rax -4@%ebx 1@%al 2@-2(%rbp) 8@$42 -8@$-1 8@(%rdi) 4@%r8d 8@%r11 8@16+8(%rsp)?",
		"8@", "@%rax", "3@%rax", "8@%xyz", "-4@counter(%rip)", "8@%fs:(%rax)", "4@(%rax,%rbx,4)",
		"8@$", "8@(", "8@)", "8@-(%rax)", "8@+-1(%rax)", "8@$0x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		args, err := ParseArgs(spec)
		if err == nil && len(args) != len(strings.Fields(spec)) {
			t.Fatalf("%q: %d args for %d fields", spec, len(args), len(strings.Fields(spec)))
		}
		for _, a := range args {
			v := a.Encode()
			d := Decode(v)
			if v != 0 && (d.Kind != a.Kind || d.Signed != a.Signed) {
				t.Fatalf("%q: decoded %+v from %+v", a.Raw, d, a)
			}
			if a.Kind != KindUnsupported && (a.Size == 0 || a.Raw == "") {
				t.Fatalf("%q: supported arg without size or text: %+v", spec, a)
			}
		}
	})
}
