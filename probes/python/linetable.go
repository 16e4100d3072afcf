package python

// Line tables: from an instruction's byte offset in its code object's
// bytecode to a source line, as CPython's PyCode_Addr2Line computes it
// (Objects/codeobject.c). Both formats are walked from the start, keeping
// the current range [start, end) and its line; the answer is the line of
// the first range that ends after the offset, or -1 when the table ends
// first or the range has no line. Offsets before the first instruction
// (negative) answer co_firstlineno, as PyCode_Addr2Line does.
//
// Bounded work: every step consumes at least one byte of the table, so a
// table of n bytes is decoded in O(n) whatever its contents.

// noLine is CPython's answer for an instruction without a line.
const noLine = -1

// addr2Line310 decodes the 3.10 co_linetable (Objects/lnotab_notes.txt,
// 3.10): pairs of bytes (start delta: unsigned, in bytes; line delta:
// signed, -128 meaning "no line"). The line delta applies to the range
// that the start delta ends, and ranges of length zero only carry line
// deltas (3.10's advance/PyLineTable_NextAddressRange skip them).
func addr2Line310(table []byte, firstLine int, offset int) int {
	if offset < 0 {
		return firstLine
	}
	line, end := firstLine, 0
	for i := 0; i+1 < len(table); i += 2 {
		end += int(table[i])
		rangeLine := noLine
		if d := int8(table[i+1]); d != -128 {
			line += int(d)
			rangeLine = line
		}
		if end > offset { // never a zero-length range: the previous one would have matched
			return rangeLine
		}
	}
	return noLine
}

// Location table codes (Include/cpython/code.h, _PyCodeLocationInfoKind,
// 3.11+).
const (
	// 0-9 are the short forms: same line, one byte of columns.
	locOneLine0  = 10 // 10-12: line delta 0, 1 or 2
	locNoColumns = 13 // signed varint line delta
	locLong      = 14 // signed varint line delta, then end line and columns
	locNone      = 15 // no location
)

// addr2Line311 decodes the 3.11+ co_linetable, the location table
// (Objects/locations.md): entries start with a byte whose top bit is set,
// bits 3-6 are the code and bits 0-2 the length minus one, in code units
// (2 bytes); the code says how the line changes (get_line_delta in
// Objects/codeobject.c) and what follows, which continuation bytes (top bit
// clear) carry.
func addr2Line311(table []byte, firstLine int, offset int) int {
	if offset < 0 {
		return firstLine
	}
	line, end := firstLine, 0
	for i := 0; i < len(table); {
		b := table[i]
		code := int(b>>3) & 15
		switch {
		case code == locNoColumns || code == locLong:
			line += signedVarint(table[i+1:])
		case code >= locOneLine0 && code < locNoColumns:
			line += code - locOneLine0
		}
		rangeLine := line
		if code == locNone {
			rangeLine = noLine
		}
		end += (int(b&7) + 1) * 2
		if end > offset {
			return rangeLine
		}
		// Skip to the next entry's first byte.
		for i++; i < len(table) && table[i]&0x80 == 0; i++ {
		}
	}
	return noLine
}

// signedVarint decodes scan_signed_varint's format: 6 bits per byte, low
// first, bit 6 set on all but the last; the low bit of the result is the
// sign. Like CPython it accumulates in 32 bits. A varint cut short by the
// end of b ends there.
func signedVarint(b []byte) int {
	var u uint32
	for i, shift := 0, 0; i < len(b); i, shift = i+1, shift+6 {
		u |= uint32(b[i]&63) << shift
		if b[i]&64 == 0 {
			break
		}
	}
	if u&1 != 0 {
		return -int(u >> 1)
	}
	return int(u >> 1)
}
