package symbolize

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrMaps means a /proc/PID/maps line could not be parsed.
var ErrMaps = errors.New("malformed maps line")

// deletedSuffix is what the kernel appends to the path of a mapped file that
// was unlinked (or replaced, as by a package upgrade) after it was mapped.
const deletedSuffix = " (deleted)"

// MapEntry is one file-backed line of /proc/PID/maps.
type MapEntry struct {
	Start   uint64 // first byte of the mapping
	End     uint64 // one past its last byte
	Perms   string // "r-xp" and so on
	Offset  uint64 // file offset mapped at Start
	Dev     string // "major:minor" of the file's device, as the kernel prints it
	Inode   uint64
	Path    string // as seen inside the process's mount namespace, without " (deleted)"
	Deleted bool   // the file was unlinked after it was mapped
}

// Exec reports whether the mapping is executable: where code addresses lie.
func (m *MapEntry) Exec() bool { return len(m.Perms) > 2 && m.Perms[2] == 'x' }

// Contains reports whether addr lies in the mapping.
func (m *MapEntry) Contains(addr uint64) bool { return addr >= m.Start && addr < m.End }

// ReadMaps reads the file-backed mappings of a process from
// /proc/PID/maps. Reading another user's process needs the same rights as
// ptrace (root, or CAP_SYS_PTRACE).
func ReadMaps(pid int) ([]MapEntry, error) {
	return readMaps("/proc", pid)
}

func readMaps(procRoot string, pid int) ([]MapEntry, error) {
	data, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "maps"))
	if err != nil {
		return nil, fmt.Errorf("read maps of pid %d: %w", pid, err)
	}
	maps, err := ParseMaps(data)
	if err != nil {
		return nil, fmt.Errorf("read maps of pid %d: %w", pid, err)
	}
	return maps, nil
}

// ParseMaps parses the text of a /proc/PID/maps file. It keeps every
// mapping backed by a file (executable or not, since the other segments of
// an ELF file help tell how it was loaded) and drops anonymous memory and
// the kernel's pseudo-files ([heap], [stack], [vdso], ...).
func ParseMaps(data []byte) ([]MapEntry, error) {
	var out []MapEntry
	for n := 1; len(data) > 0; n++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, err := parseMapsLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %w", n, line, err)
		}
		if m.Inode == 0 || len(m.Path) == 0 || m.Path[0] != '/' {
			continue // anonymous or a pseudo-file
		}
		out = append(out, m)
	}
	return out, nil
}

// parseMapsLine parses "start-end perms offset dev inode   path". The path
// is everything after the inode and the padding, spaces included.
func parseMapsLine(line []byte) (MapEntry, error) {
	var m MapEntry
	var fields [5][]byte
	rest := line
	for i := range fields {
		rest = bytes.TrimLeft(rest, " ")
		j := bytes.IndexByte(rest, ' ')
		if j < 0 {
			if i < len(fields)-1 {
				return m, fmt.Errorf("%w: %d fields, want at least 5", ErrMaps, i+1)
			}
			j = len(rest)
		}
		fields[i], rest = rest[:j], rest[j:]
	}
	addrs := fields[0]
	dash := bytes.IndexByte(addrs, '-')
	if dash < 0 {
		return m, fmt.Errorf("%w: address range %q", ErrMaps, addrs)
	}
	var err error
	if m.Start, err = strconv.ParseUint(string(addrs[:dash]), 16, 64); err != nil {
		return m, fmt.Errorf("%w: start: %w", ErrMaps, err)
	}
	if m.End, err = strconv.ParseUint(string(addrs[dash+1:]), 16, 64); err != nil {
		return m, fmt.Errorf("%w: end: %w", ErrMaps, err)
	}
	if m.End < m.Start {
		return m, fmt.Errorf("%w: range ends before it starts", ErrMaps)
	}
	if len(fields[1]) != 4 {
		return m, fmt.Errorf("%w: permissions %q", ErrMaps, fields[1])
	}
	m.Perms = string(fields[1])
	if m.Offset, err = strconv.ParseUint(string(fields[2]), 16, 64); err != nil {
		return m, fmt.Errorf("%w: offset: %w", ErrMaps, err)
	}
	m.Dev = string(fields[3])
	if m.Inode, err = strconv.ParseUint(string(fields[4]), 10, 64); err != nil {
		return m, fmt.Errorf("%w: inode: %w", ErrMaps, err)
	}
	path := string(bytes.TrimLeft(rest, " "))
	if p, ok := strings.CutSuffix(path, deletedSuffix); ok {
		path, m.Deleted = p, true
	}
	m.Path = path
	return m, nil
}
