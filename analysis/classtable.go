package analysis

// classTable finds an allocation class's index by its key: the lookup
// runs once per allocation, and a Go map hashing the 24-byte classKey was
// about a tenth of the analyser's time, most of it waiting on memory. A
// slot holds 32 bits of the key's hash and the class's index only (8
// bytes, a quarter of a map's entry), so the table stays in cache longer;
// a tag match is confirmed on the class itself, which the caller reads
// next anyway. Linear probing, power-of-two size, at most half full.
type classTable struct {
	slots []classSlot
	n     int
	// classes are the Analyzer's, by index: the keys.
	classes *[]*classState
}

// classSlot is a key's hash tag and its class index plus one (0: free).
type classSlot struct {
	tag uint32
	ix  int32
}

// hash mixes every field of k into 64 bits.
func (k *classKey) hash() uint64 {
	h := (k.size*0x9e3779b97f4a7c15 ^ (uint64(k.pid)<<32 | uint64(k.stack))) * 0xbf58476d1ce4e5b9
	h ^= uint64(uint32(k.device))<<32 | uint64(k.api)<<16 | uint64(k.layer)<<8 | uint64(k.mem)
	h = (h ^ h>>31) * 0x94d049bb133111eb
	return h ^ h>>29
}

// get returns the index of key k, or false.
func (t *classTable) get(k *classKey) (int32, bool) {
	if t.n == 0 {
		return 0, false
	}
	h := k.hash()
	tag, mask := uint32(h>>32), len(t.slots)-1
	classes := *t.classes
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s.ix == 0 {
			return 0, false
		}
		if s.tag == tag && classes[s.ix-1].key == *k {
			return s.ix - 1, true
		}
	}
}

// put adds key k with index ix; k must be absent.
func (t *classTable) put(k *classKey, ix int32) {
	if 2*(t.n+1) > len(t.slots) {
		old := t.slots
		t.slots = make([]classSlot, max(64, 2*len(old)))
		for _, s := range old {
			if s.ix != 0 {
				t.insert((*t.classes)[s.ix-1].key.hash(), s.ix)
			}
		}
	}
	t.insert(k.hash(), ix+1)
	t.n++
}

func (t *classTable) insert(h uint64, ix int32) {
	mask := len(t.slots) - 1
	i := int(h) & mask
	for t.slots[i].ix != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = classSlot{tag: uint32(h >> 32), ix: ix}
}
