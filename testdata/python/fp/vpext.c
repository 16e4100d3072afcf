/*
 * vpext: a CPython extension module that calls the CUDA runtime itself and
 * calls back into Python, so that a stack can pass from Python to C to
 * Python to C again: the ground truth of the test that checks where vramprof
 * puts the Python frames among the native ones (interleave.py,
 * cmd/vramprof/python_interleave_e2e_test.go).
 *
 *   vpext.alloc(size) -> ptr   cudaMalloc(&ptr, size), called here
 *   vpext.free(ptr)            cudaFree(ptr)
 *   vpext.call(fn, *args)      fn(*args), through PyObject_Call
 *
 * Built by the test with frame pointers and without sibling calls, so that
 * vpext_alloc is the direct caller of cudaMalloc and vpext_call a frame of
 * its own between the two evaluation loops:
 *
 *   gcc -shared -fPIC -O1 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer \
 *       -fno-optimize-sibling-calls -I PREFIX/include/python3.11 -I testdata/cuda \
 *       -o vpext.so vpext.c testdata/build/lib/libcudart.so.12 -Wl,-rpath,testdata/build/lib
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "cuda_runtime_api.h"

/* vpext_alloc calls cudaMalloc and returns the device pointer as an int. */
static __attribute__((noinline)) PyObject *vpext_alloc(PyObject *self, PyObject *arg)
{
	(void)self;
	size_t size = PyLong_AsSize_t(arg);
	if (size == (size_t)-1 && PyErr_Occurred())
		return NULL;
	void *ptr = NULL;
	cudaError_t rc = cudaMalloc(&ptr, size);
	if (rc != cudaSuccess)
		return PyErr_Format(PyExc_MemoryError, "cudaMalloc(%zu) returned %d", size, (int)rc);
	return PyLong_FromVoidPtr(ptr);
}

/* vpext_free calls cudaFree. */
static __attribute__((noinline)) PyObject *vpext_free(PyObject *self, PyObject *arg)
{
	(void)self;
	void *ptr = PyLong_AsVoidPtr(arg);
	if (ptr == NULL && PyErr_Occurred())
		return NULL;
	cudaError_t rc = cudaFree(ptr);
	if (rc != cudaSuccess)
		return PyErr_Format(PyExc_RuntimeError, "cudaFree(%p) returned %d", ptr, (int)rc);
	Py_RETURN_NONE;
}

/* vpext_call calls fn(*args) from C: a C-to-Python entry, so a second
 * evaluation loop on the native stack above this frame. */
static __attribute__((noinline)) PyObject *vpext_call(PyObject *self, PyObject *args)
{
	(void)self;
	Py_ssize_t n = PyTuple_Size(args);
	if (n < 1) {
		PyErr_SetString(PyExc_TypeError, "call(fn, *args): fn is missing");
		return NULL;
	}
	PyObject *rest = PyTuple_GetSlice(args, 1, n);
	if (rest == NULL)
		return NULL;
	PyObject *res = PyObject_Call(PyTuple_GET_ITEM(args, 0), rest, NULL);
	Py_DECREF(rest);
	return res;
}

static PyMethodDef vpext_methods[] = {
	{"alloc", vpext_alloc, METH_O, "alloc(size) -> ptr: cudaMalloc, called from C."},
	{"free", vpext_free, METH_O, "free(ptr): cudaFree, called from C."},
	{"call", vpext_call, METH_VARARGS, "call(fn, *args): fn(*args), called from C."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef vpext_module = {
	PyModuleDef_HEAD_INIT, "vpext", "CUDA calls and Python callbacks from C, for vramprof's tests.",
	-1, vpext_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_vpext(void)
{
	return PyModule_Create(&vpext_module);
}
