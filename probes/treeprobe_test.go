//go:build linux

package probes

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/probetest"
)

// TestTreeProbeLeavesNoEvent: a tree probe's tracefs event is listed while
// it is open and gone once it is closed, and opening one removes the event
// a session that is gone left behind (a killed vramprof closes no event).
func TestTreeProbeLeavesNoEvent(t *testing.T) {
	probetest.RequirePrivilege(t)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.Kprobe,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		License:      "GPL",
	})
	require.NoError(t, err)
	defer prog.Close()
	ld, off := loaderRendezvous(t)

	tracefs, mount, err := openTracefs()
	require.NoError(t, err, "this kernel reaches tracefs (5.2+: fsopen)")
	if mount >= 0 {
		defer func() { _ = os.NewFile(uintptr(mount), "tracefs").Close() }()
	}
	events := func() string {
		b, err := os.ReadFile(filepath.Join(tracefs, "uprobe_events"))
		require.NoError(t, err)
		return string(b)
	}
	// A session that is gone: a pid no process has (one that exited).
	gone := exec.Command("true")
	require.NoError(t, gone.Run())
	stale := fmt.Sprintf("loader_%d_1", gone.Process.Pid)
	w := treeProbe{tracefs: tracefs}
	// (Another session opening a tree probe meanwhile may remove it first.)
	require.NoError(t, w.writeEvents(fmt.Sprintf("p:%s/%s %s:%#x", treeGroup, stale, ld, off)))

	target := exec.Command("sleep", "30")
	require.NoError(t, target.Start())
	defer func() { _ = target.Process.Kill(); _ = target.Wait() }()
	p, err := openTreeProbe(ld, off, target.Process.Pid, prog)
	require.NoError(t, err)
	name := p.name
	assert.Contains(t, events(), treeGroup+"/"+name+" ", "listed while open")
	assert.NotContains(t, events(), treeGroup+"/"+stale+" ", "the gone session's event, removed")
	require.NoError(t, p.Close())
	assert.NotContains(t, events(), treeGroup+"/"+name+" ", "removed by Close")
}

// loaderRendezvous returns the path of this process's dynamic loader and
// the file offset of its _dl_debug_state.
func loaderRendezvous(t *testing.T) (string, uint64) {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	var ld string
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && strings.Contains(filepath.Base(f[5]), "ld-linux") {
			ld = f[5]
		}
	}
	if ld == "" {
		// A static test binary: the system's loader.
		ld, err = filepath.EvalSymlinks("/lib64/ld-linux-x86-64.so.2")
		require.NoError(t, err)
	}
	ef, err := elf.Open(ld)
	require.NoError(t, err)
	defer ef.Close()
	syms, err := ef.DynamicSymbols()
	require.NoError(t, err)
	for _, s := range syms {
		if s.Name != "_dl_debug_state" {
			continue
		}
		for _, prg := range ef.Progs {
			if prg.Type == elf.PT_LOAD && s.Value >= prg.Vaddr && s.Value < prg.Vaddr+prg.Memsz {
				return ld, s.Value - prg.Vaddr + prg.Off
			}
		}
	}
	t.Fatalf("no _dl_debug_state in %s", ld)
	return "", 0
}
