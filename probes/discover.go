//go:build linux

package probes

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"

	"github.com/vramprof/vramprof/probes/symbolize"
)

// fileKey identifies a file independently of the path it was reached by:
// uprobes are per inode, so each file is probed once however many processes
// or mount namespaces map it.
type fileKey struct {
	Dev   uint64
	Inode uint64
}

// candidate is an executable file mapped by a target, to be examined for
// probe symbols.
type candidate struct {
	Key      fileKey
	Path     string // as the target maps it
	OpenPath string // where this process can open it: /proc/PID/root/<path>
}

// candidates lists the distinct executable files pid maps, reached through
// /proc/PID/root so that files in another mount namespace (a container) are
// the ones the target really runs.
func candidates(pid int, maps []symbolize.MapEntry) []candidate {
	seen := make(map[string]bool)
	var out []candidate
	for _, m := range maps {
		if !m.Exec() || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		open := filepath.Join(fmt.Sprintf("/proc/%d/root", pid), m.Path)
		var st syscall.Stat_t
		if err := syscall.Stat(open, &st); err != nil {
			continue // unlinked or raced with an unmap: nothing to probe there
		}
		out = append(out, candidate{Key: fileKey{Dev: st.Dev, Inode: st.Ino}, Path: m.Path, OpenPath: open})
	}
	return out
}

// target is a probe to place: a function at a file offset in one file.
type target struct {
	Spec   probeSpec
	Offset uint64 // file offset of the function's first instruction
}

// probedFile is a file that holds functions to probe.
type probedFile struct {
	candidate
	BuildID string
	Targets []target
}

// cudaSymbols lists the CUDA functions probed in the file (not the loader's).
func (pf *probedFile) cudaSymbols() []string {
	var syms []string
	for _, t := range pf.Targets {
		if t.Spec.Prog != progLoader {
			syms = append(syms, t.Spec.Symbol)
		}
	}
	return syms
}

// scanFile looks for specs' symbols in the ELF file at c.OpenPath. It
// returns nil, nil for a file that holds none of them, so the caller can
// remember not to look again. The check is two-stage: string tables are
// searched for the names first (cheap, bytes only), and the symbol tables
// are decoded only for the few files that pass: a trainer maps hundreds of
// libraries, some of them a gigabyte, and attach must be quick.
func scanFile(c candidate, specs []probeSpec) (*probedFile, error) {
	mentioned, err := stringTablesMention(c.OpenPath, specs)
	if err != nil || !mentioned {
		return nil, err
	}
	f, err := symbolize.OpenFile(c.OpenPath)
	if err != nil {
		return nil, fmt.Errorf("read symbols of %s: %w", c.Path, err)
	}
	defer f.Close()

	pf := &probedFile{candidate: c, BuildID: f.BuildID()}
	for _, s := range specs {
		// Lookup finds "cudaMalloc@@libcudart.so.12" by its bare name, and
		// only where the code is (not an executable's import of it).
		sym, ok := f.Lookup(s.Symbol)
		if !ok || sym.Value == 0 {
			continue
		}
		off, err := f.FileOffset(sym.Value)
		if err != nil {
			return nil, fmt.Errorf("locate %s in %s: %w", s.Symbol, c.Path, err)
		}
		pf.Targets = append(pf.Targets, target{Spec: s, Offset: off})
	}
	if len(pf.Targets) == 0 {
		return nil, nil
	}
	return pf, nil
}

// stringTablesMention reports whether any spec's name appears in the file's
// dynamic or static string table. A file that is not ELF mentions nothing.
func stringTablesMention(path string, specs []probeSpec) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return false, nil
		}
		return false, fmt.Errorf("open ELF: %w", err)
	}
	defer f.Close()
	for _, name := range []string{".dynstr", ".strtab"} {
		sec := f.Section(name)
		if sec == nil || sec.Type == elf.SHT_NOBITS {
			continue
		}
		data, err := sec.Data()
		if err != nil {
			continue
		}
		for _, s := range specs {
			// NUL on both sides: the whole name, not a part of a longer one.
			// Versioned names keep the bare name in .dynstr.
			if bytes.Contains(data, []byte("\x00"+s.Symbol+"\x00")) {
				return true, nil
			}
		}
	}
	return false, nil
}
