//go:build linux

package main

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// repoRoot is the repository's top, where the Makefile is.
const repoRoot = "../.."

// mustMake runs make with args in dir (the Makefile's directory).
func mustMake(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("make", append([]string{"-s", "-C", dir}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "make %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// TestReleaseDefaults: make release stamps main.go's version when none is
// given (the Makefile reads it from the source, not a copy of it).
func TestReleaseDefaults(t *testing.T) {
	out := mustMake(t, repoRoot, "-n", "release", "RELEASE="+t.TempDir(), "COMMIT=c0ffee")
	assert.Contains(t, out, "-X main.version="+version+" ")
	assert.Contains(t, out, "-X main.commit=c0ffee'")
	for _, flag := range []string{"-trimpath", "-buildvcs=false", "CGO_ENABLED=1"} {
		assert.Contains(t, out, flag)
	}
	// make image builds the Dockerfile beside the deploy files, stamped.
	out = mustMake(t, repoRoot, "-n", "image", "IMAGE=vramprof:test", "VERSION=3.0", "COMMIT=c0ffee")
	assert.Contains(t, out, "-f cmd/vramprof/"+dockerfileFile+" ")
	for _, arg := range []string{"--build-arg VERSION=3.0", "--build-arg COMMIT=c0ffee", "-t vramprof:test"} {
		assert.Contains(t, out, arg)
	}
}

// TestReleaseInstall builds the release binary through make install (with
// DESTDIR and PREFIX, as a package build does), then again from a copy of
// the source in another directory, and checks: the two binaries are the
// same bytes; --version prints the version and commit given; the binary
// needs no library but glibc's libc.so.6; the unit is installed with
// ExecStart naming the installed binary, and nothing else changed in it;
// make uninstall removes both.
func TestReleaseInstall(t *testing.T) {
	const (
		ver    = "1.2.3-test"
		commit = "0123456789abcdef0123456789abcdef01234567"
	)
	stamp := []string{"VERSION=" + ver, "COMMIT=" + commit}
	outA, stage := t.TempDir(), t.TempDir()
	mustMake(t, repoRoot, append([]string{"install", "RELEASE=" + outA, "DESTDIR=" + stage, "PREFIX=/usr"}, stamp...)...)

	bin := filepath.Join(stage, "usr/bin/vramprof")
	st, err := os.Stat(bin)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), st.Mode().Perm())
	installed, err := os.ReadFile(bin)
	require.NoError(t, err)
	built, err := os.ReadFile(filepath.Join(outA, "vramprof"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(built, installed), "the installed binary is the release build")

	out, err := exec.Command(bin, "--version").Output()
	require.NoError(t, err)
	assert.Equal(t, "vramprof "+ver+" (commit "+commit+")\n", string(out))

	f, err := elf.Open(bin)
	require.NoError(t, err)
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"libc.so.6", "libpthread.so.0", "libdl.so.2"}, libs,
		"glibc's libraries alone (Makefile, release: why not static)")
	// The glibc it asks for: no symbol version newer than 2.17, what the
	// README promises (linked against this machine's glibc, 2.34).
	syms, err := f.ImportedSymbols()
	require.NoError(t, err)
	newest, newestName := [2]int{}, ""
	for _, s := range syms {
		v, ok := glibcVersion(s.Version)
		if !ok {
			assert.Empty(t, s.Version, "symbol %s: a version that is not glibc's", s.Name)
			continue
		}
		assert.LessOrEqual(t, v[0]*1000+v[1], 2*1000+17, "symbol %s needs %s", s.Name, s.Version)
		if v[0]*1000+v[1] > newest[0]*1000+newest[1] {
			newest, newestName = v, s.Version
		}
	}
	require.NoError(t, f.Close())
	t.Logf("release binary: the newest glibc symbol version it needs is %s", newestName)
	info, err := buildinfo.ReadFile(bin)
	require.NoError(t, err)
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	assert.Equal(t, "true", settings["-trimpath"])
	assert.Equal(t, "1", settings["CGO_ENABLED"])
	assert.Equal(t, "netgo,osusergo", settings["-tags"])
	assert.NotContains(t, settings, "vcs.revision", "the commit comes from -X, the same with or without .git")

	unit, err := os.ReadFile(filepath.Join(stage, "usr/lib/systemd/system/vramprof.service"))
	require.NoError(t, err)
	shipped, err := os.ReadFile(unitFile)
	require.NoError(t, err)
	want := strings.Replace(string(shipped), "\nExecStart="+unitBinary+" ", "\nExecStart=/usr/bin/vramprof ", 1)
	require.NotEqual(t, string(shipped), want, "the shipped unit runs %s", unitBinary)
	assert.Equal(t, want, string(unit))

	t.Run("nvml", func(t *testing.T) { releaseLoadsNVML(t, bin, "") })
	// The same on Debian 11's glibc 2.31 (the sysroot it was linked
	// against): older than the 2.34 a binary linked against this machine's
	// would need, and from before libpthread and libdl were merged into libc.
	t.Run("glibc_2.31", func(t *testing.T) {
		releaseLoadsNVML(t, bin, filepath.Join(repoRoot, "bin", "sysroot", "lib", "x86_64-linux-gnu"))
	})
	t.Run("static", func(t *testing.T) { releaseStatic(t, filepath.Join(outA, "vramprof-static"), ver, commit) })

	mustMake(t, repoRoot, "uninstall", "DESTDIR="+stage, "PREFIX=/usr")
	for _, p := range []string{"usr/bin/vramprof", "usr/lib/systemd/system/vramprof.service"} {
		_, err := os.Stat(filepath.Join(stage, p))
		assert.ErrorIs(t, err, os.ErrNotExist, "%s after make uninstall", p)
	}

	// The same source (the working tree's tracked files, as they are now)
	// in another directory: -trimpath keeps the path out of the binary.
	// The build cache is shared, and hits because of that; a build with an
	// empty cache gave the same bytes when measured (README.md, "Install").
	src := t.TempDir()
	files, err := exec.Command("git", "-C", repoRoot, "ls-files", "-z").Output()
	require.NoError(t, err, "git ls-files: the test copies the tracked files")
	for _, name := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		data, err := os.ReadFile(filepath.Join(repoRoot, name))
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		require.NoError(t, err)
		info, err := os.Stat(filepath.Join(repoRoot, name))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(src, name), data, info.Mode().Perm()))
	}
	outB := t.TempDir()
	mustMake(t, src, append([]string{"release", "RELEASE=" + outB}, stamp...)...)
	for _, name := range []string{"vramprof", "vramprof-static"} {
		a, err := os.ReadFile(filepath.Join(outA, name))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(outB, name))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(a, b), "two release builds of one source differ: %s is %d and %d bytes", name, len(a), len(b))
		t.Logf("release %s: %d bytes, the same from %s and from %s", name, len(a), repoRoot, src)
	}
}

// glibcVersion parses a symbol version "GLIBC_2.3.2" into {2, 3}.
func glibcVersion(v string) ([2]int, bool) {
	rest, ok := strings.CutPrefix(v, "GLIBC_")
	if !ok {
		return [2]int{}, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) < 2 {
		return [2]int{}, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return [2]int{major, minor}, err1 == nil && err2 == nil
}

// releaseLoadsNVML runs the release binary's serve with NVIDIA's real
// libnvidia-ml.so.1 and no driver: NVML must load and answer "Driver Not
// Loaded", where a static build dies at its first NVML call. With glibcDir,
// the binary runs on the glibc there instead of this machine's: in a mount
// namespace of its own, glibcDir is mounted over /lib/x86_64-linux-gnu
// (where its loader, libc.so.6 and the rest are looked for), and the test
// checks that the process mapped that glibc's libc.
func releaseLoadsNVML(t *testing.T, bin, glibcDir string) {
	probetest.RequirePrivilege(t)
	if _, err := os.Stat("/proc/driver/nvidia"); err == nil {
		t.Skip("the NVIDIA driver is loaded here: the no-driver answer cannot be asked for")
	}
	dir := realNVMLDir(t)
	addr := freeLoopback(t)
	args := []string{bin, "serve", "--listen", addr, "--pool", "off"}
	var wantLibc string
	if glibcDir != "" {
		abs, err := filepath.Abs(glibcDir)
		require.NoError(t, err)
		libc, err := filepath.EvalSymlinks(filepath.Join(abs, "libc.so.6"))
		require.NoError(t, err, "the sysroot make release fetched")
		wantLibc = filepath.Base(libc)
		// unshare without --fork execs sh, which execs the binary: one PID.
		args = append([]string{"unshare", "--mount", "sh", "-c", `mount --bind "$0" /lib/x86_64-linux-gnu && exec "$@"`, abs}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "vramprof: serving http://"+addr) {
		select {
		case err := <-done:
			t.Fatalf("release serve exited: %v\n%s", err, stderr.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "release serve not ready:\n%s", stderr.String())
		time.Sleep(20 * time.Millisecond)
	}
	if wantLibc != "" {
		maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid))
		require.NoError(t, err)
		assert.Contains(t, string(maps), "/"+wantLibc+"\n", "the process runs on the sysroot's glibc")
	}
	v, reason, ok := nvmlReason(scrapeMetrics(t, "http://"+addr))
	if assert.True(t, ok, "no NVML status metric") {
		assert.Zero(t, v)
		assert.True(t, strings.HasPrefix(reason, "NVML unavailable: nvmlInit: Driver Not Loaded"), "reason %q", reason)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done:
		assert.NoError(t, err, "stderr:\n%s", stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatal("release serve did not stop on SIGTERM")
	}
}

// releaseStatic checks make release's static binary: no loader, no library;
// stamped as the other; built without cgo; and it profiles a scenario as
// exactly as the binary the tests build (report.json against the truth).
func releaseStatic(t *testing.T, bin, ver, commit string) {
	f, err := elf.Open(bin)
	require.NoError(t, err)
	for _, p := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "a static binary has no loader")
		assert.NotEqual(t, elf.PT_DYNAMIC, p.Type, "a static binary has no dynamic section")
	}
	require.NoError(t, f.Close())
	out, err := exec.Command(bin, "--version").Output()
	require.NoError(t, err)
	assert.Equal(t, "vramprof "+ver+" (commit "+commit+")\n", string(out))
	info, err := buildinfo.ReadFile(bin)
	require.NoError(t, err)
	for _, s := range info.Settings {
		if s.Key == "CGO_ENABLED" {
			assert.Equal(t, "0", s.Value)
		}
	}

	probetest.RequirePrivilege(t)
	tmp := t.TempDir()
	truthPath := filepath.Join(tmp, "truth.json")
	dir := filepath.Join(tmp, "out")
	r := vramprof(t, execOpts{bin: bin, env: []string{"VRAMPROF_TRUTH=" + truthPath}, dir: tmp},
		"run", "-o", dir, "--", probetest.Bin(t, "leak"))
	require.Zero(t, r.code, "stderr:\n%s", r.stderr)
	checkReport(t, mustReadReport(t, filepath.Join(dir, "report.json")), probetest.MustReadTruth(t, truthPath))
}
