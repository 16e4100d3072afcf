package python

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// From 3.13, CPython puts a _Py_DebugOffsets structure at the start of
// _PyRuntime (its first field, "to facilitate locating it by out of
// process debuggers"): the cookie "xdebugpy", PY_VERSION_HEX, a
// free-threaded flag, then per structure its size and the offsets of
// selected fields, every one a uint64_t. The structure grows between minor
// versions, so each version has its own list of fields below, in
// declaration order; a field's offset is its index times 8.

// debugCookie is _Py_Debug_Cookie.
const debugCookie = "xdebugpy"

// debugFields313 is _Py_DebugOffsets of 3.13
// (Include/internal/pycore_runtime.h, 3.13.0), up to the fields this package
// uses. layout_test.go checks each index against offsetof() compiled from
// the installed 3.13 headers.
var debugFields313 = []string{
	"cookie", "version", "free_threaded",
	"runtime_state.size", "runtime_state.finalizing", "runtime_state.interpreters_head",
	"interpreter_state.size", "interpreter_state.id", "interpreter_state.next",
	"interpreter_state.threads_head", "interpreter_state.gc", "interpreter_state.imports_modules",
	"interpreter_state.sysdict", "interpreter_state.builtins", "interpreter_state.ceval_gil",
	"interpreter_state.gil_runtime_state", "interpreter_state.gil_runtime_state_enabled",
	"interpreter_state.gil_runtime_state_locked", "interpreter_state.gil_runtime_state_holder",
	"thread_state.size", "thread_state.prev", "thread_state.next", "thread_state.interp",
	"thread_state.current_frame", "thread_state.thread_id", "thread_state.native_thread_id",
	"thread_state.datastack_chunk", "thread_state.status",
	"interpreter_frame.size", "interpreter_frame.previous", "interpreter_frame.executable",
	"interpreter_frame.instr_ptr", "interpreter_frame.localsplus", "interpreter_frame.owner",
	"code_object.size", "code_object.filename", "code_object.name", "code_object.qualname",
	"code_object.linetable", "code_object.firstlineno", "code_object.argcount",
	"code_object.localsplusnames", "code_object.localspluskinds", "code_object.co_code_adaptive",
	"pyobject.size", "pyobject.ob_type",
	"type_object.size", "type_object.tp_name", "type_object.tp_repr", "type_object.tp_flags",
	"tuple_object.size", "tuple_object.ob_item", "tuple_object.ob_size",
	"list_object.size", "list_object.ob_item", "list_object.ob_size",
	"dict_object.size", "dict_object.ma_keys", "dict_object.ma_values",
	"float_object.size", "float_object.ob_fval",
	"long_object.size", "long_object.lv_tag", "long_object.ob_digit",
	"bytes_object.size", "bytes_object.ob_size", "bytes_object.ob_sval",
	"unicode_object.size", "unicode_object.state", "unicode_object.length",
	"unicode_object.asciiobject_size",
}

// debugFields314 is _Py_DebugOffsets of 3.14
// (Include/internal/pycore_debug_offsets.h): interpreter_state gained
// threads_main, code_object_generation and tlbc_generation,
// interpreter_frame stackpointer and tlbc_index, code_object co_tlbc, and
// a set_object section sits before dict_object. No 3.14 headers are
// installed here, so this list is checked only by the sanity checks in
// parseDebugOffsets, which refuse a mismatch.
var debugFields314 = []string{
	"cookie", "version", "free_threaded",
	"runtime_state.size", "runtime_state.finalizing", "runtime_state.interpreters_head",
	"interpreter_state.size", "interpreter_state.id", "interpreter_state.next",
	"interpreter_state.threads_head", "interpreter_state.threads_main", "interpreter_state.gc",
	"interpreter_state.imports_modules", "interpreter_state.sysdict", "interpreter_state.builtins",
	"interpreter_state.ceval_gil", "interpreter_state.gil_runtime_state",
	"interpreter_state.gil_runtime_state_enabled", "interpreter_state.gil_runtime_state_locked",
	"interpreter_state.gil_runtime_state_holder", "interpreter_state.code_object_generation",
	"interpreter_state.tlbc_generation",
	"thread_state.size", "thread_state.prev", "thread_state.next", "thread_state.interp",
	"thread_state.current_frame", "thread_state.thread_id", "thread_state.native_thread_id",
	"thread_state.datastack_chunk", "thread_state.status",
	"interpreter_frame.size", "interpreter_frame.previous", "interpreter_frame.executable",
	"interpreter_frame.instr_ptr", "interpreter_frame.localsplus", "interpreter_frame.owner",
	"interpreter_frame.stackpointer", "interpreter_frame.tlbc_index",
	"code_object.size", "code_object.filename", "code_object.name", "code_object.qualname",
	"code_object.linetable", "code_object.firstlineno", "code_object.argcount",
	"code_object.localsplusnames", "code_object.localspluskinds", "code_object.co_code_adaptive",
	"code_object.co_tlbc",
	"pyobject.size", "pyobject.ob_type",
	"type_object.size", "type_object.tp_name", "type_object.tp_repr", "type_object.tp_flags",
	"tuple_object.size", "tuple_object.ob_item", "tuple_object.ob_size",
	"list_object.size", "list_object.ob_item", "list_object.ob_size",
	"set_object.size", "set_object.used", "set_object.table", "set_object.mask",
	"dict_object.size", "dict_object.ma_keys", "dict_object.ma_values",
	"float_object.size", "float_object.ob_fval",
	"long_object.size", "long_object.lv_tag", "long_object.ob_digit",
	"bytes_object.size", "bytes_object.ob_size", "bytes_object.ob_sval",
	"unicode_object.size", "unicode_object.state", "unicode_object.length",
	"unicode_object.asciiobject_size",
}

// debugFields returns the field list of a minor version of 3, or nil.
func debugFields(minor int) []string {
	switch minor {
	case 13:
		return debugFields313
	case 14:
		return debugFields314
	}
	return nil
}

// debugSize is how many bytes of _PyRuntime to read for a version: the
// fields this package uses, and no more.
func debugSize(minor int) int { return 8 * len(debugFields(minor)) }

// debugOffsets is a decoded _Py_DebugOffsets: field name to value.
type debugOffsets map[string]uint64

// decodeDebugOffsets checks the cookie of raw (the first debugSize bytes
// of _PyRuntime) and decodes it with the field list of minor.
func decodeDebugOffsets(raw []byte, minor int) (debugOffsets, error) {
	fields := debugFields(minor)
	if fields == nil {
		return nil, fmt.Errorf("no _Py_DebugOffsets layout for 3.%d", minor)
	}
	if len(raw) < 8*len(fields) {
		return nil, fmt.Errorf("_Py_DebugOffsets: %d bytes, want %d", len(raw), 8*len(fields))
	}
	if !bytes.Equal(raw[:8], []byte(debugCookie)) {
		return nil, fmt.Errorf("_Py_DebugOffsets: cookie %q, want %q", raw[:8], debugCookie)
	}
	d := make(debugOffsets, len(fields))
	for i, name := range fields[1:] {
		d[name] = binary.LittleEndian.Uint64(raw[8*(i+1):])
	}
	return d, nil
}

// layout builds a Layout from the debug offsets and checks them against
// what no CPython 3.x changes (PyObject and PyBytesObject headers,
// PyASCIIObject's length and state) and against the sizes of their own
// structures, so that a wrong field list is refused rather than trusted.
func (d debugOffsets) layout() (Layout, error) {
	if d["free_threaded"] != 0 {
		return Layout{}, fmt.Errorf("free-threaded build")
	}
	fixed := []struct {
		name string
		want uint64
	}{
		{"pyobject.ob_type", 8},
		{"bytes_object.ob_size", 16},
		{"bytes_object.ob_sval", 32},
		{"unicode_object.length", 16},
		{"unicode_object.state", 32},
	}
	for _, f := range fixed {
		if d[f.name] != f.want {
			return Layout{}, fmt.Errorf("_Py_DebugOffsets %s = %d, want %d: field list does not match", f.name, d[f.name], f.want)
		}
	}
	within := map[string][]string{
		"runtime_state":     {"interpreters_head"},
		"interpreter_state": {"next", "threads_head"},
		"thread_state":      {"next", "current_frame", "thread_id", "native_thread_id"},
		"interpreter_frame": {"previous", "executable", "instr_ptr", "owner"},
		"code_object":       {"filename", "name", "qualname", "linetable", "firstlineno", "co_code_adaptive"},
	}
	for sect, names := range within {
		size := d[sect+".size"]
		if size == 0 || size > 1<<20 {
			return Layout{}, fmt.Errorf("_Py_DebugOffsets %s.size = %d: field list does not match", sect, size)
		}
		for _, n := range names {
			if d[sect+"."+n] >= size {
				return Layout{}, fmt.Errorf("_Py_DebugOffsets %s.%s = %d beyond size %d: field list does not match", sect, n, d[sect+"."+n], size)
			}
		}
	}
	i := func(name string) int64 { return int64(d[name]) }
	l := Layout{
		RuntimeInterpHead: i("runtime_state.interpreters_head"),
		InterpNext:        i("interpreter_state.next"),
		InterpThreadsHead: i("interpreter_state.threads_head"),
		ThreadNext:        i("thread_state.next"),
		ThreadNativeID:    i("thread_state.native_thread_id"),
		ThreadID:          i("thread_state.thread_id"),
		ThreadFrame:       i("thread_state.current_frame"),
		CFrameCurrent:     -1, // 3.13 removed _PyCFrame
		FramePrevious:     i("interpreter_frame.previous"),
		FrameCode:         i("interpreter_frame.executable"),
		FrameInstr:        i("interpreter_frame.instr_ptr"),
		FrameInstrSize:    8, // _Py_CODEUNIT *
		FrameOwner:        i("interpreter_frame.owner"),

		ObjectType:      i("pyobject.ob_type"),
		VarObjectSize:   16, // PyVarObject: PyObject (16 bytes), then ob_size
		CodeName:        i("code_object.name"),
		CodeQualname:    i("code_object.qualname"),
		CodeFilename:    i("code_object.filename"),
		CodeFirstLineno: i("code_object.firstlineno"),
		CodeLinetable:   i("code_object.linetable"),
		CodeCode:        -1,
		CodeAdaptive:    i("code_object.co_code_adaptive"),
		BytesSize:       i("bytes_object.ob_size"),
		BytesData:       i("bytes_object.ob_sval"),
		UnicodeLength:   i("unicode_object.length"),
		UnicodeState:    i("unicode_object.state"),

		UnicodeASCIIData: i("unicode_object.asciiobject_size"),
		// PyCompactUnicodeObject is PyASCIIObject, then utf8_length and
		// utf8 (3.12+, Include/cpython/unicodeobject.h).
		UnicodeCompactData: i("unicode_object.asciiobject_size") + 16,
	}
	l.FrameSize = frameSize(&l)
	if l.FrameSize > 128 {
		return Layout{}, fmt.Errorf("_Py_DebugOffsets: frame fields reach byte %d, beyond 128", l.FrameSize)
	}
	return l, nil
}

// frameSize is the walker's read size: up to the end of the last frame
// field it reads, rounded up to 8 bytes.
func frameSize(l *Layout) int64 {
	end := max(l.FramePrevious+8, l.FrameCode+8, l.FrameInstr+l.FrameInstrSize, l.FrameOwner+1)
	return (end + 7) &^ 7
}
