package analysis

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSegListMatchesSlice runs random inserts and removes, enough to split
// chunks many times and empty some, against one sorted slice (what the
// pool kept before): the same segment at every address, the same order.
func TestSegListMatchesSlice(t *testing.T) {
	for _, tt := range []struct {
		name    string
		maxSize int  // segment sizes are 1..maxSize pages: over 1, they overlap
		near    bool // probe again near the last probe (the hot segment)
	}{{"disjoint", 1, false}, {"overlapping near", 3, true}} {
		t.Run(tt.name, func(t *testing.T) { segListMatchesSlice(t, tt.maxSize, tt.near) })
	}
}

func segListMatchesSlice(t *testing.T, maxSize int, near bool) {
	r := rand.New(rand.NewPCG(3, 4))
	var l segList
	var want []*poolSegment
	at := func(addr uint64) *poolSegment {
		i := sort.Search(len(want), func(i int) bool { return want[i].addr > addr }) - 1
		if i >= 0 && addr < want[i].addr+want[i].size {
			return want[i]
		}
		return nil
	}
	for step := range 20_000 {
		addr := uint64(r.IntN(4000)) << 12
		if r.IntN(3) > 0 {
			s := &poolSegment{addr: addr, size: uint64(1+r.IntN(maxSize)) << 12}
			l.insert(s)
			i := sort.Search(len(want), func(i int) bool { return want[i].addr > addr })
			want = slices.Insert(want, i, s)
		} else {
			got := l.remove(addr)
			var w *poolSegment
			if s := at(addr); s != nil && s.addr == addr {
				w = s
				i := slices.Index(want, s)
				want = slices.Delete(want, i, i+1)
			}
			require.Same(t, w, got, "step %d remove %#x", step, addr)
		}
		probe := uint64(r.IntN(4000)<<12 + r.IntN(1<<12))
		require.Same(t, at(probe), l.at(probe), "step %d at %#x", step, probe)
		if near {
			for range 3 {
				probe += uint64(r.IntN(1 << 13))
				require.Same(t, at(probe), l.at(probe), "step %d at %#x", step, probe)
			}
		}
		if step%1000 == 0 {
			require.Equal(t, len(want), l.len())
			require.Equal(t, want, slices.Collect(l.all()))
		}
	}
	var b segList
	b.build(slices.Clone(want))
	require.Equal(t, want, slices.Collect(b.all()))
	require.Equal(t, len(want), b.len())

	// A training loop's order: segments allocated at rising addresses,
	// then freed oldest first, the list emptied (its chunks' arrays
	// spare) and filled again; on the built list too.
	for _, l := range []*segList{&l, &b} {
		for round := range 3 {
			for len(want) > 0 {
				// Of equal addresses the last inserted goes first.
				i := 0
				for i+1 < len(want) && want[i+1].addr == want[0].addr {
					i++
				}
				require.Same(t, want[i], l.remove(want[i].addr), "round %d", round)
				want = slices.Delete(want, i, i+1)
			}
			require.Equal(t, 0, l.len())
			for i := range 500 {
				s := &poolSegment{addr: uint64(5000+i) << 12, size: 1 << 12}
				l.insert(s)
				want = append(want, s)
			}
			require.Equal(t, want, slices.Collect(l.all()), "round %d", round)
			require.Same(t, want[250], l.at(want[250].addr), "round %d", round)
		}
		want = slices.Collect(b.all())
	}
}

// TestSegBlocksMatchesSlice inserts and removes a segment's blocks at
// random, in address order and at the front (the allocator's orders),
// emptying the list now and then, against a plain sorted slice.
func TestSegBlocksMatchesSlice(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var s segBlocks
	var want []poolBlock
	empties := 0
	for step := range 20_000 {
		draining := step/500%4 == 3 // a quarter of the time, until empty
		switch {
		case draining && len(want) == 0:
			continue
		case len(want) > 0 && (draining || r.IntN(3) == 0 || len(want) > 100):
			j := r.IntN(len(want))
			if r.IntN(2) == 0 {
				j = 0 // the front: the oldest block goes first
			}
			want = slices.Delete(want, j, j+1)
			s.remove(j)
			if len(want) == 0 {
				empties++
			}
		default:
			b := poolBlock{addr: uint64(r.IntN(1000)+1) << 9, size: uint64(step + 1)}
			j, found := slices.BinarySearchFunc(want, b.addr, func(x poolBlock, a uint64) int {
				return cmp.Compare(x.addr, a)
			})
			if found {
				continue
			}
			want = slices.Insert(want, j, b)
			s.insert(j, b)
		}
		require.Equal(t, len(want), len(s.list()), "step %d", step)
		if len(want) > 0 {
			require.Equal(t, want, s.list(), "step %d", step)
		}
	}
	require.Greater(t, empties, 5)
}
