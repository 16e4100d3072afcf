package python

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	"github.com/vramprof/vramprof/probes/symbolize"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrNotPython: the process maps no file that defines _PyRuntime.
	ErrNotPython = errors.New("no CPython interpreter in process")
	// ErrUnsupported: the interpreter is a version (or build) package
	// python has no layout for, or its version cannot be told.
	ErrUnsupported = errors.New("unsupported CPython")
)

// Interpreter is a CPython found in a process.
type Interpreter struct {
	Version     Version
	Path        string // the file holding _PyRuntime (python executable, or libpython3.X.so), as the process maps it
	RuntimeAddr uint64 // run-time address of _PyRuntime in the process
	Layout      Layout

	// Run-time addresses of the type objects the Resolver checks objects
	// against.
	CodeType    uint64 // PyCode_Type
	UnicodeType uint64 // PyUnicode_Type
	BytesType   uint64 // PyBytes_Type
}

// libpythonName matches the shared libraries that may hold the
// interpreter: libpython3.11.so.1.0, libpython3.12d.so and the like.
var libpythonName = regexp.MustCompile(`^libpython\d+\.\d+[a-z]*\.so`)

// pythonName matches interpreter executables: python3, python3.11,
// python3.13t.
var pythonName = regexp.MustCompile(`^python\d+(\.\d+[a-z]*)?$`)

// Find looks for a CPython in the live process pid: its executable, then
// any mapped libpython3.X.so*, the first that defines _PyRuntime (in
// .dynsym or .symtab). The version comes from Py_Version's value in the
// file (3.11+), else from the file name and PY_VERSION in .rodata (3.10); for 3.13+ the
// Layout is built from the _Py_DebugOffsets that the running interpreter
// holds at _PyRuntime (read from /proc/PID/mem), for older versions from
// the built-in tables. Files are opened through /proc/PID/root, so
// processes in containers work. Errors: ErrNotPython when no mapped file
// defines _PyRuntime, ErrUnsupported for a version outside 3.10-3.14 or
// one that cannot be told; others come from /proc (a process that exited,
// missing privileges). Safe for concurrent use.
func Find(pid int) (*Interpreter, error) {
	maps, err := symbolize.ReadMaps(pid)
	if err != nil {
		return nil, fmt.Errorf("find python in pid %d: %w", pid, err)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return nil, fmt.Errorf("find python in pid %d: %w", pid, err)
	}
	stripped := ""
	for _, path := range candidates(maps, exe) {
		in, err := inspect(pid, path, maps)
		if errors.Is(err, errNoRuntime) {
			if base := filepath.Base(path); stripped == "" && (libpythonName.MatchString(base) || pythonName.MatchString(base)) && !needsLibpython(pid, path) {
				stripped = path
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("find python in pid %d: %w", pid, err)
		}
		return in, nil
	}
	if stripped != "" {
		// Named like an interpreter, without the symbol that finds its
		// state: a build stripped of its dynamic symbols, or a static
		// embedding without -rdynamic.
		return nil, fmt.Errorf("find python in pid %d: %s defines no _PyRuntime symbol (stripped?): %w", pid, stripped, ErrUnsupported)
	}
	return nil, fmt.Errorf("pid %d: %w", pid, ErrNotPython)
}

// candidates lists the mapped files that may hold the interpreter, the
// executable first, each once.
func candidates(maps []symbolize.MapEntry, exe string) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range maps {
		if m.Path == exe && !seen[m.Path] {
			seen[m.Path] = true
			out = append(out, m.Path)
		}
	}
	for _, m := range maps {
		// libpython3.X.so, or a python3.X executable that is not the
		// process's executable: started through a dynamic loader run as a
		// command (ld-linux-x86-64.so.2 /path/python3.X), /proc/PID/exe is
		// the loader.
		base := filepath.Base(m.Path)
		if (libpythonName.MatchString(base) || pythonName.MatchString(base)) && !seen[m.Path] {
			seen[m.Path] = true
			out = append(out, m.Path)
		}
	}
	return out
}

// errNoRuntime: the file does not define _PyRuntime.
var errNoRuntime = errors.New("no _PyRuntime")

// inspect reads the interpreter out of one mapped file.
func inspect(pid int, path string, maps []symbolize.MapEntry) (*Interpreter, error) {
	host := filepath.Join(fmt.Sprintf("/proc/%d/root", pid), path)
	f, err := symbolize.OpenFile(host)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	syms := definedSymbols(f, "_PyRuntime", "Py_Version", "PyCode_Type", "PyUnicode_Type", "PyBytes_Type")
	runtime, ok := syms["_PyRuntime"]
	if !ok {
		return nil, errNoRuntime
	}
	v, err := fileVersion(f, path, syms)
	if err != nil {
		return nil, err
	}
	if !v.supported() {
		return nil, fmt.Errorf("%s is CPython %d.%d: %w (3.10 to 3.14 are)", path, v.Major, v.Minor, ErrUnsupported)
	}
	bias, err := loadBias(f, path, maps)
	if err != nil {
		return nil, err
	}
	in := &Interpreter{Version: v, Path: path, RuntimeAddr: runtime.Value + bias}
	for name, dst := range map[string]*uint64{"PyCode_Type": &in.CodeType, "PyUnicode_Type": &in.UnicodeType, "PyBytes_Type": &in.BytesType} {
		s, ok := syms[name]
		if !ok {
			return nil, fmt.Errorf("%s defines _PyRuntime but not %s: %w", path, name, ErrUnsupported)
		}
		*dst = s.Value + bias
	}
	if v.AtLeast(3, 13) {
		if err := in.readDebugOffsets(pid); err != nil {
			return nil, err
		}
		return in, nil
	}
	in.Layout, _ = tableLayout(v)
	return in, nil
}

// definedSymbols looks names up among the file's defined symbols (.dynsym
// and .symtab; an executable linked against libpython lists _PyRuntime as
// undefined, which Lookup does not find), keeping those with an address.
func definedSymbols(f *symbolize.File, names ...string) map[string]symbolize.Symbol {
	out := map[string]symbolize.Symbol{}
	for _, n := range names {
		if s, ok := f.Lookup(n); ok && s.Value != 0 {
			out[n] = s
		}
	}
	return out
}

// fileVersion reads Py_Version (const unsigned long, 3.11+) from the file,
// else the version in the file's name.
func fileVersion(f *symbolize.File, path string, syms map[string]symbolize.Symbol) (Version, error) {
	if s, ok := syms["Py_Version"]; ok {
		b, err := f.ReadVirtual(s.Value, 4)
		if err != nil {
			return Version{}, fmt.Errorf("read Py_Version of %s: %w", path, err)
		}
		return versionFromHex(uint64(binary.LittleEndian.Uint32(b))), nil
	}
	if v, ok := versionFromName(filepath.Base(path)); ok {
		v.Micro = microFromRodata(f.ELF(), v)
		return v, nil
	}
	return Version{}, fmt.Errorf("%s defines _PyRuntime but neither Py_Version nor its name tells the version: %w", path, ErrUnsupported)
}

// loadBias is what to add to the file's link-time addresses to get
// run-time ones (0 for a fixed-address executable), from the file's first
// mapping (symbolize.File.LoadBias).
func loadBias(f *symbolize.File, path string, maps []symbolize.MapEntry) (uint64, error) {
	for i := range maps {
		if maps[i].Path != path {
			continue
		}
		if bias, ok := f.LoadBias(&maps[i]); ok {
			return bias, nil
		}
	}
	return 0, fmt.Errorf("no mapping of %s matches its program headers", path)
}

// readDebugOffsets builds the Layout from the interpreter's
// _Py_DebugOffsets (3.13+) and takes the full version from it.
func (in *Interpreter) readDebugOffsets(pid int) error {
	raw := make([]byte, debugSize(in.Version.Minor))
	if err := readMem(pid, in.RuntimeAddr, raw); err != nil {
		return fmt.Errorf("read _Py_DebugOffsets of %s: %w", in.Path, err)
	}
	d, err := decodeDebugOffsets(raw, in.Version.Minor)
	if err != nil {
		return fmt.Errorf("%s (CPython %s): %w: %w", in.Path, in.Version, ErrUnsupported, err)
	}
	dv := versionFromHex(d["version"])
	if dv.Major != in.Version.Major || dv.Minor != in.Version.Minor {
		return fmt.Errorf("%s: _Py_DebugOffsets says %s, the file %s: %w", in.Path, dv, in.Version, ErrUnsupported)
	}
	in.Version = dv
	if in.Layout, err = d.layout(); err != nil {
		return fmt.Errorf("%s (CPython %s): %w: %w", in.Path, in.Version, ErrUnsupported, err)
	}
	return nil
}

// readMem reads len(b) bytes of the process's memory at addr.
func readMem(pid int, addr uint64, b []byte) error {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.ReadAt(b, int64(addr))
	return err
}

// microFromRodata finds the micro version of an interpreter without
// Py_Version (3.10): PY_VERSION, "3.10.13", is a string literal in .rodata
// (Py_GetVersion formats it). 0 when it is not there exactly once.
func microFromRodata(f *elf.File, v Version) int {
	sec := f.Section(".rodata")
	if sec == nil {
		return 0
	}
	data, err := sec.Data()
	if err != nil {
		return 0
	}
	// The linker may merge it into the tail of a longer string (a path
	// ending in the version): match a suffix.
	re := regexp.MustCompile(fmt.Sprintf(`[^0-9.]%d\.%d\.(\d{1,2})\x00`, v.Major, v.Minor))
	found := re.FindAllSubmatch(data, 8)
	if len(found) == 0 {
		return 0
	}
	for _, m := range found[1:] {
		if string(m[1]) != string(found[0][1]) {
			return 0 // two versions: neither is certain
		}
	}
	micro, _ := strconv.Atoi(string(found[0][1]))
	return micro
}

// needsLibpython reports whether the file links libpython3.X.so (pyenv's
// and most embedding executables): its _PyRuntime is there, mapped by the
// loader after the executable, so lacking it is no sign of stripping.
func needsLibpython(pid int, path string) bool {
	f, err := elf.Open(filepath.Join(fmt.Sprintf("/proc/%d/root", pid), path))
	if err != nil {
		return true // cannot tell: do not accuse it
	}
	defer f.Close()
	libs, _ := f.ImportedLibraries()
	return slices.ContainsFunc(libs, libpythonName.MatchString)
}
