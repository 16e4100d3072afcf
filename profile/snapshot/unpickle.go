package snapshot

import (
	"encoding/binary"
	"errors"
	"math"
	"math/big"

	"github.com/nlpodyssey/gopickle/types"
)

// errSlowPath sends a pickle to gopickle: the fast decoder met an opcode
// it leaves to it, or input it does not vouch for.
var errSlowPath = errors.New("snapshot: pickle left to gopickle")

// fastLoad decodes a pickle that scan accepted into the values gopickle
// gives (*types.Dict, *types.List, *types.Tuple, int, *big.Int, float64,
// string, bool, nil), allocating each list and dict once at its size: the
// binary opcodes CPython's pickler writes (protocols 2-5) and no others.
// gopickle grows every container an item at a time, which takes several
// times a snapshot's size; this stays near it. Any other opcode and any
// inconsistency return errSlowPath: gopickle then decodes the pickle, and
// says what is wrong with it.
//
// sizes, when not nil, are the item counts of the lists and dicts in the
// order their EMPTY_LIST and EMPTY_DICT opcodes come, and memoLen the
// number of memo entries (scan): each list, dict and the memo is
// allocated once, at its final size.
func fastLoad(data []byte, sizes []uint32, memoLen int) (any, error) {
	made := 0 // lists and dicts made so far
	size := func() int {
		n := 0
		if made < len(sizes) {
			n = int(sizes[made])
		}
		made++
		return n
	}
	var (
		stack []any
		marks []int
		memo  = make([]any, 0, memoLen)
	)
	pop := func() (any, bool) {
		if len(stack) == 0 || (len(marks) > 0 && len(stack) <= marks[len(marks)-1]) {
			return nil, false
		}
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		return v, true
	}
	popMark := func() (int, bool) {
		if len(marks) == 0 {
			return 0, false
		}
		m := marks[len(marks)-1]
		marks = marks[:len(marks)-1]
		return m, true
	}
	// put memoizes the top of the stack at index i: CPython numbers its
	// memo from 0 up, so anything else goes to gopickle.
	put := func(i uint64) bool {
		if len(stack) == 0 || i > uint64(len(memo)) {
			return false
		}
		if i == uint64(len(memo)) {
			memo = append(grow(memo, 1), stack[len(stack)-1])
		} else {
			memo[i] = stack[len(stack)-1]
		}
		return true
	}
	get := func(i uint64) bool {
		if i >= uint64(len(memo)) {
			return false
		}
		stack = append(stack, memo[i])
		return true
	}
	// Lengths and frames were checked by scan: arguments are in data.
	for off := 0; off < len(data); {
		op := data[off]
		off++
		ok := true
		switch op {
		case opProto:
			off++
		case opFrame:
			off += 8
		case opStop:
			v, ok := pop()
			if !ok || len(stack) != 0 || len(marks) != 0 {
				return nil, errSlowPath
			}
			return v, nil
		case opMark:
			marks = append(marks, len(stack))
		case opEmptyDict:
			d := make(types.Dict, 0, size())
			stack = append(stack, &d)
		case opEmptyList:
			l := make(types.List, 0, size())
			stack = append(stack, &l)
		case ')': // EMPTY_TUPLE
			stack = append(stack, &types.Tuple{})
		case opSetItems, opAppends, 't': // SETITEMS, APPENDS, TUPLE
			var m int
			if m, ok = popMark(); !ok {
				break
			}
			items := stack[m:]
			if op == 't' {
				t := types.Tuple(append([]any(nil), items...))
				stack = append(stack[:m], &t)
				break
			}
			if m == 0 {
				ok = false
				break
			}
			switch c := stack[m-1].(type) {
			case *types.List:
				if op != opAppends {
					ok = false
				} else {
					*c = append(grow(*c, len(items)), items...)
				}
			case *types.Dict:
				if op != opSetItems || len(items)%2 != 0 {
					ok = false
					break
				}
				*c = grow(*c, len(items)/2)
				for i := 0; i < len(items); i += 2 {
					*c = append(*c, types.DictEntry{Key: items[i], Value: items[i+1]})
				}
			default:
				ok = false
			}
			clear(items)
			stack = stack[:m]
		case 's', 'a': // SETITEM, APPEND
			n := 2
			if op == 'a' {
				n = 1
			}
			lo := len(stack) - n - 1
			if lo < 0 || (len(marks) > 0 && lo < marks[len(marks)-1]) {
				ok = false
				break
			}
			switch c := stack[lo].(type) {
			case *types.List:
				ok = op == 'a'
				if ok {
					*c = append(*c, stack[lo+1])
				}
			case *types.Dict:
				ok = op == 's'
				if ok {
					*c = append(*c, types.DictEntry{Key: stack[lo+1], Value: stack[lo+2]})
				}
			default:
				ok = false
			}
			stack = stack[:lo+1]
		case 0x85, 0x86, 0x87: // TUPLE1-3
			n := int(op - 0x84)
			lo := len(stack) - n
			if lo < 0 || (len(marks) > 0 && lo < marks[len(marks)-1]) {
				ok = false
				break
			}
			t := types.Tuple(append([]any(nil), stack[lo:]...))
			stack = append(stack[:lo], &t)
		case opBinUnicode:
			n := int(binary.LittleEndian.Uint32(data[off:]))
			stack = append(stack, string(data[off+4:off+4+n]))
			off += 4 + n
		case 0x8c: // SHORT_BINUNICODE
			n := int(data[off])
			stack = append(stack, string(data[off+1:off+1+n]))
			off += 1 + n
		case 0x8d: // BINUNICODE8
			n := int(binary.LittleEndian.Uint64(data[off:]))
			stack = append(stack, string(data[off+8:off+8+n]))
			off += 8 + n
		case opBinInt1:
			stack = append(stack, int(data[off]))
			off++
		case opBinInt2:
			stack = append(stack, int(binary.LittleEndian.Uint16(data[off:])))
			off += 2
		case opBinInt:
			stack = append(stack, int(int32(binary.LittleEndian.Uint32(data[off:]))))
			off += 4
		case opLong1:
			n := int(data[off])
			stack = append(stack, long(data[off+1:off+1+n]))
			off += 1 + n
		case 'G': // BINFLOAT, big-endian
			stack = append(stack, math.Float64frombits(binary.BigEndian.Uint64(data[off:])))
			off += 8
		case opNewTrue:
			stack = append(stack, true)
		case opNewFalse:
			stack = append(stack, false)
		case opNone:
			stack = append(stack, nil)
		case 'q': // BINPUT
			ok = put(uint64(data[off]))
			off++
		case 'r': // LONG_BINPUT
			ok = put(uint64(binary.LittleEndian.Uint32(data[off:])))
			off += 4
		case 0x94: // MEMOIZE
			ok = put(uint64(len(memo)))
		case 'h': // BINGET
			ok = get(uint64(data[off]))
			off++
		case 'j': // LONG_BINGET
			ok = get(uint64(binary.LittleEndian.Uint32(data[off:])))
			off += 4
		case '0': // POP
			_, ok = pop()
		case '2': // DUP
			if ok = len(stack) > 0; ok {
				stack = append(stack, stack[len(stack)-1])
			}
		default:
			ok = false
		}
		if !ok {
			return nil, errSlowPath
		}
	}
	return nil, errSlowPath
}

// grow makes room for n more items in s: exactly for the first batch
// (CPython writes a container's items in batches of 1000), doubling for a
// later one. append's growth of a quarter at a time would leave four times
// a long list's size in garbage arrays behind it, which the heap carries
// until the next collection: doubling leaves at most its size.
func grow[S ~[]E, E any](s S, n int) S {
	if cap(s)-len(s) >= n {
		return s
	}
	c := len(s) + n
	if len(s) > 0 {
		c = max(c, 2*cap(s))
	}
	out := make(S, len(s), c)
	copy(out, s)
	return out
}

// long decodes LONG1's little-endian two's complement bytes: an int when
// it fits, else a *big.Int.
func long(b []byte) any {
	if len(b) == 0 {
		return 0
	}
	if len(b) <= 8 {
		var v uint64
		for i := len(b) - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		if shift := 64 - 8*uint(len(b)); shift > 0 {
			v = uint64(int64(v<<shift) >> shift) // sign-extend
		}
		return int(int64(v))
	}
	be := make([]byte, len(b))
	for i := range b {
		be[len(b)-1-i] = b[i]
	}
	n := new(big.Int).SetBytes(be)
	if b[len(b)-1]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return n
}
