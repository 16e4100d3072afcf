package symbolize

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseMaps(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []MapEntry
		err  string
	}{
		{
			name: "library segments",
			in: "7f1c2a000000-7f1c2a028000 r--p 00000000 fd:01 1835122                    /usr/lib/x86_64-linux-gnu/libc.so.6\n" +
				"7f1c2a028000-7f1c2a1bd000 r-xp 00028000 fd:01 1835122                    /usr/lib/x86_64-linux-gnu/libc.so.6\n",
			want: []MapEntry{
				{Start: 0x7f1c2a000000, End: 0x7f1c2a028000, Perms: "r--p", Offset: 0, Dev: "fd:01", Inode: 1835122, Path: "/usr/lib/x86_64-linux-gnu/libc.so.6"},
				{Start: 0x7f1c2a028000, End: 0x7f1c2a1bd000, Perms: "r-xp", Offset: 0x28000, Dev: "fd:01", Inode: 1835122, Path: "/usr/lib/x86_64-linux-gnu/libc.so.6"},
			},
		},
		{
			name: "anonymous and pseudo files dropped",
			in: "55d0c0a4b000-55d0c0a6c000 rw-p 00000000 00:00 0                          [heap]\n" +
				"7ffd5b5e2000-7ffd5b603000 rw-p 00000000 00:00 0                          [stack]\n" +
				"7ffd5b7c9000-7ffd5b7cb000 r-xp 00000000 00:00 0                          [vdso]\n" +
				"7f1c2a3c0000-7f1c2a3c4000 rw-p 00000000 00:00 0 \n" +
				"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n",
		},
		{
			name: "spaces in path and deleted file",
			in:   "7f00-8f00 r-xp 00001000 08:02 42 /opt/my app/lib x.so (deleted)\n\n",
			want: []MapEntry{{Start: 0x7f00, End: 0x8f00, Perms: "r-xp", Offset: 0x1000, Dev: "08:02", Inode: 42,
				Path: "/opt/my app/lib x.so", Deleted: true}},
		},
		{name: "too few fields", in: "7f00-8f00 r-xp 0\n", err: "fields"},
		{name: "bad range", in: "7f00 r-xp 00000000 08:02 42 /x\n", err: "address range"},
		{name: "bad start", in: "zz-8f00 r-xp 00000000 08:02 42 /x\n", err: "start"},
		{name: "reversed range", in: "9000-8000 r-xp 00000000 08:02 42 /x\n", err: "ends before"},
		{name: "bad perms", in: "7f00-8f00 rx 00000000 08:02 42 /x\n", err: "permissions"},
		{name: "bad offset", in: "7f00-8f00 r-xp 0x0 08:02 42 /x\n", err: "offset"},
		{name: "bad inode", in: "7f00-8f00 r-xp 00000000 08:02 -1 /x\n", err: "inode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMaps([]byte(tt.in))
			if tt.err != "" {
				require.ErrorIs(t, err, ErrMaps)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestMapEntry(t *testing.T) {
	m := MapEntry{Start: 0x1000, End: 0x2000, Perms: "r-xp"}
	assert.True(t, m.Exec())
	assert.True(t, m.Contains(0x1000))
	assert.True(t, m.Contains(0x1fff))
	assert.False(t, m.Contains(0x2000))
	assert.False(t, (&MapEntry{Perms: "rw-p"}).Exec())
}

func TestReadMapsSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/maps"); err != nil {
		t.Skip("no procfs")
	}
	maps, err := ReadMaps(os.Getpid())
	require.NoError(t, err)
	exe, err := os.Executable()
	require.NoError(t, err)
	found := false
	for _, m := range maps {
		if m.Exec() && strings.HasSuffix(exe, m.Path) {
			found = true
		}
	}
	assert.True(t, found, "the test binary %s is mapped executable", exe)

	_, err = ReadMaps(-1)
	assert.ErrorIs(t, err, os.ErrNotExist)
}
