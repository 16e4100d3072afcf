package ledger

import "math/bits"

// Table is a hash table keyed by a non-zero address (or handle): open
// addressing, linear probing, each key beside its value in one slot, no
// per-entry pointer. Key and value share a slot, not two parallel slices:
// a lookup then touches one cache line, not two (the analysis looks up an
// address at every event, mostly missing the cache: the key's then the
// value's miss were its second-largest wait). It
// holds one entry per live allocation, so it is kept denser than a Go
// map: it grows by half when 7/8 full (Go's maps double, and a million
// entries can find every table just split, half empty). Key 0 marks a
// free slot: the ledger never keeps address 0. The zero value is empty
// and ready; a nil *Table holds nothing (Get and Del on it are fine). A
// Table is not safe for concurrent use.
type Table[V any] struct {
	slots []tableSlot[V]
	n     int
}

// tableSlot is one key and its value; key 0 is a free slot.
type tableSlot[V any] struct {
	key uint64
	val V
}

// slot is k's home slot: its hash scaled to the table's size (any size,
// not only powers of two).
func (t *Table[V]) slot(k uint64) int {
	// Addresses are aligned: mix the low bits in before scaling by the
	// high ones.
	x := k * 0x9e3779b97f4a7c15
	x ^= x >> 29
	x *= 0xbf58476d1ce4e5b9
	hi, _ := bits.Mul64(x, uint64(len(t.slots)))
	return int(hi)
}

// Len is the number of entries.
func (t *Table[V]) Len() int {
	if t == nil {
		return 0
	}
	return t.n
}

// Get returns k's value.
func (t *Table[V]) Get(k uint64) (V, bool) {
	var zero V
	if t == nil || t.n == 0 || k == 0 {
		return zero, false
	}
	for i := t.slot(k); ; {
		s := &t.slots[i]
		switch s.key {
		case k:
			return s.val, true
		case 0:
			return zero, false
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// Put sets k's value; k must not be 0.
func (t *Table[V]) Put(k uint64, v V) { *t.put(k) = v }

// Ref returns k's value slot, adding k with the zero value when absent
// (one probe where Get then Put take two); k must not be 0. The slot is
// valid until the next Put, Ref or Del.
func (t *Table[V]) Ref(k uint64) *V { return t.put(k) }

// put returns k's value slot, adding k when absent; the slot is valid
// until the next put or Del.
func (t *Table[V]) put(k uint64) *V {
	if (t.n+1)*8 > len(t.slots)*7 {
		t.grow()
	}
	for i := t.slot(k); ; {
		s := &t.slots[i]
		switch s.key {
		case k:
			return &s.val
		case 0:
			s.key = k
			t.n++
			return &s.val
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

func (t *Table[V]) grow() {
	old := t.slots
	t.slots, t.n = make([]tableSlot[V], max(16, len(old)+len(old)/2)), 0
	for i := range old {
		if s := &old[i]; s.key != 0 {
			t.Put(s.key, s.val)
		}
	}
}

// Take removes k and returns its value: Get and Del in one probe.
func (t *Table[V]) Take(k uint64) (V, bool) {
	var zero V
	if t == nil || t.n == 0 || k == 0 {
		return zero, false
	}
	i := t.find(k)
	if i < 0 {
		return zero, false
	}
	v := t.slots[i].val
	t.delAt(i)
	return v, true
}

// Del removes k, shifting back the entries of its probe run that would
// otherwise be cut off from their home slot (no tombstones).
func (t *Table[V]) Del(k uint64) {
	if t == nil || t.n == 0 || k == 0 {
		return
	}
	if i := t.find(k); i >= 0 {
		t.delAt(i)
	}
}

// find returns k's slot, or -1; the table must not be empty.
func (t *Table[V]) find(k uint64) int {
	i := t.slot(k)
	for t.slots[i].key != k {
		if t.slots[i].key == 0 {
			return -1
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
	return i
}

// delAt empties slot i, which holds a key, shifting back the entries of
// its probe run that would otherwise be cut off from their home slot.
func (t *Table[V]) delAt(i int) {
	n := len(t.slots)
	for j := i; ; {
		if j++; j == n {
			j = 0
		}
		kj := t.slots[j].key
		if kj == 0 {
			break
		}
		// kj may move into the hole at i unless its home lies cyclically
		// in (i, j]: then i is before its home and lookups would miss it.
		h := t.slot(kj)
		if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = tableSlot[V]{}
	t.n--
}

// All calls f with every entry, in no particular order, until f returns
// false. f must not change the table.
func (t *Table[V]) All(f func(k uint64, v V) bool) {
	if t == nil {
		return
	}
	for i := range t.slots {
		if s := &t.slots[i]; s.key != 0 && !f(s.key, s.val) {
			return
		}
	}
}

// Tables holds values keyed by address, one Table per key space K: an
// address-only key keeps each entry small. It caches the latest spaces
// looked up (consecutive events mostly come from one process, alternating
// between a few layers and books). The zero value is ready.
type Tables[K comparable, V any] struct {
	maps   map[K]*Table[V]
	recent [4]tablesEntry[K, V]
	next   int
}

type tablesEntry[K comparable, V any] struct {
	k K
	m *Table[V]
}

// Get returns k's table; nil when it has none and create is false
// (lookups and deletes on a nil table are fine).
func (m *Tables[K, V]) Get(k K, create bool) *Table[V] {
	for i := range m.recent {
		if e := &m.recent[i]; e.m != nil && e.k == k {
			return e.m
		}
	}
	t := m.maps[k]
	if t == nil {
		if !create {
			return nil
		}
		if m.maps == nil {
			m.maps = make(map[K]*Table[V])
		}
		t = &Table[V]{}
		m.maps[k] = t
	}
	m.recent[m.next] = tablesEntry[K, V]{k, t}
	m.next = (m.next + 1) % len(m.recent)
	return t
}
