package analysis

import (
	"fmt"
	"path"
	"strings"

	"github.com/vramprof/vramprof/probes/event"
)

// NoStack is how a missing stack (StackID 0, or a stack record never seen)
// is rendered.
const NoStack = "[no stack]"

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

// renderStack copies a stack record and renders its frames.
func renderStack(s *event.Stack, mappings map[event.MappingID]event.Mapping) *Stack {
	out := &Stack{ID: s.ID, PID: s.PID, Frames: s.Frames,
		Lines: make([]string, len(s.Frames)), Runtime: make([]bool, len(s.Frames))}
	for i, f := range s.Frames {
		var mp *event.Mapping
		if m, ok := mappings[f.Mapping]; ok && f.Mapping != 0 {
			mp = &m
		}
		out.Lines[i] = RenderFrame(f, mp)
		// A statically linked runtime lives in the user's file: its
		// frames are known by name (IsRuntimeFunction).
		out.Runtime[i] = mp != nil && (IsRuntimeFile(mp.File) || IsRuntimeFunction(f.Function))
	}
	out.Site = NoStack
	for i, rt := range out.Runtime {
		if m, ok := mappings[s.Frames[i].Mapping]; ok && s.Frames[i].Mapping != 0 && IsAllocatorFile(m.File) {
			continue
		}
		if !rt {
			out.Site = out.Lines[i]
			break
		}
	}
	if out.Site == NoStack && len(out.Lines) > 0 {
		// Only runtime frames (a short frame-pointer walk): name the leaf
		// rather than nothing.
		out.Site = out.Lines[0]
	}
	return out
}

// Site returns where stack id asked for memory: the leaf-most frame outside
// the CUDA runtime, rendered; NoStack when the stack is unknown.
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
