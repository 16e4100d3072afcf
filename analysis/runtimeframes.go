package analysis

import "strings"

// IsRuntimeFunction reports whether a native frame's function (demangled)
// is CUDA runtime or driver code by its name, wherever it lives. A runtime
// linked in statically (nvcc's default: libcudart_static.a in every CUDA C++
// program and extension module) puts its frames in the user's own file, so
// IsRuntimeFile cannot tell them apart; their names can:
//
//   - the API entry points: cudaMalloc, cudaMallocAsync_ptsz, cuMemAlloc_v2
//     (cuda or cu, then an upper-case letter);
//   - cuda_runtime.h's inline C++ wrappers, compiled into the caller's
//     file: "cudaMalloc<float>(float**, unsigned long)", demangled with
//     their return type first when they are templates ("cudaError
//     cudaMalloc<float>(float**, unsigned long)"), and the overloads
//     ("cudaMallocHost(void**, unsigned long, unsigned int)");
//   - the runtime's internals: NVIDIA's static runtime names them
//     __cudart123 (obfuscated), its registration hooks __cudaRegisterFatBinary
//     and friends, and the C++ ones live in namespace cudart.
//
// A user function named like the API (cudaMallocChecked) is taken for the
// runtime's: the CUDA naming convention is the runtime's to use.
func IsRuntimeFunction(fn string) bool {
	if strings.HasPrefix(fn, "cudart::") || strings.HasPrefix(fn, "__cudart") {
		return true
	}
	name := fn
	// The identifier ends at its template arguments or parameters; a
	// space before either is a template's return type ("cudaError
	// cudaMalloc<float>(...)"), dropped.
	if i := strings.IndexAny(name, "<("); i >= 0 {
		name = name[:i]
	}
	if i := strings.LastIndexByte(name, ' '); i >= 0 {
		name = name[i+1:]
	}
	name = strings.TrimPrefix(name, "__") // __cudaRegisterFatBinary
	switch {
	case strings.HasPrefix(name, "cudart::"):
		return true
	case strings.HasPrefix(name, "cuda"):
		name = name[len("cuda"):]
	case strings.HasPrefix(name, "cu"):
		name = name[len("cu"):]
	default:
		return false
	}
	if name == "" || name[0] < 'A' || name[0] > 'Z' {
		return false
	}
	for _, c := range name {
		if c != '_' && (c < '0' || c > '9') && (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') {
			return false
		}
	}
	return true
}
