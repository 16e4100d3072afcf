package python

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// debugBlob encodes a _Py_DebugOffsets for a field list: the cookie, then
// values by field name (0 for the rest).
func debugBlob(fields []string, values map[string]uint64) []byte {
	b := make([]byte, 8*len(fields))
	copy(b, debugCookie)
	for i, f := range fields[1:] {
		binary.LittleEndian.PutUint64(b[8*(i+1):], values[f])
	}
	return b
}

// debugValues313 are the values a 3.13.0 release build holds (the
// layout313 table, which TestLayoutTables checks against the headers).
func debugValues313() map[string]uint64 {
	return map[string]uint64{
		"version":                         0x030d00f0,
		"runtime_state.size":              0x452b8,
		"runtime_state.interpreters_head": 632,
		"interpreter_state.size":          0x10000,
		"interpreter_state.next":          7264,
		"interpreter_state.threads_head":  7344,
		"thread_state.size":               400,
		"thread_state.next":               8,
		"thread_state.current_frame":      72,
		"thread_state.thread_id":          152,
		"thread_state.native_thread_id":   160,
		"interpreter_frame.size":          80,
		"interpreter_frame.previous":      8,
		"interpreter_frame.executable":    0,
		"interpreter_frame.instr_ptr":     56,
		"interpreter_frame.owner":         70,
		"code_object.size":                208,
		"code_object.filename":            112,
		"code_object.name":                120,
		"code_object.qualname":            128,
		"code_object.linetable":           136,
		"code_object.firstlineno":         68,
		"code_object.co_code_adaptive":    200,
		"pyobject.size":                   16,
		"pyobject.ob_type":                8,
		"bytes_object.ob_size":            16,
		"bytes_object.ob_sval":            32,
		"unicode_object.state":            32,
		"unicode_object.length":           16,
		"unicode_object.asciiobject_size": 40,
	}
}

func TestDebugOffsets(t *testing.T) {
	t.Run("3.13", func(t *testing.T) {
		d, err := decodeDebugOffsets(debugBlob(debugFields313, debugValues313()), 13)
		require.NoError(t, err)
		l, err := d.layout()
		require.NoError(t, err)
		assert.Equal(t, layout313, l)
		assert.Equal(t, Version{3, 13, 0}, versionFromHex(d["version"]))
	})
	t.Run("3.14", func(t *testing.T) {
		v := debugValues313()
		v["version"] = 0x030e00f0
		v["interpreter_frame.owner"] = 74 // after 3.14's stackpointer and return_offset
		d, err := decodeDebugOffsets(debugBlob(debugFields314, v), 14)
		require.NoError(t, err)
		l, err := d.layout()
		require.NoError(t, err)
		want := layout313
		want.FrameOwner = 74
		want.FrameSize = 80
		assert.Equal(t, want, l)
	})
	refused := []struct {
		name  string
		blob  []byte
		minor int
	}{
		{"3.13 read as 3.14", debugBlob(debugFields313, debugValues313()), 14},
		{"3.14 read as 3.13", debugBlob(debugFields314, debugValues313()), 13},
		{"short", debugBlob(debugFields313, debugValues313())[:100], 13},
		{"cookie", append([]byte("ydebugpy"), debugBlob(debugFields313, debugValues313())[8:]...), 13},
		{"3.12 has none", debugBlob(debugFields313, debugValues313()), 12},
		{"free-threaded", func() []byte {
			v := debugValues313()
			v["free_threaded"] = 1
			return debugBlob(debugFields313, v)
		}(), 13},
		{"frame fields beyond 128 bytes", func() []byte {
			v := debugValues313()
			v["interpreter_frame.size"] = 400
			v["interpreter_frame.owner"] = 300
			return debugBlob(debugFields313, v)
		}(), 13},
	}
	for _, tt := range refused {
		t.Run("refuse "+tt.name, func(t *testing.T) {
			d, err := decodeDebugOffsets(tt.blob, tt.minor)
			if err == nil {
				_, err = d.layout()
			}
			assert.Error(t, err)
		})
	}
}
