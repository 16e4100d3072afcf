package usdt

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrArgSpec means an argument spec is malformed: no SIZE@ prefix, a size
// other than ±1, 2, 4, 8, an empty location, an unknown register, or a
// number that does not parse. Well-formed locations this package does not
// evaluate are not errors: they parse to an Arg of KindUnsupported.
var ErrArgSpec = errors.New("malformed USDT argument spec")

// Kind says where an argument's value is found at the probe.
type Kind uint8

// Argument kinds. The zero Kind is KindUnsupported, so a zero Arg is never
// mistaken for a readable one.
const (
	// KindUnsupported is a location the BPF side cannot evaluate: a
	// %rip-relative or symbolic operand, a segment override, an indexed
	// address, a displacement expression, or a spec that did not parse.
	KindUnsupported Kind = iota
	// KindReg is the value of a register ("%rax", "%ebp", "%sil").
	KindReg
	// KindConst is an immediate ("$-5").
	KindConst
	// KindMem is Size bytes of user memory at register + Offset
	// ("8(%r12)", "-16(%rbp)", "(%rdi)").
	KindMem
)

func (k Kind) String() string {
	switch k {
	case KindUnsupported:
		return "unsupported"
	case KindReg:
		return "reg"
	case KindConst:
		return "const"
	case KindMem:
		return "mem"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Reg is a field of the kernel's x86-64 struct pt_regs, the register file a
// uprobe program sees, together with the part of it an operand names.
type Reg struct {
	// Name is the pt_regs field: "ax" for %rax, %eax, %ax, %al and %ah.
	Name string
	// Offset is the field's byte offset in struct pt_regs.
	Offset int
	// Width is the bytes of the register as named in the operand: 8 for
	// %rax, 4 for %eax, 2 for %ax, 1 for %al and %ah; 0 when unknown (an
	// Arg returned by Decode).
	Width int
	// High marks %ah, %bh, %ch and %dh: bits 8 to 15 of the field.
	High bool
}

// ReadOffset is the byte offset in struct pt_regs where the operand's value
// starts: Offset, plus one for a high-byte register (x86 is little-endian,
// so bits 8 to 15 are the field's second byte).
func (r Reg) ReadOffset() int {
	if r.High {
		return r.Offset + 1
	}
	return r.Offset
}

// ptRegs lists the fields of struct pt_regs on x86-64 in memory order, each
// an unsigned long, so field i is at byte 8*i. Source: the Linux kernel,
// arch/x86/include/asm/ptrace.h (struct pt_regs, CONFIG_X86_64 branch),
// stable since 4.14 when the fields lost their r-prefix; the first 21
// fields of glibc's struct user_regs_struct (<sys/user.h>) share the
// layout, and the tests check the offsets against it.
var ptRegs = [...]string{
	"r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8",
	"ax", "cx", "dx", "si", "di", "orig_ax", "ip", "cs", "flags", "sp", "ss",
}

// PtRegsSize is the size in bytes of the x86-64 struct pt_regs.
const PtRegsSize = 8 * len(ptRegs)

// ptRegOffset returns the byte offset of a pt_regs field.
func ptRegOffset(field string) int {
	for i, f := range ptRegs {
		if f == field {
			return 8 * i
		}
	}
	panic("usdt: no pt_regs field " + field) // only called with table names
}

// registers maps every x86-64 general-purpose register name GNU as accepts,
// without the %, to its pt_regs field and width.
var registers = func() map[string]Reg {
	m := make(map[string]Reg)
	add := func(name, field string, width int, high bool) {
		m[name] = Reg{Name: field, Offset: ptRegOffset(field), Width: width, High: high}
	}
	// The legacy eight: 64, 32, 16 and 8 bits (low byte, and the high byte
	// for the first four).
	for _, r := range []struct{ field, r64, r32, r16, r8, r8h string }{
		{"ax", "rax", "eax", "ax", "al", "ah"},
		{"bx", "rbx", "ebx", "bx", "bl", "bh"},
		{"cx", "rcx", "ecx", "cx", "cl", "ch"},
		{"dx", "rdx", "edx", "dx", "dl", "dh"},
		{"si", "rsi", "esi", "si", "sil", ""},
		{"di", "rdi", "edi", "di", "dil", ""},
		{"bp", "rbp", "ebp", "bp", "bpl", ""},
		{"sp", "rsp", "esp", "sp", "spl", ""},
	} {
		add(r.r64, r.field, 8, false)
		add(r.r32, r.field, 4, false)
		add(r.r16, r.field, 2, false)
		add(r.r8, r.field, 1, false)
		if r.r8h != "" {
			add(r.r8h, r.field, 1, true)
		}
	}
	// r8 to r15: r8, r8d, r8w, r8b (and r8l, which as also accepts).
	for i := 8; i <= 15; i++ {
		f := "r" + strconv.Itoa(i)
		add(f, f, 8, false)
		add(f+"d", f, 4, false)
		add(f+"w", f, 2, false)
		add(f+"b", f, 1, false)
		add(f+"l", f, 1, false)
	}
	// The instruction pointer is a register operand only in name: at a
	// uprobe it holds the probe address. Memory relative to it is
	// unsupported (see parseLocation), the bare register is not an error.
	add("rip", "ip", 8, false)
	add("eip", "ip", 4, false)
	return m
}()

// LookupReg returns the pt_regs field of an x86-64 register name as GNU as
// spells it, with or without the leading %: "rax", "%r8d", "sil".
func LookupReg(name string) (Reg, bool) {
	r, ok := registers[strings.TrimPrefix(name, "%")]
	return r, ok
}

// Arg is one parsed argument of a probe: where its value is at the probe
// (a register, a constant, or memory at a register plus an offset), how
// many bytes it has and whether it is signed.
type Arg struct {
	// Size is the argument's size in bytes: 1, 2, 4 or 8; 0 when the
	// size prefix did not parse.
	Size int
	// Signed is true for a negative size prefix ("-4@%eax"): the value is
	// sign-extended to 64 bits, otherwise zero-extended.
	Signed bool
	Kind   Kind
	// Reg is the register read (KindReg) or the base address register
	// (KindMem).
	Reg Reg
	// Offset is the displacement added to Reg for KindMem.
	Offset int64
	// Value is the constant for KindConst.
	Value int64
	// Raw is the spec text of this argument, "-4@%ebx".
	Raw string
}

// String returns the spec text.
func (a Arg) String() string { return a.Raw }

// ParseArgs parses a probe's argument string, space-separated
// SIZE@LOCATION specs in GNU as syntax as <sys/sdt.h> emits them on x86-64:
// "8@%rax -4@$-5 8@8(%r12)". Every spec yields an Arg, in order; one that
// is malformed yields a KindUnsupported Arg carrying its text, and the
// error (matching ErrArgSpec) names each malformed spec by index.
func ParseArgs(spec string) ([]Arg, error) {
	fields := strings.Fields(spec)
	if len(fields) == 0 {
		return nil, nil
	}
	args := make([]Arg, len(fields))
	var errs []error
	for i, f := range fields {
		a, err := ParseArg(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("argument %d: %w", i, err))
		}
		args[i] = a
	}
	return args, errors.Join(errs...)
}

// ParseArg parses one SIZE@LOCATION spec. SIZE is 1, 2, 4 or 8 bytes,
// negative for a signed value. LOCATION is one of
//
//	%rax, %eax, %ax, %al, %ah, %r8d ...   a register (KindReg)
//	$42, $-5, $0x10                       a constant (KindConst)
//	-16(%rbp), 8(%r12), (%rdi)            memory at register + offset (KindMem)
//
// Other well-formed operands parse to KindUnsupported with a nil error:
// symbolic or %rip-relative memory ("counter(%rip)"), segment overrides
// ("%fs:0x28"), indexed addresses ("(%rax,%rbx,8)"), symbolic constants
// ("$sym") and displacement expressions ("16+8(%rsp)": as would fold it to
// 24, but <sys/sdt.h> operands come from gcc, which never writes one, so it
// is refused rather than half-evaluated). A malformed spec returns a
// KindUnsupported Arg with Raw set and an error matching ErrArgSpec.
func ParseArg(s string) (Arg, error) {
	a := Arg{Raw: s}
	sizeText, loc, ok := strings.Cut(s, "@")
	if !ok {
		return a, fmt.Errorf("%w: %q: no SIZE@ prefix", ErrArgSpec, s)
	}
	size, err := strconv.Atoi(sizeText)
	if err != nil {
		return a, fmt.Errorf("%w: %q: size %q is not a number", ErrArgSpec, s, sizeText)
	}
	if size < 0 {
		a.Signed, size = true, -size
	}
	switch size {
	case 1, 2, 4, 8:
	default:
		return Arg{Raw: s}, fmt.Errorf("%w: %q: size %d is not 1, 2, 4 or 8 bytes", ErrArgSpec, s, size)
	}
	a.Size = size
	if err := parseLocation(&a, loc); err != nil {
		return Arg{Size: a.Size, Signed: a.Signed, Raw: s}, fmt.Errorf("%w: %q: %w", ErrArgSpec, s, err)
	}
	return a, nil
}

// parseLocation fills in a's Kind, Reg, Offset and Value from the operand.
// A nil error with a.Kind == KindUnsupported means well-formed but not
// evaluated.
func parseLocation(a *Arg, loc string) error {
	switch {
	case loc == "":
		return errors.New("empty location")
	case strings.ContainsAny(loc, " \t\n"):
		return errors.New("space in location")

	case loc[0] == '$':
		v, err := parseInt(loc[1:])
		if err == nil {
			a.Kind, a.Value = KindConst, v
			return nil
		}
		if isSymbol(loc[1:]) {
			return nil // $sym: an address known only after relocation
		}
		return fmt.Errorf("constant %q is not a number", loc)

	case loc[0] == '%' && !strings.ContainsAny(loc, ":()"):
		r, ok := LookupReg(loc)
		if !ok {
			return fmt.Errorf("unknown register %q", loc)
		}
		a.Kind, a.Reg = KindReg, r
		return nil

	case loc[0] == '%':
		// %fs:0x28, %fs:(%rax): thread-local storage through a segment
		// base the BPF side does not have.
		seg, _, ok := strings.Cut(loc, ":")
		if !ok || !isSegment(seg[1:]) {
			return fmt.Errorf("bad operand %q", loc)
		}
		return nil
	}

	// Memory: DISP(BASE[,INDEX[,SCALE]]) or an absolute DISP.
	open := strings.IndexByte(loc, '(')
	if open < 0 {
		if strings.ContainsAny(loc, ")%") {
			return fmt.Errorf("bad operand %q", loc)
		}
		if _, err := parseInt(loc); err == nil || isExpr(loc) {
			return nil // absolute address or symbol: no base register
		}
		return fmt.Errorf("bad operand %q", loc)
	}
	disp, inner := loc[:open], loc[open+1:]
	if !strings.HasSuffix(inner, ")") || strings.ContainsAny(inner[:len(inner)-1], "()") {
		return fmt.Errorf("unbalanced parentheses in %q", loc)
	}
	inner = inner[:len(inner)-1]
	base, _, indexed := strings.Cut(inner, ",")
	if base != "" {
		if base[0] != '%' {
			return fmt.Errorf("base %q is not a register", base)
		}
		r, ok := LookupReg(base)
		if !ok {
			return fmt.Errorf("unknown register %q", base)
		}
		a.Reg = r
	}
	var off int64
	if disp != "" {
		v, err := parseInt(disp)
		switch {
		case err == nil:
			off = v
		case isExpr(disp):
			return nil // symbol or expression: unsupported
		default:
			return fmt.Errorf("displacement %q is not a number", disp)
		}
	}
	switch {
	case indexed:
		return nil // (base,index,scale): gcc's "o" constraint never picks it
	case base == "":
		return fmt.Errorf("no base register in %q", loc)
	case a.Reg.Name == "ip":
		return nil // relative to the next instruction, whose address the probe does not know
	case a.Reg.Width != 8:
		return nil // 32-bit addressing (addr32 prefix): not from gcc on x86-64
	}
	a.Kind, a.Offset = KindMem, off
	return nil
}

// parseInt parses a GNU as integer: decimal, 0x hex, 0 octal or 0b binary,
// with an optional sign. Unsigned 64-bit values keep their bits.
func parseInt(s string) (int64, error) {
	if s == "" || strings.ContainsRune(s, '_') {
		return 0, strconv.ErrSyntax // Go's base-0 underscores are not as syntax
	}
	if v, err := strconv.ParseInt(s, 0, 64); err == nil {
		return v, nil
	}
	u, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return 0, err
	}
	return int64(u), nil
}

// isSymbol reports whether s is an assembler symbol name.
func isSymbol(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '$', c == '@':
		default:
			return false
		}
	}
	return true
}

// isExpr reports whether s is a displacement expression: symbols and
// numbers joined by + and - ("counter", "counter+4", "16+8").
func isExpr(s string) bool {
	if s == "" {
		return false
	}
	terms := strings.FieldsFunc(s, func(r rune) bool { return r == '+' || r == '-' })
	if len(terms) == 0 {
		return false
	}
	for _, t := range terms {
		if _, err := parseInt(t); err != nil && !isSymbol(t) {
			return false
		}
	}
	// No empty terms apart from a leading sign: "1++2" and "4-" are not.
	trimmed := strings.TrimLeft(s, "+-")
	return !strings.Contains(trimmed, "++") && !strings.Contains(trimmed, "--") &&
		!strings.Contains(trimmed, "+-") && !strings.Contains(trimmed, "-+") &&
		!strings.HasSuffix(s, "+") && !strings.HasSuffix(s, "-")
}

// isSegment reports whether s names an x86 segment register.
func isSegment(s string) bool {
	switch s {
	case "cs", "ds", "es", "fs", "gs", "ss":
		return true
	}
	return false
}

// Bit layout of an encoded Arg; see Encode.
const (
	encKindShift   = 0
	encKindBits    = 4
	encSizeShift   = 4
	encSizeBits    = 4
	encSignedShift = 8
	encRegShift    = 16
	encRegBits     = 16
	encOffsetShift = 32
)

// Encode packs the argument into one u64 for a BPF map, so one generic BPF
// routine reads any argument of any probe:
//
//	bits  0-3   kind: 0 unsupported, 1 register, 2 constant, 3 memory
//	bits  4-7   size in bytes: 1, 2, 4 or 8
//	bit   8     signed: sign-extend from size, else zero-extend
//	bits  9-15  zero
//	bits 16-31  byte offset in struct pt_regs to read 8 bytes from
//	            (register and memory kinds; Reg.ReadOffset)
//	bits 32-63  int32, two's complement: the displacement (memory) or the
//	            value (constant)
//
// The BPF side: register, read the u64 at pt_regs+reg; memory, read size
// bytes of user memory at (that u64)+displacement; constant, the value;
// then keep the low size bytes and extend by the signed bit. For a
// register narrower than Size ("8@%eax") the encoded size is the register's
// width, so bits the operand does not name are never read. An Arg the
// layout cannot carry (KindUnsupported, a constant or displacement outside
// int32, a size or offset out of range) encodes as kind 0, which the BPF
// side must report rather than read.
func (a Arg) Encode() uint64 {
	size := a.Size
	if a.Kind == KindReg && a.Reg.Width > 0 && a.Reg.Width < size {
		size = a.Reg.Width
	}
	var reg int
	var word int64
	switch a.Kind {
	case KindReg:
		reg = a.Reg.ReadOffset()
	case KindMem:
		reg, word = a.Reg.ReadOffset(), a.Offset
	case KindConst:
		word = a.Value
	default:
		return 0
	}
	if word < math.MinInt32 || word > math.MaxInt32 || reg < 0 || reg >= 1<<encRegBits ||
		size <= 0 || size >= 1<<encSizeBits {
		return 0
	}
	v := uint64(a.Kind)<<encKindShift | uint64(size)<<encSizeShift
	if a.Signed {
		v |= 1 << encSignedShift
	}
	v |= uint64(reg) << encRegShift
	v |= uint64(uint32(int32(word))) << encOffsetShift
	return v
}

// Decode unpacks an Encode result, for tests and debugging. The register is
// recovered from its read offset (Name, Offset and High; Width is 0), Raw
// is empty, and Size is the encoded size.
func Decode(v uint64) Arg {
	a := Arg{
		Kind:   Kind(v >> encKindShift & (1<<encKindBits - 1)),
		Size:   int(v >> encSizeShift & (1<<encSizeBits - 1)),
		Signed: v>>encSignedShift&1 == 1,
	}
	reg := int(v >> encRegShift & (1<<encRegBits - 1))
	word := int64(int32(uint32(v >> encOffsetShift)))
	switch a.Kind {
	case KindReg, KindMem:
		field := reg / 8
		if field < len(ptRegs) {
			a.Reg = Reg{Name: ptRegs[field], Offset: 8 * field, High: reg%8 == 1}
		}
		if a.Kind == KindMem {
			a.Offset = word
		}
	case KindConst:
		a.Value = word
	}
	return a
}
