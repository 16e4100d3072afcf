//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// TestAttachRefusesWithoutLock: with /run/vramprof read-only (a read-only
// tmpfs over it, in a mount namespace of the test's own), `attach -p`
// cannot lock the process and refuses, exit 2, in one line naming the lock
// file and the fix, before it creates anything (it used to run unguarded,
// so two attaches on one PID both ran).
func TestAttachRefusesWithoutLock(t *testing.T) {
	probetest.RequirePrivilege(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("unshare (util-linux) is missing; CI=true: this test must run")
		}
		t.Skip("needs unshare (util-linux)")
	}
	lr := startLongrun(t)
	out := filepath.Join(t.TempDir(), "out")
	script := `mkdir -p /run/vramprof && mount -t tmpfs -o ro,size=64k tmpfs /run/vramprof && exec "$0" "$@"`
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", script,
		binPath, "attach", "-p", strconv.Itoa(lr.pid), "-o", out, "--duration", "1s")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "attach must fail; stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	assert.Equal(t, exitToolError, ee.ExitCode())
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	lines := r.stderrLines()
	require.Len(t, lines, 1, "one line: %q", r.stderr)
	assert.Contains(t, lines[0], "cannot take the per-process lock: /run/vramprof/"+strconv.Itoa(lr.pid)+"-")
	assert.Contains(t, lines[0], "read-only file system")
	assert.Contains(t, lines[0], "make /run/vramprof a writable directory")
	assert.NoDirExists(t, out, "nothing created")
}
