//go:build linux

package probes

// USDT semaphores the kernel left down. A USDT site guarded by a semaphore
// (PyTorch's pytorch:malloc and pytorch:free) fires only while the
// semaphore, a counter in the library's data, is above 0. vramprof attaches
// with the uprobe's reference counter (link.UprobeOptions.RefCtrOffset), so
// the kernel raises it by one for each site whose breakpoint it writes into
// a process, and lowers it when it takes the breakpoint out.
//
// It counts breakpoint writes, not consumers: when a breakpoint is already
// in place, a second session's attach raises nothing. And a process that
// maps the library after a session without a PID filter (attach --all,
// serve) probed it gets the breakpoints as the loader maps the code, while
// the counter, in the data segment mapped after it, stays at 0: measured
// here (kernel 6.18), every PyTorch process started after a serve probed
// libc10_cuda.so kept both semaphores at 0 with the breakpoints in place,
// and fired no note, under the serve and under a `run` of its own alike.
//
// So once a process's files are probed, raiseSemaphores reads each
// semaphore and brings it up to the number of probed sites that share it,
// what the kernel's own count would be. It only raises: the kernel's
// decrements, one per site as the breakpoints go, bring it back down, and a
// decrement of ours on top would take it below 0 (the kernel then refuses
// its own and leaks the uprobe: "ref_ctr going negative").

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/vramprof/vramprof/probes/symbolize"
)

// semaphoreSites counts pf's probed USDT sites per semaphore (by file
// offset).
func semaphoreSites(pf *probedFile) map[uint64]uint16 {
	var out map[uint64]uint16
	for _, t := range pf.Targets {
		if t.Spec.Prog != progUSDT || t.USDT == nil || t.USDT.SemaphoreOffset == 0 {
			continue
		}
		if out == nil {
			out = make(map[uint64]uint16)
		}
		out[t.USDT.SemaphoreOffset]++
	}
	return out
}

// raiseSemaphores brings each semaphore of pf's probed USDT sites in
// process pid up to the number of sites sharing it, and returns how many
// it raised. maps are pid's mappings; pf.Path is its path to the file.
func raiseSemaphores(pid uint32, pf *probedFile, maps []symbolize.MapEntry) (int, error) {
	sites := semaphoreSites(pf)
	if len(sites) == 0 {
		return 0, nil
	}
	var mem *os.File
	defer func() {
		if mem != nil {
			_ = mem.Close()
		}
	}()
	raised := 0
	for off, want := range sites {
		addr, ok := semaphoreAddr(maps, pf.Path, pf.Key.Inode, off)
		if !ok {
			continue // its data not mapped (yet): the kernel's count applies then
		}
		if mem == nil {
			f, err := os.OpenFile("/proc/"+strconv.Itoa(int(pid))+"/mem", os.O_RDWR, 0)
			if err != nil {
				return raised, fmt.Errorf("open memory of pid %d to raise its USDT semaphores: %w", pid, err)
			}
			mem = f
		}
		var b [2]byte
		if _, err := mem.ReadAt(b[:], int64(addr)); err != nil {
			return raised, semaphoreErr(pid, pf.Path, addr, "read", err)
		}
		if binary.LittleEndian.Uint16(b[:]) >= want {
			continue
		}
		binary.LittleEndian.PutUint16(b[:], want)
		if _, err := mem.WriteAt(b[:], int64(addr)); err != nil {
			return raised, semaphoreErr(pid, pf.Path, addr, "write", err)
		}
		raised++
	}
	return raised, nil
}

// semaphoreAddr is where the semaphore at file offset off of the file at
// path (inode ino) lies in a process with maps: in its writable private
// mapping of the file that holds that offset. The file is the mapping's
// by path, or by inode where the path differs (a session that examined it
// by another name: a link, or the loader's search path).
func semaphoreAddr(maps []symbolize.MapEntry, path string, ino, off uint64) (uint64, bool) {
	for _, m := range maps {
		if m.Path != path && (ino == 0 || m.Inode != ino) || len(m.Perms) < 4 || m.Perms[1] != 'w' || m.Perms[3] != 'p' {
			continue
		}
		if off >= m.Offset && off+2 <= m.Offset+(m.End-m.Start) {
			return m.Start + (off - m.Offset), true
		}
	}
	return 0, false
}

// semaphoreErr wraps a failed access to a semaphore; a process that exited
// meanwhile is ErrNoProcess.
func semaphoreErr(pid uint32, path string, addr uint64, op string, err error) error {
	if errors.Is(err, syscall.ESRCH) || errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.EIO) {
		return fmt.Errorf("%w: %d", ErrNoProcess, pid)
	}
	return fmt.Errorf("%s USDT semaphore at %#x of %s in pid %d: %w", op, addr, path, pid, err)
}
