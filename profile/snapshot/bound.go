package snapshot

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// Bounds on what a pickle may make the decoders build, checked by scan
// before anything is built, so that importing a file takes at most about
// ImportBound times its size in memory, whatever the file (doc.go,
// TestImportMemoryHostile). A memory snapshot is written by CPython's
// pickler, whose output stays far within them: containers filled in
// batches of 1000 items, nested a few levels deep, each value memoized at
// most once.
const (
	// ImportBound is the promise: importing a file takes at most this many
	// times its size at its peak (plus a fixed allowance, importFloor, for
	// the decoders' own tables on a small file).
	ImportBound = 10
	// maxMarks bounds the marks open at once: one per container being
	// filled, a snapshot nests about eight.
	maxMarks = 256
	// maxStack bounds the values on the stack at once (16 bytes each):
	// CPython's batches keep at most 2000 a level.
	maxStack = 1 << 15
	// valueBound is the share of ImportBound the decoded values may take
	// (as stackSim counts them): the rest is the file itself (read
	// whole), the converted snapshot, the records made of it and the
	// garbage between. PyTorch's snapshots take 2 to 6.
	valueBound = 8
	// importFloor is the fixed allowance.
	importFloor = 1 << 20
)

// Costs, in bytes of heap, of what the fast decoder (unpickle.go) builds:
// a container, an item in a list or tuple, a key and value pair in a
// dict, a memo entry, a boxed number, each with the slack of a slice grown
// by append. gopickle, which grows containers an item at a time and keeps
// its memo in a map, takes up to slowFactor times as much: it is let
// decode only a pickle whose values fit the bound at that price.
const (
	costContainer = 32
	costItem      = 20
	costPair      = 40
	costMemo      = 24
	costNumber    = 8
	slowFactor    = 2
)

// stackSim follows the pickle's stack by counts alone (no values), and
// adds up valueCost: what decoding would build.
//
// It also counts the items each list and dict receives (sizes, in the
// order their EMPTY_LIST and EMPTY_DICT opcodes come), so that the fast
// decoder allocates each once at its final size: grown by append, a long
// list would leave as much again in garbage arrays and slack.
type stackSim struct {
	depth int           // values on the stack
	marks [maxMarks]int // depth at each open mark
	nmark int
	memo  uint64 // memo entries (the highest index put, plus one)
	cost  uint64 // bytes the decoded values take, at most
	size  int    // the pickle's size in bytes, for check

	slots   [maxStack + 1]int32 // the container (index in sizes) at each stack depth, -1 for other values
	memoIDs []int32             // the container memoized at each memo index, -1 for other values
	sizes   []uint32            // items each list or dict receives
}

// step applies one opcode at byte at, whose argument is arg.
func (s *stackSim) step(op byte, at int, arg []byte) error {
	bottom := 0 // the lowest depth an opcode may pop to: the open mark's
	if s.nmark > 0 {
		bottom = s.marks[s.nmark-1]
	}
	pop := func(n int) error {
		if s.depth-n < bottom {
			return fmt.Errorf("%w: %s at byte %d pops a value the stack does not hold", ErrMalformed, opcodes[op].name, at)
		}
		s.depth -= n
		return nil
	}
	// toMark pops the values above the open mark and the mark: how many.
	toMark := func() (int, error) {
		if s.nmark == 0 {
			return 0, fmt.Errorf("%w: %s at byte %d without a MARK", ErrMalformed, opcodes[op].name, at)
		}
		n := s.depth - bottom
		s.depth = bottom
		s.nmark--
		return n, nil
	}
	push := func(cost uint64) error {
		s.depth++
		s.cost += cost
		if s.depth <= maxStack {
			s.slots[s.depth-1] = -1
		}
		if s.depth > maxStack {
			return fmt.Errorf("%w: more than %d values on the stack at byte %d; a memory snapshot never holds so many (CPython writes containers in batches of 1000)",
				ErrMalformed, maxStack, at)
		}
		return nil
	}
	switch op {
	case opProto, opFrame:
	case opMark:
		if s.nmark == maxMarks {
			return fmt.Errorf("%w: more than %d MARKs open at byte %d; a memory snapshot nests a few containers deep",
				ErrMalformed, maxMarks, at)
		}
		s.marks[s.nmark] = s.depth
		s.nmark++
	case '1': // POP_MARK
		_, err := toMark()
		return err
	case '0': // POP: a value, or the mark when none is above it
		if s.depth == bottom && s.nmark > 0 {
			s.nmark--
			return nil
		}
		return pop(1)
	case opEmptyDict, opEmptyList:
		if err := push(costContainer); err != nil {
			return err
		}
		s.slots[s.depth-1] = int32(len(s.sizes))
		s.sizes = append(grow(s.sizes, 1), 0)
	case ')', 0x8f: // EMPTY_TUPLE, EMPTY_SET
		return push(costContainer)
	case 'a': // APPEND
		if err := pop(1); err != nil {
			return err
		}
		s.cost += costItem
		return s.added(op, at, 1)
	case 's': // SETITEM
		if err := pop(2); err != nil {
			return err
		}
		s.cost += costPair
		return s.added(op, at, 1)
	case opAppends, 0x90: // ADDITEMS
		n, err := toMark()
		if err != nil {
			return err
		}
		s.cost += uint64(n) * costItem
		return s.added(op, at, n)
	case opSetItems:
		n, err := toMark()
		if err != nil {
			return err
		}
		if n%2 != 0 {
			return fmt.Errorf("%w: SETITEMS at byte %d with an odd number of values", ErrMalformed, at)
		}
		s.cost += uint64(n/2) * costPair
		return s.added(op, at, n/2)
	case 't', 'l', 0x91: // TUPLE, LIST, FROZENSET
		n, err := toMark()
		if err != nil {
			return err
		}
		return push(costContainer + uint64(n)*costItem)
	case 'd': // DICT
		n, err := toMark()
		if err != nil {
			return err
		}
		return push(costContainer + uint64(n/2)*costPair)
	case 0x85, 0x86, 0x87: // TUPLE1-3
		n := int(op - 0x84)
		if err := pop(n); err != nil {
			return err
		}
		return push(costContainer + uint64(n)*costItem)
	case '2', 'h', 'j', 'g': // DUP, BINGET, LONG_BINGET, GET: a reference
		id := int32(-1)
		switch op {
		case '2':
			if s.depth == bottom {
				return fmt.Errorf("%w: DUP at byte %d with nothing to duplicate", ErrMalformed, at)
			}
			id = s.slots[s.depth-1]
		case 'h':
			id = s.memoID(uint64(arg[0]))
		case 'j':
			id = s.memoID(uint64(binary.LittleEndian.Uint32(arg)))
		}
		if err := push(0); err != nil {
			return err
		}
		s.slots[s.depth-1] = id
	case 'q', 'r', 'p', 0x94: // BINPUT, LONG_BINPUT, PUT, MEMOIZE
		if s.depth == bottom {
			return fmt.Errorf("%w: %s at byte %d with nothing to memoize", ErrMalformed, opcodes[op].name, at)
		}
		i := s.memo // MEMOIZE: the next index
		switch op {
		case 'q':
			i = uint64(arg[0])
		case 'r':
			i = uint64(binary.LittleEndian.Uint32(arg))
		case 'p':
			n, err := strconv.ParseUint(strings.TrimSpace(string(arg)), 10, 32)
			if err != nil {
				return fmt.Errorf("%w: PUT at byte %d: index %q", ErrMalformed, at, arg)
			}
			i = n
		}
		if i >= s.memo {
			// The decoders keep every index up to the highest (a slice,
			// or a map entry each): count them all.
			s.cost += (i + 1 - s.memo) * costMemo
			s.memo = i + 1
			// Refuse a memo out of proportion before memoIDs grows to it.
			if err := s.check(s.size); err != nil {
				return err
			}
		}
		if op != 'p' && i < 1<<24 { // the fast decoder's (binary) memo, sequential
			for uint64(len(s.memoIDs)) <= i {
				s.memoIDs = append(grow(s.memoIDs, 1), -1) // doubling: little garbage
			}
			s.memoIDs[i] = s.slots[s.depth-1]
		}
	case opStop:
		if s.depth != 1 || s.nmark != 0 {
			return fmt.Errorf("%w: STOP at byte %d leaves %d values and %d marks on the stack, not one value",
				ErrMalformed, at, s.depth, s.nmark)
		}
	case opLong1, 0x8b: // LONG1, LONG4: a big.Int beyond 8 bytes
		return push(costNumber + 2*uint64(len(arg)))
	default:
		// A number, a string or bytes, None or a bool: its bytes, boxed.
		return push(costNumber + uint64(len(arg)))
	}
	return nil
}

// added counts n items added to the container under an opcode's operands
// (the value now on top of the stack, above the open mark), checking
// there is one.
func (s *stackSim) added(op byte, at, n int) error {
	bottom := 0
	if s.nmark > 0 {
		bottom = s.marks[s.nmark-1]
	}
	if s.depth <= bottom {
		return fmt.Errorf("%w: %s at byte %d has no container to add to", ErrMalformed, opcodes[op].name, at)
	}
	if id := s.slots[s.depth-1]; id >= 0 {
		s.sizes[id] += uint32(n)
	}
	return nil
}

// memoID is the container memoized at index i, -1 when none.
func (s *stackSim) memoID(i uint64) int32 {
	if i < uint64(len(s.memoIDs)) {
		return s.memoIDs[i]
	}
	return -1
}

// check refuses a pickle whose values would take more than valueBound
// times its size (with the fixed allowance).
func (s *stackSim) check(size int) error {
	if limit := uint64(valueBound)*uint64(size) + importFloor/2; s.cost > limit {
		return fmt.Errorf("%w: its %d bytes would decode into about %d bytes of values, more than a memory snapshot's (at most %d times its size): not a snapshot, or a damaged one",
			ErrMalformed, size, s.cost, valueBound)
	}
	return nil
}
