package analysis

import "math/bits"

// addrTable is a hash table keyed by a non-zero address (or handle): open
// addressing, linear probing, keys and values in parallel slices, no
// per-entry pointer. It holds one entry per live allocation, so it is
// kept denser than a Go map: it grows by half when 7/8 full (Go's maps
// double, and a million entries can find every table just split, half
// empty). Key 0 marks a free slot: the analyser never keeps address 0.
type addrTable[V any] struct {
	keys []uint64
	vals []V
	n    int
}

// slot is k's home slot: its hash scaled to the table's size (any size,
// not only powers of two).
func (t *addrTable[V]) slot(k uint64) int {
	// Addresses are aligned: mix the low bits in before scaling by the
	// high ones.
	x := k * 0x9e3779b97f4a7c15
	x ^= x >> 29
	x *= 0xbf58476d1ce4e5b9
	hi, _ := bits.Mul64(x, uint64(len(t.keys)))
	return int(hi)
}

// get returns k's value; a nil table holds nothing.
func (t *addrTable[V]) get(k uint64) (V, bool) {
	var zero V
	if t == nil || t.n == 0 || k == 0 {
		return zero, false
	}
	for i := t.slot(k); ; {
		switch t.keys[i] {
		case k:
			return t.vals[i], true
		case 0:
			return zero, false
		}
		if i++; i == len(t.keys) {
			i = 0
		}
	}
}

// put sets k's value; k must not be 0.
func (t *addrTable[V]) put(k uint64, v V) {
	if (t.n+1)*8 > len(t.keys)*7 {
		t.grow()
	}
	for i := t.slot(k); ; {
		switch t.keys[i] {
		case k:
			t.vals[i] = v
			return
		case 0:
			t.keys[i], t.vals[i] = k, v
			t.n++
			return
		}
		if i++; i == len(t.keys) {
			i = 0
		}
	}
}

func (t *addrTable[V]) grow() {
	keys, vals := t.keys, t.vals
	n := max(16, len(keys)+len(keys)/2)
	t.keys, t.vals, t.n = make([]uint64, n), make([]V, n), 0
	for i, k := range keys {
		if k != 0 {
			t.put(k, vals[i])
		}
	}
}

// del removes k, shifting back the entries of its probe run that would
// otherwise be cut off from their home slot (no tombstones).
func (t *addrTable[V]) del(k uint64) {
	if t == nil || t.n == 0 || k == 0 {
		return
	}
	n := len(t.keys)
	i := t.slot(k)
	for t.keys[i] != k {
		if t.keys[i] == 0 {
			return
		}
		if i++; i == n {
			i = 0
		}
	}
	var zero V
	for j := i; ; {
		if j++; j == n {
			j = 0
		}
		kj := t.keys[j]
		if kj == 0 {
			break
		}
		// kj may move into the hole at i unless its home lies cyclically
		// in (i, j]: then i is before its home and lookups would miss it.
		h := t.slot(kj)
		if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			t.keys[i], t.vals[i] = kj, t.vals[j]
			i = j
		}
	}
	t.keys[i], t.vals[i] = 0, zero
	t.n--
}
