package compare

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// siteLocation splits a rendered site into its source file and line:
// "grow (scenarios/oom.c:38)" gives "scenarios/oom.c", 38; a site of the
// form "caller (a.py:3) -> helper (b.py:9)" gives the caller's, the line
// that tells this stack apart. ok is false for a frame without a line (an
// address, a function without debug lines).
func siteLocation(site string) (file string, line int, ok bool) {
	if i := strings.Index(site, " -> "); i >= 0 {
		site = site[:i]
	}
	if !strings.HasSuffix(site, ")") {
		return "", 0, false
	}
	open := strings.LastIndex(site, " (")
	if open < 0 {
		return "", 0, false
	}
	inner := site[open+2 : len(site)-1]
	colon := strings.LastIndexByte(inner, ':')
	if colon <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(inner[colon+1:])
	if err != nil || n <= 0 {
		return "", 0, false
	}
	return inner[:colon], n, true
}

// maxSourceWalk bounds the files sourceFiles looks at to find a relative
// path under the root: a checkout is thousands, not millions.
const maxSourceWalk = 200000

// sourceFiles resolves the files frames name to paths relative to a
// source root (the repository: GitHub resolves an annotation's file
// there). Not safe for concurrent use.
type sourceFiles struct {
	root string
	// byBase is the root's files by base name, read on first need; walked
	// says it was.
	byBase map[string][]string
	walked bool
}

// relative returns file as a path relative to the root, "" when it is not
// in it. An absolute path (a Python frame's co_filename) must lie under
// the root. A relative one (DWARF's, relative to the directory the
// compiler ran in, which the frame does not carry) is taken as it is when
// root/file exists, else it is the one file under the root whose path ends
// in /file (none or several: "").
func (s *sourceFiles) relative(file string) string {
	if s == nil || s.root == "" || file == "" {
		return ""
	}
	if filepath.IsAbs(file) {
		rel, err := filepath.Rel(s.root, file)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return ""
		}
		return filepath.ToSlash(rel)
	}
	clean := filepath.Clean(file)
	if strings.HasPrefix(clean, "../") || clean == ".." {
		return ""
	}
	if isFile(filepath.Join(s.root, clean)) {
		return filepath.ToSlash(clean)
	}
	s.walk()
	found := ""
	for _, p := range s.byBase[filepath.Base(clean)] {
		if strings.HasSuffix(p, "/"+filepath.ToSlash(clean)) {
			if found != "" {
				return "" // ambiguous: better no line than the wrong one
			}
			found = p
		}
	}
	return found
}

// walk lists the root's files once, skipping hidden directories (.git)
// and node_modules.
func (s *sourceFiles) walk() {
	if s.walked {
		return
	}
	s.walked = true
	s.byBase = map[string][]string{}
	n := 0
	_ = filepath.WalkDir(s.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable directory: skip it
		}
		if n++; n > maxSourceWalk {
			return filepath.SkipAll
		}
		name := d.Name()
		if d.IsDir() {
			if path != s.root && (strings.HasPrefix(name, ".") || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(s.root, path)
		if err == nil {
			s.byBase[name] = append(s.byBase[name], filepath.ToSlash(rel))
		}
		return nil
	})
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}
