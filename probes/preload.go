//go:build linux

package probes

// Libraries probed before they are mapped. A stop is seen by the target: a
// thread's interrupted epoll_wait or nanosleep returns EINTR (the kernel
// does that after any stop and continue, with no handler installed), and a
// SIGCONT handler runs. So the loader probe stops a target only for a file
// the session has not examined yet (bpf/vramprof.bpf.c, quiet; loaded.go),
// and the session examines, before the target can map them, the CUDA
// libraries it would find by name: the runtime, the driver the runtime
// dlopen()s at its first call, and the libraries allocator specs name.
// uprobes belong to a file, not to a mapping: a probe placed on a file
// before any process maps it fires in the first call of the process that
// maps it later, with nobody stopped.
//
// Where the target's loader would look (ld.so(8)): LD_LIBRARY_PATH, the
// RUNPATH and RPATH of every object it maps, /etc/ld.so.cache and the
// default directories; and where Python packages keep their CUDA
// libraries: pip's nvidia/*/lib and each package's lib beside the
// site-packages directories the target maps a file from, or its
// interpreter's prefix, VIRTUAL_ENV or PYTHONPATH names. A CUDA library
// found nowhere there (dlopen()ed by a path built at run time) still stops
// the target once, as every file not examined does.

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/vramprof/vramprof/probes/symbolize"
)

// noPreload is a test hook, from $VRAMPROF_TEST_NO_PRELOAD=1: nothing is
// examined before the target maps it, so that tests can hold or kill
// vramprof at the stop a library load takes without preload. Never set it
// outside tests.
var noPreload = os.Getenv("VRAMPROF_TEST_NO_PRELOAD") == "1"

// maxPreload bounds the files preload examines for one process: a search
// path that names a huge directory of look-alikes costs no more.
const maxPreload = 256

// preload examines the CUDA libraries p would find by name and probes
// those that hold traced functions, before p maps them (see the top of
// this file). env is p's environment. Only with the file fault watch
// (quiet): without it the target is stopped at every rendezvous anyway.
// A file that cannot be read is left to the stop.
func (s *Session) preload(p *proc, env []string) {
	if !s.watching || noPreload {
		return
	}
	specs := append(append([]probeSpec{}, cudaProbes...), loaderProbe)
	root := fmt.Sprintf("/proc/%d/root", p.pid)
	for i, path := range s.preloadPaths(p.pid, env) {
		if i == maxPreload {
			break
		}
		open := filepath.Join(root, path)
		var st syscall.Stat_t
		if syscall.Stat(open, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
			continue
		}
		// The name /proc/PID/maps will show once it is mapped, for its
		// Library record: links resolved (libcuda.so -> libcuda.so.1,
		// /lib -> usr/lib).
		path = resolveIn(root, path)
		c := candidate{Key: fileKey{Dev: st.Dev, Inode: st.Ino}, Path: path, OpenPath: filepath.Join(root, path)}
		if s.notCUDA[c.Key] || s.loader.att.files[c.Key] != nil {
			continue
		}
		pf, err := scanFile(c, specs, !s.opts.NoPool, s.allocs)
		if err != nil || pf == nil {
			s.notCUDA[c.Key] = true
			s.examined(c.Key, c.OpenPath, false)
			continue
		}
		if pf.StrippedRuntime || len(pf.Skipped) > 0 || len(semaphoreSites(pf)) > 0 {
			// Left to the stop: the kernel may leave a file's USDT
			// semaphores at 0 when it is mapped after it was probed, and
			// they must be raised before the target runs on
			// (semaphore.go); what cannot be probed is said when the
			// target maps it.
			continue
		}
		if err := s.loader.att.attach(pf); err != nil {
			continue // left to the stop, which attaches or says why
		}
		s.examined(c.Key, c.OpenPath, pf.library())
	}
}

// preloadPaths lists, as pid sees them, the files named like a CUDA
// library in the directories pid's loader and Python would search.
func (s *Session) preloadPaths(pid uint32, env []string) []string {
	root := fmt.Sprintf("/proc/%d/root", pid)
	var dirs []string
	getenv := func(name string) string {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, name+"="); ok {
				return v
			}
		}
		return ""
	}
	dirs = append(dirs, filepath.SplitList(getenv("LD_LIBRARY_PATH"))...)
	maps, _ := symbolize.ReadMaps(int(pid))
	seen := make(map[string]bool)
	var sitePackages []string
	for _, m := range maps {
		if m.Path == "" || m.Path[0] != '/' || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		dirs = append(dirs, runPaths(filepath.Join(root, m.Path), filepath.Dir(m.Path))...)
		if sp := sitePackagesOf(m.Path); sp != "" {
			sitePackages = append(sitePackages, sp)
		}
		if strings.Contains(filepath.Base(m.Path), "python") {
			// The interpreter or libpython: its prefix's site-packages.
			prefix := filepath.Dir(filepath.Dir(m.Path))
			found, _ := filepath.Glob(filepath.Join(root, prefix, "lib", "python3*", "*-packages"))
			for _, f := range found {
				sitePackages = append(sitePackages, strings.TrimPrefix(f, root))
			}
		}
	}
	if venv := getenv("VIRTUAL_ENV"); venv != "" {
		found, _ := filepath.Glob(filepath.Join(root, venv, "lib", "python3*", "site-packages"))
		for _, f := range found {
			sitePackages = append(sitePackages, strings.TrimPrefix(f, root))
		}
	}
	sitePackages = append(sitePackages, filepath.SplitList(getenv("PYTHONPATH"))...)
	for _, sp := range sitePackages {
		for _, pattern := range []string{"nvidia/*/lib", "*/lib"} {
			found, _ := filepath.Glob(filepath.Join(root, sp, pattern))
			for _, f := range found {
				dirs = append(dirs, strings.TrimPrefix(f, root))
			}
		}
	}
	dirs = append(dirs, "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")

	var out []string
	seenFile := make(map[string]bool)
	add := func(path string) {
		if !seenFile[path] && s.cudaName(filepath.Base(path)) {
			seenFile[path] = true
			out = append(out, path)
		}
	}
	seenDir := make(map[string]bool)
	for _, d := range dirs {
		if d == "" || d[0] != '/' || seenDir[d] {
			continue
		}
		seenDir[d] = true
		entries, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			continue
		}
		for _, e := range entries {
			add(filepath.Join(d, e.Name()))
		}
	}
	for _, path := range ldCachePaths(filepath.Join(root, "etc/ld.so.cache")) {
		add(path)
	}
	return out
}

// cudaName reports whether a file's base name is one a traced library
// goes by: the CUDA runtime (libcudart.so.12, pip's hashed
// libcudart-1a2b3c4d.so.12), the driver (libcuda.so.1), or a library an
// allocator spec names.
func (s *Session) cudaName(base string) bool {
	if !strings.Contains(base, ".so") {
		return false
	}
	if strings.HasPrefix(base, "libcudart") || strings.HasPrefix(base, "libcuda.so") {
		return true
	}
	for i := range s.allocs {
		if s.allocs[i].MatchLibrary(base) {
			return true
		}
	}
	return false
}

// sitePackagesOf returns the site-packages (or Debian's dist-packages)
// directory path lies in, or "".
func sitePackagesOf(path string) string {
	for _, name := range []string{"/site-packages/", "/dist-packages/"} {
		if i := strings.Index(path, name); i >= 0 {
			return path[:i+len(name)-1]
		}
	}
	return ""
}

// runPaths returns the directories in the RUNPATH and RPATH of the ELF file
// at open, with $ORIGIN (and ${ORIGIN}) replaced by origin, the file's
// directory as its process sees it.
func runPaths(open, origin string) []string {
	ef, err := elf.Open(open)
	if err != nil {
		return nil
	}
	defer ef.Close()
	var out []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := ef.DynString(tag)
		for _, v := range vals {
			for _, d := range filepath.SplitList(v) {
				d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", origin), "$ORIGIN", origin)
				out = append(out, filepath.Clean(d))
			}
		}
	}
	return out
}

// ldCachePaths returns the library paths /etc/ld.so.cache lists: the
// absolute paths in its string table (both of glibc's formats keep them
// there, NUL-terminated).
func ldCachePaths(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("ld.so-1.7.0")) && !bytes.HasPrefix(b, []byte("glibc-ld.so.cache")) {
		return nil
	}
	var out []string
	for _, s := range bytes.Split(b, []byte{0}) {
		if len(s) > 1 && s[0] == '/' {
			out = append(out, string(s))
		}
	}
	return out
}

// procEnviron returns pid's environment as it started (/proc/PID/environ),
// or nil when it cannot be read.
func procEnviron(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil
	}
	var env []string
	for _, kv := range bytes.Split(b, []byte{0}) {
		if len(kv) > 0 {
			env = append(env, string(kv))
		}
	}
	return env
}

// maxLinks bounds the links resolveIn follows, as the kernel's path walk
// does (ELOOP after 40).
const maxLinks = 40

// resolveIn returns path with every symbolic link in it resolved, as a
// process whose root directory is root (/proc/PID/root) resolves it, or
// path itself when that fails.
func resolveIn(root, path string) string {
	out := "/"
	rest := strings.Split(path, "/")
	for links := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			out = filepath.Dir(out)
			continue
		}
		next := filepath.Join(out, c)
		target, err := os.Readlink(filepath.Join(root, next))
		if errors.Is(err, syscall.EINVAL) { // not a link
			out = next
			continue
		}
		if links++; err != nil || links > maxLinks {
			return path
		}
		if filepath.IsAbs(target) {
			out = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return out
}
