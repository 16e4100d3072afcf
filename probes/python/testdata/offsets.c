// Prints the byte offsets of the CPython fields that package python's Layout
// holds, as "name value" lines, for the headers it is compiled against:
//
//   gcc -DPy_BUILD_CORE -I$INC -I$INC/internal offsets.c
//
// This is the ground truth of layout_test.go: the numbers come from the
// compiler and the interpreter's own headers, not from package python.
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>
#include <stdio.h>
#include "pycore_runtime.h"
#include "pycore_interp.h"
#if PY_VERSION_HEX >= 0x030B0000
#include "pycore_frame.h"
#endif

#define P(name, value) printf("%s %ld\n", name, (long)(value))
#define FIELD_END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

int main(void) {
    printf("version %d.%d.%d\n", PY_MAJOR_VERSION, PY_MINOR_VERSION, PY_MICRO_VERSION);
    P("RuntimeInterpHead", offsetof(_PyRuntimeState, interpreters.head));
    P("InterpNext", offsetof(PyInterpreterState, next));
    P("ThreadNext", offsetof(PyThreadState, next));
    P("ThreadID", offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX < 0x030B0000
    P("InterpThreadsHead", offsetof(PyInterpreterState, tstate_head));
    P("ThreadNativeID", -1);
    P("ThreadFrame", offsetof(PyThreadState, frame));
    P("CFrameCurrent", -1);
    P("FramePrevious", offsetof(PyFrameObject, f_back));
    P("FrameCode", offsetof(PyFrameObject, f_code));
    P("FrameInstr", offsetof(PyFrameObject, f_lasti));
    P("FrameInstrSize", sizeof(((PyFrameObject *)0)->f_lasti));
    P("FrameOwner", -1);
    P("FrameEnd", FIELD_END(PyFrameObject, f_lasti));
    P("CodeQualname", -1);
    P("CodeCode", offsetof(PyCodeObject, co_code));
    P("CodeAdaptive", -1);
#else
    P("InterpThreadsHead", offsetof(PyInterpreterState, threads.head));
    P("ThreadNativeID", offsetof(PyThreadState, native_thread_id));
    P("FramePrevious", offsetof(_PyInterpreterFrame, previous));
    P("CodeQualname", offsetof(PyCodeObject, co_qualname));
    P("CodeCode", -1);
    P("CodeAdaptive", offsetof(PyCodeObject, co_code_adaptive));
#if PY_VERSION_HEX < 0x030D0000
    P("ThreadFrame", offsetof(PyThreadState, cframe));
    P("CFrameCurrent", offsetof(_PyCFrame, current_frame));
    P("FrameCode", offsetof(_PyInterpreterFrame, f_code));
    P("FrameInstr", offsetof(_PyInterpreterFrame, prev_instr));
    P("FrameInstrSize", sizeof(((_PyInterpreterFrame *)0)->prev_instr));
#else
    P("ThreadFrame", offsetof(PyThreadState, current_frame));
    P("CFrameCurrent", -1);
    P("FrameCode", offsetof(_PyInterpreterFrame, f_executable));
    P("FrameInstr", offsetof(_PyInterpreterFrame, instr_ptr));
    P("FrameInstrSize", sizeof(((_PyInterpreterFrame *)0)->instr_ptr));
#endif
#if PY_VERSION_HEX < 0x030C0000
    P("FrameOwner", offsetof(_PyInterpreterFrame, is_entry));
    P("FrameEnd", FIELD_END(_PyInterpreterFrame, is_entry));
#else
    P("FrameOwner", offsetof(_PyInterpreterFrame, owner));
    P("FrameEnd", FIELD_END(_PyInterpreterFrame, owner));
    P("FrameOwnedByCStack", FRAME_OWNED_BY_CSTACK);
#endif
#endif
    P("ObjectType", offsetof(PyObject, ob_type));
    P("VarObjectSize", offsetof(PyVarObject, ob_size));
    P("CodeName", offsetof(PyCodeObject, co_name));
    P("CodeFilename", offsetof(PyCodeObject, co_filename));
    P("CodeFirstLineno", offsetof(PyCodeObject, co_firstlineno));
    P("CodeLinetable", offsetof(PyCodeObject, co_linetable));
    P("BytesSize", offsetof(PyBytesObject, ob_base.ob_size));
    P("BytesData", offsetof(PyBytesObject, ob_sval));
    P("UnicodeLength", offsetof(PyASCIIObject, length));
    P("UnicodeState", offsetof(PyASCIIObject, state));
    P("UnicodeASCIIData", sizeof(PyASCIIObject));
    P("UnicodeCompactData", sizeof(PyCompactUnicodeObject));
    return 0;
}
