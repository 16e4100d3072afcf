package probetest

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Python is a CPython interpreter the tests can run.
type Python struct {
	// Name tells interpreters of one version apart, for subtest names:
	// "system-3.11", "pyenv-3.12.1", "trixie-3.13", "trixie-3.13-shared".
	Name    string
	Version string   // "3.11", "3.13", ...
	Argv    []string // the command prefix that runs it (wrapper path or python path)
	Runtime string   // the file holding _PyRuntime
	Shared  bool     // _PyRuntime is in libpython (dynamic), not the executable
}

// Command returns the command that runs the interpreter with args.
func (p Python) Command(ctx context.Context, args ...string) *exec.Cmd {
	argv := append(append([]string(nil), p.Argv...), args...)
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

// minPythonMinor is the oldest CPython 3 minor version Pythons returns of
// the ones it finds installed (pyenv's).
const minPythonMinor = 10

// systemPython is Debian bookworm's python3.11, linked statically.
const systemPython = "/usr/bin/python3.11"

var fetchedPythons struct {
	once sync.Once
	list []Python
	err  error
}

// Pythons returns the interpreters available: /usr/bin/python3.11 (static),
// pyenv's 3.11.7 (shared) when present, and those testdata/python/fetch.sh
// provides (it runs the script once per test binary; when the fetch fails and
// CI is not set, the test logs why and goes on with the system's; with
// CI=true a fetch failure fails the test).
//
// pyenv's other CPython builds of 3.10 and later ($PYENV_ROOT, else
// ~/.pyenv) are returned too: on a machine that has them they are the only
// 3.10 and 3.12, which no Debian suite carries any more. fetch.sh's
// interpreters run under their Debian suite's own dynamic loader, so
// /proc/PID/exe of such a process is ld-linux-x86-64.so.2 and Runtime is one
// of its mapped files. The list is sorted by version, then name.
func Pythons(tb testing.TB) []Python {
	tb.Helper()
	var list []Python
	if p, err := installedPython("system-3.11", systemPython); err == nil {
		list = append(list, p)
	} else if !os.IsNotExist(err) {
		tb.Logf("%s: %v", systemPython, err)
	}
	list = append(list, pyenvPythons(tb)...)

	fetchedPythons.once.Do(func() {
		fetchedPythons.list, fetchedPythons.err = fetchPythons()
	})
	if err := fetchedPythons.err; err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("testdata/python/fetch.sh (CI=true: its interpreters must be there): %v", err)
		}
		tb.Logf("testdata/python/fetch.sh: %v; going on without the interpreters it failed to provide", err)
	}
	list = append(list, fetchedPythons.list...)

	sort.SliceStable(list, func(i, j int) bool {
		if vi, vj := minorOf(list[i].Version), minorOf(list[j].Version); vi != vj {
			return vi < vj
		}
		return list[i].Name < list[j].Name
	})
	return list
}

// minorOf returns the minor of a "3.N" version, or -1.
func minorOf(version string) int {
	major, minor, ok := strings.Cut(version, ".")
	n, err := strconv.Atoi(minor)
	if !ok || major != "3" || err != nil {
		return -1
	}
	return n
}

var pythonExe = regexp.MustCompile(`^python(3\.[0-9]+)$`)

// installedPython describes the interpreter exe, run as it is.
func installedPython(name, exe string) (Python, error) {
	m := pythonExe.FindStringSubmatch(filepath.Base(exe))
	if m == nil {
		return Python{}, fmt.Errorf("%s: not named python3.N", exe)
	}
	runtime, err := runtimeFile(exe)
	if err != nil {
		return Python{}, err
	}
	return Python{
		Name:    name,
		Version: m[1],
		Argv:    []string{exe},
		Runtime: runtime,
		Shared:  runtime != exe,
	}, nil
}

// pyenvPythons returns pyenv's CPython builds of 3.10 and later.
func pyenvPythons(tb testing.TB) []Python {
	tb.Helper()
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil
		}
		root = filepath.Join(home, ".pyenv")
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "versions", "3.*"))
	var list []Python
	for _, dir := range dirs {
		release := filepath.Base(dir) // 3.11.7; not 3.13.0t or a virtualenv's name
		parts := strings.Split(release, ".")
		if len(parts) != 3 || minorOf(parts[0]+"."+parts[1]) < minPythonMinor {
			continue
		}
		if _, err := strconv.Atoi(parts[2]); err != nil {
			continue
		}
		exe := filepath.Join(dir, "bin", "python"+parts[0]+"."+parts[1])
		p, err := installedPython("pyenv-"+release, exe)
		if err != nil {
			tb.Logf("pyenv %s: %v", release, err)
			continue
		}
		list = append(list, p)
	}
	return list
}

// fetchPythons runs testdata/python/fetch.sh. It returns the interpreters
// the script printed even when it failed, with the error.
func fetchPythons() ([]Python, error) {
	// A first run downloads about 30 MB of package lists and 45 MB of
	// packages and takes under a minute; later runs print the list at once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	script := filepath.Join(Root(), "testdata", "python", "fetch.sh")
	build := filepath.Join(Root(), "testdata", "python", "build")
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, script)
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	if runErr != nil {
		runErr = fmt.Errorf("%w: %s", runErr, failureLines(stderr.String()))
	}

	var list []Python
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 3 || minorOf(f[0]) < 0 {
			return list, fmt.Errorf("%s printed %q, not VERSION<TAB>WRAPPER<TAB>RUNTIME", script, sc.Text())
		}
		version, wrapper, runtime := f[0], f[1], f[2]
		if err := definesPyRuntime(runtime); err != nil {
			return list, fmt.Errorf("%s: %s: %w", script, wrapper, err)
		}
		// The suite is the first element under build/: build/SUITE/root/...
		suite, _, _ := strings.Cut(strings.TrimPrefix(runtime, build+string(filepath.Separator)), string(filepath.Separator))
		list = append(list, Python{
			Name:    suite + "-" + strings.TrimPrefix(filepath.Base(wrapper), "python"),
			Version: version,
			Argv:    []string{wrapper},
			Runtime: runtime,
			Shared:  strings.HasPrefix(filepath.Base(runtime), "libpython"),
		})
	}
	if runErr != nil {
		return list, runErr
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("%s printed no interpreter", script)
	}
	return list, nil
}

// failureLines returns what fetch.sh said went wrong: its last line, and
// any line saying an interpreter failed.
func failureLines(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	var keep []string
	for _, l := range lines[:len(lines)-1] {
		if strings.Contains(l, "does not work") || strings.Contains(l, "failed") {
			keep = append(keep, l)
		}
	}
	return strings.Join(append(keep, lines[len(lines)-1]), "\n")
}

// runtimeFile returns the file holding exe's _PyRuntime: exe itself when it
// defines the symbol, else the libpython it links (found through its RUNPATH
// or RPATH, then the system's library directories).
func runtimeFile(exe string) (string, error) {
	f, err := elf.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if definedIn(f) {
		return exe, nil
	}
	needed, _ := f.DynString(elf.DT_NEEDED)
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		paths, _ := f.DynString(tag)
		for _, p := range paths {
			for _, d := range filepath.SplitList(p) {
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", filepath.Dir(exe)))
			}
		}
	}
	dirs = append(dirs, "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
		"/usr/lib/aarch64-linux-gnu", "/usr/local/lib", "/usr/lib")
	for _, lib := range needed {
		if !strings.HasPrefix(lib, "libpython") {
			continue
		}
		for _, d := range dirs {
			path := filepath.Join(d, lib)
			if _, err := os.Stat(path); err != nil {
				continue
			}
			if err := definesPyRuntime(path); err != nil {
				return "", err
			}
			return path, nil
		}
		return "", fmt.Errorf("%s links %s, found in none of %s", exe, lib, strings.Join(dirs, ":"))
	}
	return "", fmt.Errorf("%s neither defines _PyRuntime nor links a libpython", exe)
}

// definesPyRuntime checks that the ELF file path exports _PyRuntime.
func definesPyRuntime(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if !definedIn(f) {
		return fmt.Errorf("%s does not define _PyRuntime", path)
	}
	return nil
}

// definedIn tells whether f's dynamic symbol table defines _PyRuntime.
func definedIn(f *elf.File) bool {
	syms, err := f.DynamicSymbols()
	if err != nil {
		return false
	}
	for _, s := range syms {
		if s.Name == "_PyRuntime" && s.Section != elf.SHN_UNDEF {
			return true
		}
	}
	return false
}
