//go:build linux

package probes

import (
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"strings"
)

// runtimeMarkers are strings every CUDA runtime carries in its read-only
// data, symbols or not: cudaGetErrorName's name for error 35 and
// cudaGetErrorString's text for it. NVIDIA's libcudart (shared and static,
// CUDA 11 and 12) and testdata's fake runtime hold both. A file holds the
// runtime only when it holds both: one alone could be a program's own error
// table.
var runtimeMarkers = [][]byte{
	[]byte("cudaErrorInsufficientDriver\x00"),
	[]byte("CUDA driver version is insufficient for CUDA runtime version\x00"),
}

// maxMarkerScan bounds the read-only data searched for runtimeMarkers in
// one file. The runtime's strings are a few hundred kilobytes; a library's
// .rodata past this size is not read at all, so that attach stays quick on
// a trainer that maps gigabyte libraries (their device code is in
// .nv_fatbin, not here). A runtime there goes unnoticed, as it did before
// the check existed.
const maxMarkerScan = 256 << 20

// markerChunk is how much read-only data is read at a time: the search
// needs no more memory than this however big the section.
const markerChunk = 1 << 20

// hasStrippedRuntime reports whether f, which defines none of the CUDA
// runtime's API symbols, holds a CUDA runtime all the same: one linked in
// statically and stripped (strip -s, --strip-unneeded; NVIDIA's libraries
// carry such private runtimes). Its calls cannot be probed; the driver's
// under them can. The test is the runtime's own strings in read-only data
// (runtimeMarkers), in the .rodata sections, or in the read-only loaded
// segments of a file without section headers.
func hasStrippedRuntime(f *elf.File) bool {
	var readers []io.ReaderAt
	var sizes []uint64
	for _, s := range f.Sections {
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_ALLOC == 0 || s.Flags&(elf.SHF_EXECINSTR|elf.SHF_WRITE) != 0 ||
			!strings.HasPrefix(s.Name, ".rodata") {
			continue
		}
		readers, sizes = append(readers, s), append(sizes, s.Size)
	}
	if len(f.Sections) == 0 {
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&(elf.PF_X|elf.PF_W) == 0 {
				readers, sizes = append(readers, p), append(sizes, p.Filesz)
			}
		}
	}
	found := make([]bool, len(runtimeMarkers))
	overlap := 0 // a marker may straddle two chunks
	for _, m := range runtimeMarkers {
		overlap = max(overlap, len(m)-1)
	}
	buf := make([]byte, markerChunk+overlap)
	for i, r := range readers {
		if sizes[i] > maxMarkerScan {
			continue
		}
		// Each chunk is searched with the last bytes of the one before.
		kept := 0
		for off := uint64(0); off < sizes[i]; off += markerChunk {
			n, err := r.ReadAt(buf[kept:kept+int(min(markerChunk, sizes[i]-off))], int64(off))
			if err != nil && !errors.Is(err, io.EOF) {
				break // unreadable: nothing more can be said of it
			}
			data := buf[:kept+n]
			for j, m := range runtimeMarkers {
				found[j] = found[j] || bytes.Contains(data, m)
			}
			kept = copy(buf, data[max(0, len(data)-overlap):])
		}
	}
	for _, ok := range found {
		if !ok {
			return false
		}
	}
	return true
}
