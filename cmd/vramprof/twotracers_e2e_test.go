//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// Two tracers, one host: `serve` (every process on the host) and `run`
// sessions side by side. serve stops a process a run traces at the same
// loader rendezvous as the run does (the process mapped a library serve had
// not examined: loaded.go), and leaves it to the run (the per-process lock).
// serve ending, or its guardian, used to SIGCONT that process while the run
// was still probing the library it had just mapped: its first calls were
// missed (vmm: 0 of 9 allocations) or seen returning without their entry
// (one event lost).

// assertExact compares a run's report.json with the truth its scenario
// wrote: every figure exact, nothing lost.
func assertExact(t *testing.T, dir, truthPath string, r result) {
	t.Helper()
	require.Equal(t, 0, r.code, "exit code; stderr:\n%s", r.stderr)
	w := mustReadCovTruth(t, truthPath).Totals
	rep := mustReadCovReport(t, filepath.Join(dir, "report.json"))
	assert.Equal(t, covTotals{Allocations: w.Allocations, Frees: w.Frees,
		FailedAllocations: w.FailedAllocations, UnknownFrees: w.UnknownFrees,
		AllocatedBytes: w.AllocatedBytes, PeakBytes: w.PeakBytes, LiveBytesAtEnd: w.LiveBytesAtEnd},
		rep.Totals, "totals (lost_events must be 0); lost causes: %s", lostCauses(t, dir))
}

// lostCauses returns report.json's totals.lost_causes as written.
func lostCauses(t *testing.T, dir string) string {
	t.Helper()
	type causes struct {
		Totals struct {
			LostCauses json.RawMessage `json:"lost_causes"`
		} `json:"totals"`
	}
	return string(mustReadJSON[causes](t, filepath.Join(dir, "report.json")).Totals.LostCauses)
}

// startServe starts `vramprof serve` on a free loopback port and waits
// until it serves. It is killed at cleanup if still running.
func startServe(t *testing.T) (cmd *exec.Cmd, done chan error, stderr *syncBuffer) {
	t.Helper()
	return startServeEnv(t, nil)
}

// startServeEnv is startServe with env added to serve's environment.
func startServeEnv(t *testing.T, env []string) (cmd *exec.Cmd, done chan error, stderr *syncBuffer) {
	t.Helper()
	addr := freeLoopback(t)
	stderr = &syncBuffer{}
	cmd = exec.Command(binPath, "serve", "--listen", addr)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	done = make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("vramprof serve's stderr:\n%s", stderr.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "vramprof: serving http://"+addr) {
		select {
		case err := <-done:
			t.Fatalf("vramprof serve exited (%v); stderr:\n%s", err, stderr.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "vramprof serve not ready; stderr:\n%s", stderr.String())
		time.Sleep(20 * time.Millisecond)
	}
	return cmd, done, stderr
}

// stopServe ends serve with SIGTERM and waits for its exit (0).
func stopServe(t *testing.T, cmd *exec.Cmd, done chan error, stderr *syncBuffer) {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done:
		require.NoError(t, err, "serve's exit; stderr:\n%s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("vramprof serve did not stop on SIGTERM; stderr:\n%s", stderr.String())
	}
}

// TestTwoTracersOneHost runs serve beside `run` sessions and checks that
// each run is exact against its scenario's truth, with nothing lost.
func TestTwoTracersOneHost(t *testing.T) {
	probetest.RequirePrivilege(t)

	// Deterministic: the run holds its target at the stop where the
	// driver has just been mapped (vmm links it: the start-up's last
	// rendezvous), before probing it; serve stopped it there too (it
	// faulted on a file serve had not examined), and serve ends
	// meanwhile. The target must stay stopped until the run has probed,
	// and the run be exact. It used to run on unprobed and exit.
	t.Run("serve ends while a run holds its target", func(t *testing.T) {
		cmd, done, stderr := startServe(t)
		truthPath := filepath.Join(t.TempDir(), "truth.json")
		h := startHeldAtStop(t, []string{"VRAMPROF_TEST_HOLD_AT_MAP=/libcuda.so", "VRAMPROF_TRUTH=" + truthPath},
			probetest.Bin(t, "vmm"))
		stopServe(t, cmd, done, stderr)
		state := byte(0) // gone
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", h.pid)); err == nil {
			if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) {
				state = b[i+2]
			}
		}
		require.Equal(t, string('T'), string(state), "serve's end left the process the run holds stopped (\\x00: it ran on and exited)")
		h.release(t)
		var err error
		select {
		case err = <-h.done:
		case <-time.After(60 * time.Second):
			t.Fatalf("vramprof run did not end; stderr:\n%s", h.stderr.String())
		}
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		assertExact(t, h.out, truthPath, result{code: code, stderr: h.stderr.String()})
	})

	// Stress: in each round a fresh serve adopts what it finds while three
	// runs start, and ends while they are under way (at their loader
	// stops, most likely); every run exact.
	names := []string{"vmm", "four_devices", "dlopen_runtime", "static_lib"}
	for round := 0; round < 3; round++ {
		t.Run(fmt.Sprintf("round %d", round), func(t *testing.T) {
			cmd, done, stderr := startServe(t)
			// Each run says when it records (its trace exists) or is over.
			type running struct {
				trace string
				over  chan struct{}
			}
			runs := make(chan running, 3)
			for i := 0; i < 3; i++ {
				name := names[(i+round)%len(names)]
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					tmp := t.TempDir()
					truthPath := filepath.Join(tmp, "truth.json")
					dir := filepath.Join(tmp, "out")
					over := make(chan struct{})
					runs <- running{trace: filepath.Join(dir, "trace.vpt"), over: over}
					r := vramprof(t, execOpts{env: []string{"VRAMPROF_TRUTH=" + truthPath}, dir: tmp},
						"run", "-q", "-o", dir, "--", probetest.Bin(t, name))
					close(over)
					assertExact(t, dir, truthPath, r)
				})
			}
			t.Run("serve ends", func(t *testing.T) {
				t.Parallel()
				// Once every run records, or is over.
				deadline := time.Now().Add(60 * time.Second)
				for i := 0; i < 3; i++ {
					r := <-runs
				wait:
					for {
						select {
						case <-r.over:
							break wait
						default:
						}
						if _, err := os.Stat(r.trace); err == nil {
							break
						}
						require.True(t, time.Now().Before(deadline), "no run began recording")
						time.Sleep(5 * time.Millisecond)
					}
				}
				stopServe(t, cmd, done, stderr)
			})
		})
	}
}
