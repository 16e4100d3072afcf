package analysis

import (
	"strings"

	"github.com/vramprof/vramprof/probes/event"
)

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

// strippedFiles lists the files of each process that hold a CUDA runtime
// linked in and stripped (event.Library.StrippedRuntime).
func strippedFiles(libs []event.Library) map[libKey]bool {
	var out map[libKey]bool
	for _, l := range libs {
		if l.StrippedRuntime {
			if out == nil {
				out = make(map[libKey]bool)
			}
			out[libKey{l.PID, l.Path}] = true
		}
	}
	return out
}

// skipStrippedRuntime marks the anonymous frames of a runtime linked in and
// stripped as the runtime's: in such a file, nameless frames directly under
// the driver are the runtime's, and the first named frame after them in the
// same file is the user's caller (a release build that stripped the
// runtime's symbols only, as testdata's driver_only). The site rule already
// passes over nameless frames; when the whole file is stripped no frame
// after them has a name, and the Site stays the first anonymous frame: the
// best there is.
func skipStrippedRuntime(st *Stack, mappings map[event.MappingID]event.Mapping, stripped map[libKey]bool) {
	if len(stripped) == 0 {
		return
	}
	i := 0
	for i < len(st.Runtime) && st.Runtime[i] {
		i++
	}
	if i == len(st.Frames) || st.Frames[i].Function != "" {
		return
	}
	m, ok := mappings[st.Frames[i].Mapping]
	if !ok || st.Frames[i].Mapping == 0 || !stripped[libKey{st.PID, m.File}] {
		return
	}
	for j := i + 1; j < len(st.Frames); j++ {
		f := st.Frames[j]
		if f.Mapping != st.Frames[i].Mapping {
			return // left the file without finding a name
		}
		if f.Function != "" {
			for k := i; k < j; k++ {
				st.Runtime[k] = true
			}
			if st.SiteFrame < j {
				st.SiteFrame, st.Site = j, st.Lines[j]
			}
			return
		}
	}
}
