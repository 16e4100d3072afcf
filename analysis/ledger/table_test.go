package ledger

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTableMatchesMap runs random puts, deletes and takes, on aligned
// and clustered keys, against a Go map.
func TestTableMatchesMap(t *testing.T) {
	for _, tt := range []struct {
		name  string
		key   func(r *rand.Rand) uint64
		steps int
	}{
		{"aligned", func(r *rand.Rand) uint64 { return 0x7f0000000000 + uint64(r.IntN(5000))<<9 }, 200_000},
		{"dense", func(r *rand.Rand) uint64 { return uint64(r.IntN(300) + 1) }, 100_000},
		{"sparse", func(r *rand.Rand) uint64 { return r.Uint64() | 1 }, 50_000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			var tab *Table[uint64]
			require.NotPanics(t, func() { tab.Del(5) })
			_, ok0 := tab.Take(5)
			require.False(t, ok0)
			_, ok := tab.Get(5)
			require.False(t, ok)
			tab = &Table[uint64]{}
			want := map[uint64]uint64{}
			for i := range tt.steps {
				k := tt.key(r)
				switch r.IntN(4) {
				case 0, 1:
					tab.Put(k, uint64(i))
					want[k] = uint64(i)
				case 2:
					tab.Del(k)
					delete(want, k)
				default:
					got, ok := tab.Take(k)
					v, wok := want[k]
					require.Equal(t, wok, ok, "step %d take %#x", i, k)
					require.Equal(t, v, got)
					delete(want, k)
				}
				if i%997 == 0 {
					require.Equal(t, len(want), tab.Len())
					for k, v := range want {
						got, ok := tab.Get(k)
						require.True(t, ok, "step %d key %#x", i, k)
						require.Equal(t, v, got)
					}
				}
				got, ok := tab.Get(k)
				v, wok := want[k]
				require.Equal(t, wok, ok)
				require.Equal(t, v, got)
			}
			_, ok = tab.Get(0)
			require.False(t, ok)
		})
	}
}
