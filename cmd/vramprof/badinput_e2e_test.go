//go:build linux

package main

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// assertToolError checks the error contract: exit code 2 and exactly one
// line on stderr, "vramprof: ...", that contains each of words.
func assertToolError(t *testing.T, r result, words ...string) {
	t.Helper()
	assert.Equal(t, exitToolError, r.code, "exit code; stderr:\n%s", r.stderr)
	lines := r.stderrLines()
	if assert.Len(t, lines, 1, "stderr:\n%s", r.stderr) {
		assert.True(t, strings.HasPrefix(lines[0], "vramprof: "), "stderr line %q", lines[0])
		for _, w := range words {
			assert.Contains(t, lines[0], w)
		}
	}
}

// assertNoOutputs checks that a failed command left no outputs: dir is
// absent or holds no output file, and the working directory cwd (where a
// default output directory would go) is still empty.
func assertNoOutputs(t *testing.T, dir, cwd string) {
	t.Helper()
	if dir != "" {
		ents, err := os.ReadDir(dir)
		if err == nil {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			assert.Empty(t, names, "a failed command left files in %s", dir)
		} else {
			assert.ErrorIs(t, err, os.ErrNotExist)
		}
	}
	if cwd != "" {
		ents, err := os.ReadDir(cwd)
		require.NoError(t, err)
		assert.Empty(t, ents, "a failed command left something in its working directory")
	}
}

// startSleep starts `sleep 30`, a process that never loads CUDA.
func startSleep(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// recordSteady records the steady scenario once and returns its output
// directory, for the tests that damage a trace.
func recordSteady(t *testing.T) string {
	t.Helper()
	dir, _, r := runScenario(t, "steady")
	require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
	return dir
}

// midRecord returns the offset of a payload byte in the trace record that
// spans the middle of the file, walking the documented framing
// (probes/event/trace.go: preamble magic[8] version u16, then records of
// type u8, length uvarint, payload, crc u32 in formats 2 and 3).
func midRecord(t *testing.T, data []byte) int {
	t.Helper()
	off := 10
	for off+6 <= len(data) {
		// type u8, length uvarint (formats 2 and 3), payload, crc u32
		l, k := binary.Uvarint(data[off+1:])
		n, head := int(l), 1+k
		end := off + head + n + 4
		if end > len(data)/2 && n > 0 {
			return off + head + n/2
		}
		off = end
	}
	t.Fatal("no record spans the middle of the trace")
	return 0
}

// TestBadInput checks that each mistake a user can make ends with exit code
// 2, one line saying what is wrong, and no output left behind.
func TestBadInput(t *testing.T) {
	t.Run("usage", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name  string
			args  []string
			words []string
		}{
			{"report_no_args", []string{"report"}, []string{"INPUT"}},
			{"unknown_command", []string{"frobnicate"}, []string{"unknown command", "frobnicate"}},
			{"attach_no_pid", []string{"attach"}, []string{"-p"}},
			{"run_no_command", []string{"run", "-o", "x"}, []string{"no command"}},
			{"report_bad_format", []string{"report", "x.vpt", "--format", "xml"}, []string{"xml"}},
			{"run_unknown_flag", []string{"run", "--bogus", "--", "true"}, []string{"bogus"}},
			{"report_unknown_flag", []string{"report", "x.vpt", "--bogus"}, []string{"bogus"}},
			{"attach_bad_pid", []string{"attach", "-p", "abc"}, []string{"abc"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cwd := t.TempDir()
				r := vramprof(t, execOpts{dir: cwd}, tc.args...)
				assertToolError(t, r, tc.words...)
				assertNoOutputs(t, "", cwd)
			})
		}
	})

	t.Run("report_random_bytes", func(t *testing.T) {
		t.Parallel()
		tmp := t.TempDir()
		in := filepath.Join(tmp, "random.vpt")
		data := make([]byte, 4096)
		rng := rand.NewChaCha8([32]byte{1})
		_, _ = rng.Read(data)
		require.NoError(t, os.WriteFile(in, data, 0o644))
		out := filepath.Join(tmp, "out")
		r := vramprof(t, execOpts{dir: t.TempDir()}, "report", in, "-o", out)
		assertToolError(t, r, "not a vramprof trace")
		assertNoOutputs(t, out, "")
		assert.Empty(t, r.stdout)
	})

	t.Run("report_missing_input", func(t *testing.T) {
		t.Parallel()
		r := vramprof(t, execOpts{dir: t.TempDir()}, "report", "/nonexistent/trace.vpt")
		assertToolError(t, r, "/nonexistent/trace.vpt")
	})

	// Everything below needs BPF.
	t.Run("attach_no_process", func(t *testing.T) {
		probetest.RequirePrivilege(t)
		t.Parallel()
		cwd := t.TempDir()
		out := filepath.Join(t.TempDir(), "out")
		r := vramprof(t, execOpts{dir: cwd}, "attach", "-p", "999999", "-o", out)
		assertToolError(t, r, "no such process", "999999")
		assertNoOutputs(t, out, "")
		// Without -o: no default directory left in the working directory.
		r = vramprof(t, execOpts{dir: cwd}, "attach", "-p", "999999")
		assertToolError(t, r, "no such process")
		assertNoOutputs(t, "", cwd)
	})

	t.Run("attach_no_cuda", func(t *testing.T) {
		probetest.RequirePrivilege(t)
		t.Parallel()
		pid := startSleep(t)
		cwd := t.TempDir()
		out := filepath.Join(t.TempDir(), "out")
		r := vramprof(t, execOpts{dir: cwd}, "attach", "-p", strconv.Itoa(pid), "-o", out)
		assertToolError(t, r, "CUDA", "--wait")
		assertNoOutputs(t, out, "")
		r = vramprof(t, execOpts{dir: cwd}, "attach", "-p", strconv.Itoa(pid))
		assertToolError(t, r, "CUDA", "--wait")
		assertNoOutputs(t, "", cwd)
	})

	// A command run cannot start exits as `sh -c CMD` does: 127 when there
	// is no such command, 126 when it is not executable; check keeps 2.
	t.Run("run_no_command", func(t *testing.T) {
		probetest.RequirePrivilege(t)
		t.Parallel()
		cwd := t.TempDir()
		noexec := filepath.Join(t.TempDir(), "noexec")
		require.NoError(t, os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644))
		for _, tc := range []struct {
			name, cmd string
			code      int
			words     []string
		}{
			{"missing path", "/nonexistent/cmd", 127, []string{"not found", "/nonexistent/cmd"}},
			{"missing name", "vramprof-no-such-command", 127, []string{"not found", "PATH"}},
			{"not executable", noexec, 126, []string{"not executable", "permission denied", "chmod +x"}},
			{"directory", cwd, 126, []string{"not executable", "is a directory"}},
		} {
			sh := exec.Command("sh", "-c", tc.cmd)
			sh.Dir = cwd
			err := sh.Run()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, tc.name)
			require.Equal(t, tc.code, ee.ExitCode(), "%s: sh -c's exit code", tc.name)

			out := filepath.Join(t.TempDir(), "out")
			r := vramprof(t, execOpts{dir: cwd}, "run", "-o", out, "--", tc.cmd)
			assert.Equal(t, tc.code, r.code, "%s: stderr:\n%s", tc.name, r.stderr)
			if lines := r.stderrLines(); assert.Len(t, lines, 1, "%s: stderr:\n%s", tc.name, r.stderr) {
				for _, w := range tc.words {
					assert.Contains(t, lines[0], w, tc.name)
				}
			}
			assertNoOutputs(t, out, "")
		}
		r := vramprof(t, execOpts{dir: cwd}, "run", "--", "/nonexistent/cmd")
		assert.Equal(t, 127, r.code, "stderr:\n%s", r.stderr)
		assertNoOutputs(t, "", cwd)
		r = vramprof(t, execOpts{dir: cwd}, "check", "--max-peak", "1GiB", "--", "/nonexistent/cmd")
		assertToolError(t, r, "not found")
	})

	t.Run("run_unwritable_dir", func(t *testing.T) {
		probetest.RequirePrivilege(t)
		t.Parallel()
		truth := filepath.Join(t.TempDir(), "truth.json")
		r := vramprof(t, execOpts{dir: t.TempDir(), env: []string{"VRAMPROF_TRUTH=" + truth}},
			"run", "-o", "/proc/forbidden", "--", probetest.Bin(t, "steady"))
		assertToolError(t, r, "output directory", "/proc/forbidden")
		assertNoOutputs(t, "/proc/forbidden", "")
		assert.NoFileExists(t, truth, "the command must not run when its outputs cannot be written")
	})

	t.Run("report_damaged", func(t *testing.T) {
		probetest.RequirePrivilege(t)
		t.Parallel()
		dir := recordSteady(t)
		trace, err := os.ReadFile(filepath.Join(dir, "trace.vpt"))
		require.NoError(t, err)
		tmp := t.TempDir()

		t.Run("cut_short", func(t *testing.T) {
			in := filepath.Join(tmp, "half.vpt")
			require.NoError(t, os.WriteFile(in, trace[:len(trace)/2], 0o644))
			out := filepath.Join(tmp, "half-out")
			r := vramprof(t, execOpts{dir: t.TempDir()}, "report", in, "-o", out)
			assertToolError(t, r, "cut short")
			assert.NotEmpty(t, r.stdout, "the summary of what was read")
			assertDirHolds(t, out, []string{"profile.pb.gz", "report.html", "report.json", "report.md"})
			rep := mustReadReport(t, filepath.Join(out, "report.json"))
			assert.False(t, rep.Run.EndedCleanly, "report.json says the run was cut short")
			full := mustReadReport(t, filepath.Join(dir, "report.json"))
			assert.Less(t, val(t, "allocations", rep.Totals.Allocations), val(t, "allocations", full.Totals.Allocations))
			assert.Positive(t, val(t, "allocations", rep.Totals.Allocations))

			r = vramprof(t, execOpts{dir: t.TempDir()}, "report", in, "--format", "json")
			assertToolError(t, r, "cut short")
			want, err := os.ReadFile(filepath.Join(out, "report.json"))
			require.NoError(t, err)
			assert.Equal(t, string(want), r.stdout, "--format json prints what -o wrote")
		})

		t.Run("corrupt", func(t *testing.T) {
			damaged := append([]byte(nil), trace...)
			damaged[midRecord(t, damaged)] ^= 0x5a
			in := filepath.Join(tmp, "flipped.vpt")
			require.NoError(t, os.WriteFile(in, damaged, 0o644))
			out := filepath.Join(tmp, "flipped-out")
			r := vramprof(t, execOpts{dir: t.TempDir()}, "report", in, "-o", out)
			assertToolError(t, r, "corrupt")
			assertNoOutputs(t, out, "")
		})
	})

	// A process the kernel keeps out of reach even of root with
	// CAP_SYS_PTRACE: one line that says why and what to do, not "open
	// /proc/N/maps: permission denied". This machine's sandbox does that to
	// its pid 1 (a sandbox's security module; this kernel lets root read
	// any other process's maps, Landlock's or not, so it cannot be made
	// here on demand).
	t.Run("attach_out_of_reach", func(t *testing.T) {
		probetest.RequirePrivilege(t)
		if _, err := os.ReadFile("/proc/1/maps"); !errors.Is(err, os.ErrPermission) {
			t.Skipf("pid 1 is within reach here (%v): no process the kernel keeps from root", err)
		}
		t.Parallel()
		cwd := t.TempDir()
		out := filepath.Join(t.TempDir(), "out")
		r := vramprof(t, execOpts{dir: cwd}, "attach", "-p", "1", "-o", out)
		assertToolError(t, r, "pid 1's memory map", "permission denied", "security module",
			"run vramprof where the process runs")
		assertNoOutputs(t, out, cwd)
	})

	t.Run("not_root", func(t *testing.T) {
		probetest.RequirePrivilege(t)
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("needs setpriv (util-linux)")
		}
		t.Parallel()
		// A copy of the binary, and a working directory, that nobody
		// (uid 65534) can reach: t.TempDir's parents are private.
		tmp, err := os.MkdirTemp("", "vramprof-e2e-nobody-")
		require.NoError(t, err)
		t.Cleanup(func() { _ = os.RemoveAll(tmp) })
		require.NoError(t, os.Chmod(tmp, 0o777))
		bin := filepath.Join(tmp, "vramprof")
		data, err := os.ReadFile(binPath)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(bin, data, 0o755))
		cwd := filepath.Join(tmp, "cwd")
		require.NoError(t, os.Mkdir(cwd, 0o777))
		require.NoError(t, os.Chmod(cwd, 0o777))

		lr := startLongrun(t)
		out := filepath.Join(tmp, "out")
		for _, args := range [][]string{
			{"attach", "-p", strconv.Itoa(lr.pid), "-o", out},
			{"attach", "-p", strconv.Itoa(lr.pid)},
		} {
			cmd := exec.Command(setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", bin}, args...)...)
			cmd.Dir = cwd
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			r := result{stdout: stdout.String(), stderr: stderr.String()}
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				r.code = ee.ExitCode()
			} else {
				require.NoError(t, err)
			}
			assertToolError(t, r)
			if lines := r.stderrLines(); len(lines) == 1 {
				assert.True(t, strings.Contains(lines[0], "root") || strings.Contains(lines[0], "CAP_BPF"),
					"names root or CAP_BPF: %q", lines[0])
			}
			assertNoOutputs(t, out, cwd)
		}
		// longrun was left alone: it still runs phase 2 when told.
		require.NoError(t, lr.cmd.Process.Signal(syscall.SIGUSR1))
		lr.expect(t, "done")
	})
}
