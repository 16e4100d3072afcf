package usdt

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The test binaries are compiled once per run into a temporary directory
// from the C sources in testdata. Ground truth comes from outside this
// package: binutils' readelf, and the bytes of the files.

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binaries are the compiled test files, by name; each has the probes
// vramtest:alloc, vramtest:free, vramtest:mark and the semaphore-guarded
// vramtest:guarded.
var binaries = []string{"libsdt.so", "sdtprog", "sdtprog-O0-nopie"}

// artifacts is where the compiled test binaries are.
type artifacts struct{ dir string }

func (a artifacts) path(name string) string { return filepath.Join(a.dir, name) }

// needTools skips the test when a tool is missing, except under CI=true,
// where it fails.
func needTools(tb testing.TB, tools ...string) {
	tb.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				tb.Fatalf("%s is needed to build the test binaries: %v", tool, err)
			}
			tb.Skipf("%s not installed: cannot build the test binaries", tool)
		}
	}
}

// mustBuild compiles the test binaries on first use: a shared library and
// two executables (optimized PIE, and unoptimized fixed-address, whose
// arguments are stack slots).
func mustBuild(tb testing.TB) artifacts {
	tb.Helper()
	needTools(tb, "gcc", "readelf")
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "usdt-test-")
		if buildErr != nil {
			return
		}
		src, err := filepath.Abs("testdata")
		if err != nil {
			buildErr = err
			return
		}
		probes := filepath.Join(src, "sdtprobes.c")
		sem := filepath.Join(src, "sdtsem.c")
		main := filepath.Join(src, "sdtmain.c")
		steps := [][]string{
			{"-O2", "-fPIC", "-shared", "-o", "libsdt.so", probes, sem},
			{"-O2", "-fPIE", "-pie", "-o", "sdtprog", main, probes, sem},
			{"-O0", "-fno-pie", "-no-pie", "-o", "sdtprog-O0-nopie", main, probes, sem},
		}
		for _, args := range steps {
			cmd := exec.Command("gcc", append([]string{"-Wall", "-Werror"}, args...)...)
			cmd.Dir = buildDir
			if out, err := cmd.CombinedOutput(); err != nil {
				if strings.Contains(string(out), "sys/sdt.h") {
					err = fmt.Errorf("%w (install systemtap-sdt-dev)", err)
				}
				buildErr = fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
				return
			}
		}
		// The programs must run: a probe that is not a nop would crash them.
		for _, prog := range []string{"sdtprog", "sdtprog-O0-nopie"} {
			if out, err := exec.Command(filepath.Join(buildDir, prog)).CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("run %s: %w\n%s", prog, err, out)
				return
			}
		}
	})
	require.NoError(tb, buildErr)
	return artifacts{dir: buildDir}
}

// readelfNote is a stapsdt note as binutils prints it.
type readelfNote struct {
	provider, name      string
	pc, base, semaphore uint64
	args                string
}

var (
	reProvider = regexp.MustCompile(`\sProvider: (.*)$`) // after a tab with -W
	reName     = regexp.MustCompile(`^\s+Name: (.*)$`)
	reLocation = regexp.MustCompile(`^\s+Location: (0x[0-9a-f]+), Base: (0x[0-9a-f]+), Semaphore: (0x[0-9a-f]+)$`)
	reArgs     = regexp.MustCompile(`^\s+Arguments: ?(.*)$`)
)

// readelfNotes parses `readelf -n` for the stapsdt notes of a file.
func readelfNotes(tb testing.TB, path string) []readelfNote {
	tb.Helper()
	out, err := exec.Command("readelf", "-W", "-n", path).Output()
	require.NoError(tb, err)
	var notes []readelfNote
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if m := reProvider.FindStringSubmatch(line); m != nil {
			notes = append(notes, readelfNote{provider: m[1]})
			continue
		}
		if len(notes) == 0 {
			continue
		}
		n := &notes[len(notes)-1]
		if m := reName.FindStringSubmatch(line); m != nil {
			n.name = m[1]
		} else if m := reLocation.FindStringSubmatch(line); m != nil {
			n.pc, n.base, n.semaphore = mustHex(tb, m[1]), mustHex(tb, m[2]), mustHex(tb, m[3])
		} else if m := reArgs.FindStringSubmatch(line); m != nil {
			n.args = strings.TrimSpace(m[1])
		}
	}
	require.NoError(tb, sc.Err())
	return notes
}

func mustHex(tb testing.TB, s string) uint64 {
	tb.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	require.NoError(tb, err)
	return v
}

// mustProbes reads the probes of a file and indexes them by name.
func mustProbes(tb testing.TB, path string) ([]Probe, map[string]Probe) {
	tb.Helper()
	probes, err := Open(path)
	require.NoError(tb, err)
	byName := make(map[string]Probe)
	for _, p := range probes {
		byName[p.Name] = p
	}
	return probes, byName
}

// mustRead returns a file's bytes and its parsed ELF headers.
func mustRead(tb testing.TB, path string) ([]byte, *elf.File) {
	tb.Helper()
	data, err := os.ReadFile(path)
	require.NoError(tb, err)
	f, err := elf.NewFile(bytes.NewReader(data))
	require.NoError(tb, err)
	return data, f
}

// rawNote locates one note inside a file's bytes.
type rawNote struct {
	header int // file offset of namesz
	desc   int // file offset of desc
	descsz int
}

// mustRawNotes walks .note.stapsdt in the file's bytes, independently of
// parseNotes, so tests can patch notes in place.
func mustRawNotes(tb testing.TB, data []byte, f *elf.File) []rawNote {
	tb.Helper()
	sec := f.Section(noteSection)
	require.NotNil(tb, sec)
	var notes []rawNote
	for off, end := int(sec.Offset), int(sec.Offset+sec.Size); off < end; {
		namesz := int(f.ByteOrder.Uint32(data[off:]))
		descsz := int(f.ByteOrder.Uint32(data[off+4:]))
		desc := off + 12 + (namesz+3)&^3
		notes = append(notes, rawNote{header: off, desc: desc, descsz: descsz})
		off = desc + (descsz+3)&^3
	}
	return notes
}

// probesOf parses patched file bytes.
func probesOf(tb testing.TB, data []byte) ([]Probe, error) {
	tb.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	require.NoError(tb, err)
	return Probes(f)
}
