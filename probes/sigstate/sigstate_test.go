//go:build linux && cgo

package sigstate

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// childEnv makes the test binary print what it started with and exit
// (TestMain), for TestStartState.
const childEnv = "SIGSTATE_TEST_PRINT"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// By then the runtime has replaced SIGPIPE's and SIGUSR2's SIG_IGN
		// with its handler: only the constructor saw them.
		fmt.Printf("%#x %#x %v\n", uint64(Ignored()), uint64(Blocked()), Known())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestStartState starts this test binary with signals ignored and blocked
// by env (coreutils 9.1+), and checks that it reads them back exactly.
func TestStartState(t *testing.T) {
	if exec.Command("env", "--ignore-signal=PIPE", "true").Run() != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs env --ignore-signal (GNU coreutils 9.1+)")
		}
		t.Skip("needs env --ignore-signal (GNU coreutils 9.1+)")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command("env", "--ignore-signal=PIPE,USR2,HUP", "--block-signal=USR1,TERM", exe)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.Output()
	require.NoError(t, err)
	ign := 1<<(syscall.SIGPIPE-1) | 1<<(syscall.SIGUSR2-1) | 1<<(syscall.SIGHUP-1)
	blk := 1<<(syscall.SIGUSR1-1) | 1<<(syscall.SIGTERM-1)
	assert.Equal(t, fmt.Sprintf("%#x %#x true", ign, blk), strings.TrimSpace(string(out)))
}
