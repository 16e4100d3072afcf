package python

// Layout holds the byte offsets of the CPython fields that the frame walker
// (BPF) and the Resolver (Go) read, for one interpreter version. Fields a
// version lacks are -1. All offsets are for a release (non-debug) x86-64
// build with the GIL.
type Layout struct {
	// Frame walk (used in BPF).

	RuntimeInterpHead int64 // offsetof(_PyRuntimeState, interpreters.head)
	InterpNext        int64 // offsetof(PyInterpreterState, next)
	InterpThreadsHead int64 // offsetof(PyInterpreterState, threads.head) (tstate_head in 3.10)
	ThreadNext        int64 // offsetof(PyThreadState, next)
	ThreadNativeID    int64 // offsetof(PyThreadState, native_thread_id) (3.11+; -1 in 3.10)
	ThreadID          int64 // offsetof(PyThreadState, thread_id): pthread_self(), the fs base on x86-64 glibc
	ThreadFrame       int64 // 3.10: tstate->frame; 3.11/3.12: tstate->cframe; 3.13+: tstate->current_frame
	CFrameCurrent     int64 // 3.11/3.12: offsetof(_PyCFrame, current_frame); -1 when ThreadFrame is the frame itself
	FramePrevious     int64 // 3.10 f_back; 3.11+ previous
	FrameCode         int64 // 3.10/3.11/3.12 f_code; 3.13+ f_executable (a tagged _PyStackRef in 3.14)
	FrameInstr        int64 // 3.10 f_lasti; 3.11/3.12 prev_instr; 3.13+ instr_ptr
	FrameInstrSize    int64 // bytes: 4 (3.10 int f_lasti) or 8
	FrameOwner        int64 // 3.11: is_entry (bool); 3.12+: owner (char); -1 in 3.10
	FrameSize         int64 // bytes from the frame start that cover all of the above, a multiple of 8, <= 128

	// Objects (used in Go by the Resolver).

	ObjectType         int64 // offsetof(PyObject, ob_type)
	VarObjectSize      int64 // offsetof(PyVarObject, ob_size); a 3.11+ code object's size in code units
	CodeName           int64 // offsetof(PyCodeObject, co_name)
	CodeQualname       int64 // offsetof(PyCodeObject, co_qualname) (3.11+; -1 in 3.10)
	CodeFilename       int64 // offsetof(PyCodeObject, co_filename)
	CodeFirstLineno    int64 // offsetof(PyCodeObject, co_firstlineno), an int
	CodeLinetable      int64 // offsetof(PyCodeObject, co_linetable), a bytes object
	CodeCode           int64 // offsetof(PyCodeObject, co_code), a bytes object (3.10; -1 in 3.11+)
	CodeAdaptive       int64 // offsetof(PyCodeObject, co_code_adaptive), the inline bytecode (3.11+; -1 in 3.10)
	BytesSize          int64 // offsetof(PyBytesObject, ob_base.ob_size)
	BytesData          int64 // offsetof(PyBytesObject, ob_sval)
	UnicodeLength      int64 // offsetof(PyASCIIObject, length), in code points
	UnicodeState       int64 // offsetof(PyASCIIObject, state): bits 2-4 kind, 5 compact, 6 ascii
	UnicodeASCIIData   int64 // sizeof(PyASCIIObject): where a compact ASCII string's characters start
	UnicodeCompactData int64 // sizeof(PyCompactUnicodeObject): where other compact strings' characters start
}

// The tables below were read from the compiler, not from the headers by
// eye: testdata/offsets.c compiled with -DPy_BUILD_CORE against each
// version's installed headers (Include/, Include/cpython/,
// Include/internal/pycore_{runtime,interp,frame}.h), as layout_test.go does
// on every run where the headers are present:
//
//	3.10: pyenv 3.10.13 headers.
//	3.11: Debian 3.11.2 (/usr/include/python3.11) and pyenv 3.11.7; identical.
//	3.12: pyenv 3.12.1 headers.
//	3.13: pyenv 3.13.0 headers. Used only to check _Py_DebugOffsets, which
//	      Find prefers for 3.13+; 3.14 has no table at all.
//
// These structures are internal, but CPython keeps them stable within a
// minor release (the debuggers and profilers that read them rely on it).

// layout310: PyFrameObject chain from tstate->frame. The code object has
// no qualname and keeps its bytecode in a separate bytes object (co_code);
// f_lasti is an int counting code units (-1 before the first instruction).
var layout310 = Layout{
	RuntimeInterpHead: 32, InterpNext: 0, InterpThreadsHead: 8,
	ThreadNext: 8, ThreadNativeID: -1, ThreadID: 176, ThreadFrame: 24, CFrameCurrent: -1,
	FramePrevious: 24, FrameCode: 32, FrameInstr: 96, FrameInstrSize: 4, FrameOwner: -1,
	FrameSize: 104, // f_lasti ends at 100

	ObjectType: 8, VarObjectSize: 16,
	CodeName: 112, CodeQualname: -1, CodeFilename: 104, CodeFirstLineno: 40,
	CodeLinetable: 120, CodeCode: 48, CodeAdaptive: -1,
	BytesSize: 16, BytesData: 32,
	UnicodeLength: 16, UnicodeState: 32, UnicodeASCIIData: 48, UnicodeCompactData: 72,
}

// layout311: _PyInterpreterFrame chain from tstate->cframe->current_frame;
// prev_instr points at the last instruction started, is_entry marks the
// first frame of a _PyEval_EvalFrameDefault call.
var layout311 = Layout{
	RuntimeInterpHead: 40, InterpNext: 0, InterpThreadsHead: 16,
	ThreadNext: 8, ThreadNativeID: 160, ThreadID: 152, ThreadFrame: 56, CFrameCurrent: 8,
	FramePrevious: 48, FrameCode: 32, FrameInstr: 56, FrameInstrSize: 8, FrameOwner: 68,
	FrameSize: 72, // is_entry ends at 69

	ObjectType: 8, VarObjectSize: 16,
	CodeName: 120, CodeQualname: 128, CodeFilename: 112, CodeFirstLineno: 72,
	CodeLinetable: 136, CodeCode: -1, CodeAdaptive: 184,
	BytesSize: 16, BytesData: 32,
	UnicodeLength: 16, UnicodeState: 32, UnicodeASCIIData: 48, UnicodeCompactData: 72,
}

// layout312: as 3.11, but _PyCFrame holds only current_frame and previous,
// the frame's owner byte says FRAME_OWNED_BY_CSTACK for the shim frame
// that each _PyEval_EvalFrameDefault call pushes, and PyUnicode lost wstr.
var layout312 = Layout{
	RuntimeInterpHead: 40, InterpNext: 0, InterpThreadsHead: 72,
	ThreadNext: 8, ThreadNativeID: 144, ThreadID: 136, ThreadFrame: 56, CFrameCurrent: 0,
	FramePrevious: 8, FrameCode: 0, FrameInstr: 56, FrameInstrSize: 8, FrameOwner: 70,
	FrameSize: 72, // owner ends at 71

	ObjectType: 8, VarObjectSize: 16,
	CodeName: 120, CodeQualname: 128, CodeFilename: 112, CodeFirstLineno: 68,
	CodeLinetable: 136, CodeCode: -1, CodeAdaptive: 192,
	BytesSize: 16, BytesData: 32,
	UnicodeLength: 16, UnicodeState: 32, UnicodeASCIIData: 40, UnicodeCompactData: 56,
}

// layout313: no _PyCFrame (tstate->current_frame is the frame), and
// instr_ptr points at the instruction executing or about to begin.
// Find builds 3.13 layouts from _Py_DebugOffsets; this table is what that
// must agree with for the 3.13.0 headers.
var layout313 = Layout{
	RuntimeInterpHead: 632, InterpNext: 7264, InterpThreadsHead: 7344,
	ThreadNext: 8, ThreadNativeID: 160, ThreadID: 152, ThreadFrame: 72, CFrameCurrent: -1,
	FramePrevious: 8, FrameCode: 0, FrameInstr: 56, FrameInstrSize: 8, FrameOwner: 70,
	FrameSize: 72, // owner ends at 71

	ObjectType: 8, VarObjectSize: 16,
	CodeName: 120, CodeQualname: 128, CodeFilename: 112, CodeFirstLineno: 68,
	CodeLinetable: 136, CodeCode: -1, CodeAdaptive: 200,
	BytesSize: 16, BytesData: 32,
	UnicodeLength: 16, UnicodeState: 32, UnicodeASCIIData: 40, UnicodeCompactData: 56,
}

// tableLayout returns the built-in layout of a version, if there is one.
func tableLayout(v Version) (Layout, bool) {
	if v.Major != 3 {
		return Layout{}, false
	}
	switch v.Minor {
	case 10:
		return layout310, true
	case 11:
		return layout311, true
	case 12:
		return layout312, true
	case 13:
		return layout313, true
	}
	return Layout{}, false
}

// Frame owners (enum _frameowner, Include/internal/pycore_frame.h, from
// 3.14 pycore_interpframe_structs.h). In 3.12 and 3.13
// FRAME_OWNED_BY_CSTACK is 3; 3.14 inserts FRAME_OWNED_BY_INTERPRETER = 3
// and moves FRAME_OWNED_BY_CSTACK to 4. Either way every owner >= 3 is a
// frame that CPython's own walkers (_PyFrame_IsIncomplete,
// traceback.c) never show: the entry shim of a _PyEval_EvalFrameDefault
// call.
const ownerFirstShim = 3

// Boundary interprets the owner byte that the walker stores in the top 8
// bits of a frame's instruction word. skip means the frame is not shown:
// 3.12+ frames owned by the C stack (the shim frame each
// _PyEval_EvalFrameDefault call pushes, so a C->Python entry). entryAfter
// means a boundary follows the frame in walk order (newest to oldest): the
// frames up to and including this one belong to one
// _PyEval_EvalFrameDefault call. 3.12+: the shim frames (skipped) mark it;
// 3.11: frames with is_entry set are shown and mark it; 3.10: every frame
// is its own _PyEval_EvalFrameDefault call.
func (l *Layout) Boundary(v Version, ownerByte uint8) (skip, entryAfter bool) {
	switch {
	case v.AtLeast(3, 12):
		shim := ownerByte >= ownerFirstShim
		return shim, shim
	case v.AtLeast(3, 11):
		return false, ownerByte != 0
	default:
		return false, true
	}
}
