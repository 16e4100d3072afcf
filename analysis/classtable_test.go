package analysis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
)

// TestClassTable stores keys that differ in one field each (so a packing
// that dropped or overlapped a field would merge two of them) through
// several growths, and finds each one's index and no absent key.
func TestClassTable(t *testing.T) {
	var keys []classKey
	for i := range 500 {
		base := classKey{size: 512, pid: 7, stack: 3, device: 1, api: event.APICudaMalloc, layer: event.LayerSegment}
		vary := []func(k *classKey){
			func(k *classKey) { k.size = uint64(i+1) << 9 },
			func(k *classKey) { k.pid = uint32(i) + 100 },
			func(k *classKey) { k.stack = event.StackID(i) + 100 },
			func(k *classKey) { k.device = int32(i) - 250 },
			func(k *classKey) { k.api = event.API(i + 100) },
		}
		for _, f := range vary {
			k := base
			f(&k)
			keys = append(keys, k)
		}
	}
	keys = append(keys, classKey{size: 512, pid: 7, stack: 3, device: 1, layer: event.LayerBlock},
		classKey{size: 512, pid: 7, stack: 3, device: 1, layer: event.LayerSegment, mem: SpaceHost})
	var classes []*classState
	tab := classTable{classes: &classes}
	want := make(map[classKey]int32)
	for _, k := range keys {
		if _, ok := want[k]; ok {
			continue
		}
		_, found := tab.get(&k)
		require.False(t, found, "%+v before its put", k)
		want[k] = int32(len(want))
		classes = append(classes, &classState{key: k})
		tab.put(&k, want[k])
	}
	for k, ix := range want {
		got, ok := tab.get(&k)
		require.True(t, ok, "%+v", k)
		assert.Equal(t, ix, got, "%+v", k)
	}
	absent := classKey{size: 1, pid: 1}
	_, ok := tab.get(&absent)
	assert.False(t, ok)
	assert.Greater(t, len(want), 2000, "the keys must be distinct for the test to mean anything")
}
