//go:build linux

package probes

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/vramprof/vramprof/probes/symbolize"
	"github.com/vramprof/vramprof/probes/usdt"
)

// TestSemaphoreAddr: a semaphore lies in the process's writable private
// mapping of the file that holds its offset, as libc10_cuda.so's loader
// maps it (readelf: .probes at file offset 0x79820, its data segment
// mapped from file offset 0x79000); never in another file's mapping, a
// read-only one or a shared one.
func TestSemaphoreAddr(t *testing.T) {
	const lib = "/usr/lib/libc10_cuda.so"
	maps := []symbolize.MapEntry{
		{Start: 0x7f0000000000, End: 0x7f0000029000, Perms: "r--p", Offset: 0, Path: lib},
		{Start: 0x7f0000029000, End: 0x7f0000070000, Perms: "r-xp", Offset: 0x29000, Path: lib},
		{Start: 0x7f0000079000, End: 0x7f000007a000, Perms: "r--p", Offset: 0x78000, Path: lib}, // RELRO
		{Start: 0x7f000007a000, End: 0x7f000007d000, Perms: "rw-p", Offset: 0x79000, Path: "/other.so"},
		{Start: 0x7f100007a000, End: 0x7f100007d000, Perms: "rw-s", Offset: 0x79000, Path: lib},
		{Start: 0x7f000007a000, End: 0x7f000007d000, Perms: "rw-p", Offset: 0x79000, Path: lib},
	}
	addr, ok := semaphoreAddr(maps, lib, 0, 0x79822)
	assert.True(t, ok)
	// 0x7f000007a000 + (0x79822 - 0x79000)
	assert.Equal(t, uint64(0x7f000007a822), addr)
	_, ok = semaphoreAddr(maps, lib, 0, 0x78800)
	assert.False(t, ok, "only in the read-only RELRO mapping: not a counter the kernel would raise")
	_, ok = semaphoreAddr(maps, lib, 0, 0x7cfff)
	assert.False(t, ok, "its second byte past the mapping")
	// Examined by another name (libc10_cuda.so.2.6 through a link): found
	// by its inode.
	maps[5].Inode = 4242
	addr, ok = semaphoreAddr(maps, "/usr/lib/libc10_cuda.so.2.6", 4242, 0x79822)
	assert.True(t, ok)
	assert.Equal(t, uint64(0x7f000007a822), addr)
}

// TestSemaphoreSites: libc10_cuda.so's three notes, two pytorch:free
// sharing one semaphore: the kernel raises it once per site, so two.
func TestSemaphoreSites(t *testing.T) {
	free, malloc := &usdt.Probe{SemaphoreOffset: 0x79820}, &usdt.Probe{SemaphoreOffset: 0x79822}
	pf := &probedFile{Targets: []target{
		{Spec: probeSpec{Prog: progUSDT}, USDT: free},
		{Spec: probeSpec{Prog: progUSDT}, USDT: free},
		{Spec: probeSpec{Prog: progUSDT}, USDT: malloc},
		{Spec: probeSpec{Prog: progUSDT}, USDT: &usdt.Probe{}}, // unguarded
		{Spec: probeSpec{Prog: progCall}},
	}}
	assert.Equal(t, map[uint64]uint16{0x79820: 2, 0x79822: 1}, semaphoreSites(pf))
	assert.Empty(t, semaphoreSites(&probedFile{}))
}
