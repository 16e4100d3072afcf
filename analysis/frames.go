package analysis

import (
	"fmt"
	"path"
	"strings"

	"github.com/vramprof/vramprof/probes/event"
)

// RenderFrame renders one frame for humans: "function (file:line)",
// "function" when the file is unknown, "0x<addr> (<mapping basename>)" when
// the function is unknown ("0x<addr>" alone without a mapping).
func RenderFrame(f event.Frame, m *event.Mapping) string {
	switch {
	case f.Function == "":
		if m == nil || m.File == "" {
			return fmt.Sprintf("0x%x", f.Addr)
		}
		return fmt.Sprintf("0x%x (%s)", f.Addr, path.Base(m.File))
	case f.File == "":
		return f.Function
	case f.Line <= 0:
		return fmt.Sprintf("%s (%s)", f.Function, f.File)
	default:
		return fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line)
	}
}

// IsRuntimeFile reports whether a mapped file is part of the CUDA runtime or
// driver (libcudart*, libcuda.so*): frames there are the plumbing under the
// user's call, not where the memory was asked for.
func IsRuntimeFile(file string) bool {
	base := path.Base(file)
	return strings.Contains(base, "libcudart") || strings.HasPrefix(base, "libcuda.so")
}

// IsAllocatorFile reports whether a mapped file is a framework's caching
// allocator (PyTorch's libc10_cuda*): its frames (alloc_block, malloc,
// c10_alloc...) sit between the user's tensor and the CUDA call, so a
// stack's Site skips them as it skips the runtime's.
func IsAllocatorFile(file string) bool {
	return strings.HasPrefix(path.Base(file), "libc10_cuda")
}

// IsGlueFile reports whether a mapped file is glue between the user's code
// and the CUDA call rather than code a user would change: the FFI layers
// (libffi, CPython's _ctypes, the cffi backend), the interpreter itself
// (libpython, or a python executable with it linked in: its eval loop and
// call machinery), and the C library and loader (thread and process entry).
// Its frames never make a site.
func IsGlueFile(file string) bool {
	base := path.Base(file)
	for _, p := range []string{"libffi", "_ctypes", "_cffi_backend", "libpython", "libc.so", "libc-", "ld-linux", "libpthread"} {
		if strings.HasPrefix(base, p) {
			return true
		}
	}
	return isPythonExecutable(base)
}

// isPythonExecutable matches the interpreter's executables: "python", or
// "python" and a version (python3, python3.11, python3.13t, python3.11d,
// and builds renamed after it, python3.13-shared).
func isPythonExecutable(base string) bool {
	rest, ok := strings.CutPrefix(base, "python")
	return ok && (rest == "" || rest[0] >= '0' && rest[0] <= '9')
}

// isGlueSource reports whether a frame outside any mapping (interpreted
// code: a Python frame) is the language's plumbing rather than the user's:
// the import machinery (<frozen importlib._bootstrap>) and the ctypes and
// cffi packages' own Python code.
func isGlueSource(file string) bool {
	return strings.HasPrefix(file, "<frozen ") ||
		strings.Contains(file, "/ctypes/") || strings.Contains(file, "/cffi/")
}

// isLibrarySource reports whether a Python frame's file is an installed
// library's or the standard library's rather than the user's own code:
// under site-packages or dist-packages, or under lib/python3.N/. Such
// frames (torch/nn/functional.py's linear) make a site only when a stack
// has no frame of the user's.
func isLibrarySource(file string) bool {
	if strings.Contains(file, "/site-packages/") || strings.Contains(file, "/dist-packages/") {
		return true
	}
	for _, lib := range []string{"/lib/python", "/lib64/python"} {
		i := strings.Index(file, lib)
		if i < 0 {
			continue
		}
		rest := file[i+len(lib):]
		j := strings.IndexByte(rest, '/')
		if j > 0 && strings.Trim(rest[:j], "0123456789.t") == "" {
			return true
		}
	}
	return false
}

// siteCandidate reports whether a frame may be a stack's site: it has a
// name, and it is neither the CUDA runtime or driver (by file, or by name
// when linked in: IsRuntimeFunction), nor in a caching allocator, nor glue
// (IsGlueFile, isGlueSource).
func siteCandidate(f event.Frame, m *event.Mapping) bool {
	// A Python code object that could not be read is a placeholder named
	// by its address: unnamed, for the site's purpose.
	if f.Function == "" || strings.HasPrefix(f.Function, "<python code ") {
		return false
	}
	if IsRuntimeFunction(f.Function) {
		return false
	}
	if m == nil {
		return !isGlueSource(f.File)
	}
	return !IsRuntimeFile(m.File) && !IsAllocatorFile(m.File) && !IsGlueFile(m.File)
}

// renderStack copies a stack record, renders its frames, and finds its
// candidate site frames; Site is the leaf-most of them until assignSites
// has seen the process's other stacks.
func renderStack(s *event.Stack, mappings map[event.MappingID]event.Mapping) *Stack {
	out := &Stack{ID: s.ID, PID: s.PID, Frames: s.Frames,
		Lines: make([]string, len(s.Frames)), Runtime: make([]bool, len(s.Frames)), SiteFrame: -1, Helper: -1}
	var library []int
	for i, f := range s.Frames {
		var mp *event.Mapping
		if m, ok := mappings[f.Mapping]; ok && f.Mapping != 0 {
			mp = &m
		}
		out.Lines[i] = RenderFrame(f, mp)
		// A statically linked runtime lives in the user's file: its
		// frames are known by name (IsRuntimeFunction).
		out.Runtime[i] = mp != nil && (IsRuntimeFile(mp.File) || IsRuntimeFunction(f.Function))
		if siteCandidate(f, mp) {
			if mp == nil && isLibrarySource(f.File) {
				library = append(library, i)
			} else {
				out.candidates = append(out.candidates, i)
			}
		}
	}
	if len(out.candidates) == 0 {
		// Only library Python frames: they are better than nothing.
		out.candidates = library
	}
	out.Site = NoStack
	if len(out.candidates) > 0 {
		out.SiteFrame = out.candidates[0]
		out.Site = out.Lines[out.SiteFrame]
		return out
	}
	// No named user frame (a frame-pointer walk cut short in a library
	// built without them, a stripped binary): name the leaf-most frame
	// outside the runtime and the allocator, even unnamed, rather than
	// nothing; failing that, the leaf.
	for i, rt := range out.Runtime {
		if m, ok := mappings[s.Frames[i].Mapping]; ok && s.Frames[i].Mapping != 0 && IsAllocatorFile(m.File) {
			continue
		}
		if !rt {
			out.SiteFrame, out.Site = i, out.Lines[i]
			return out
		}
	}
	if len(out.Lines) > 0 {
		out.SiteFrame, out.Site = 0, out.Lines[0]
	}
	return out
}

// frameKey identifies a frame's function for the site rule: the function
// and its file, not the line (one function calling at two lines is one
// caller).
func frameKey(f event.Frame) string {
	return f.Function + "\x00" + f.File
}

// sitePath is a stack's candidate frames, leaf first, with direct recursion
// folded: a run of frames of one function counts once, as its leaf-most
// frame (the one that made the call toward the allocation).
func sitePath(s *Stack) []int {
	var out []int
	for _, i := range s.candidates {
		if n := len(out); n > 0 && frameKey(s.Frames[out[n-1]]) == frameKey(s.Frames[i]) {
			continue
		}
		out = append(out, i)
	}
	return out
}

// assignSites names each allocation stack's site from the process's other
// allocation stacks (see "Sites" in doc.go): walking a stack's candidate
// frames from the leaf, the first frame whose leaf-side path is left by
// another of the process's stacks (a caller apart from this one's, or a
// stack that ends there) is a shared helper, and the frame just outside it
// tells this stack apart: the site is "caller -> helper", a call edge of
// the stack. byPID holds each process's allocation stacks.
//
// The leaf-side paths form a trie per process, its nodes numbered and its
// frame keys interned, so the work is linear in the frames however deep
// the stacks.
func assignSites(stacks map[event.StackID]*Stack, byPID map[uint32][]event.StackID) {
	const (
		unset = -2 // no stack has passed the node yet
		end   = -1 // a stack ends at the node
	)
	type edge struct{ parent, key int32 }
	for _, ids := range byPID {
		keys := make(map[string]int32)
		intern := func(f event.Frame) int32 {
			k := frameKey(f)
			id, ok := keys[k]
			if !ok {
				id = int32(len(keys))
				keys[k] = id
			}
			return id
		}
		children := make(map[edge]int32)
		after := []int32{unset} // node 0 is the root, above every leaf
		branches := []bool{false}
		nodes := make(map[event.StackID][]int32, len(ids))
		for _, id := range ids {
			s := stacks[id]
			if s == nil || len(s.candidates) == 0 {
				continue
			}
			p := sitePath(s)
			path := make([]int32, len(p))
			ks := make([]int32, len(p))
			for k, i := range p {
				ks[k] = intern(s.Frames[i])
			}
			node := int32(0)
			for k := range p {
				e := edge{node, ks[k]}
				c, ok := children[e]
				if !ok {
					c = int32(len(after))
					children[e] = c
					after = append(after, unset)
					branches = append(branches, false)
				}
				node, path[k] = c, c
				next := int32(end)
				if k+1 < len(p) {
					next = ks[k+1]
				}
				switch after[node] {
				case unset:
					after[node] = next
				case next:
				default:
					branches[node] = true
				}
			}
			nodes[id] = path
		}
		for id, path := range nodes {
			s := stacks[id]
			p := sitePath(s)
			for k, node := range path {
				if !branches[node] {
					continue
				}
				if k+1 < len(p) {
					s.SiteFrame, s.Helper = p[k+1], p[k]
					s.Site = s.Lines[p[k+1]] + " -> " + s.Lines[p[k]]
				}
				break
			}
		}
	}
}

// Site returns where stack id asked for memory, rendered (Stack.Site, see
// "Sites" in doc.go); NoStack when the stack is unknown.
func (r *Result) Site(id event.StackID) string {
	if s := r.Stacks[id]; s != nil {
		return s.Site
	}
	return NoStack
}

// Lines returns the rendered frames of stack id, leaf first; [NoStack] when
// the stack is unknown or empty.
func (r *Result) Lines(id event.StackID) []string {
	if s := r.Stacks[id]; s != nil && len(s.Lines) > 0 {
		return s.Lines
	}
	return []string{NoStack}
}

// DeviceName renders a device index: "unknown" for event.DeviceUnknown, the
// decimal index otherwise.
func DeviceName(d int32) string {
	if d == event.DeviceUnknown {
		return "unknown"
	}
	return fmt.Sprint(d)
}
