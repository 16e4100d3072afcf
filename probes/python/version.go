package python

import (
	"fmt"
	"regexp"
	"strconv"
)

// Version is a CPython version. Micro is 0 when the interpreter's files do
// not record it (a 3.10 whose .rodata lacks PY_VERSION).
type Version struct{ Major, Minor, Micro int }

// String returns "3.11.7".
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro) }

// AtLeast reports whether v is major.minor or later.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// supported reports whether package python has a layout for v: 3.10 to 3.14.
func (v Version) supported() bool {
	return v.Major == 3 && v.Minor >= 10 && v.Minor <= 14
}

// versionFromHex decodes PY_VERSION_HEX (0x030B07F0 is 3.11.7 final), the
// value of Py_Version (3.11+) and of _Py_DebugOffsets.version (3.13+).
func versionFromHex(x uint64) Version {
	return Version{Major: int(x >> 24 & 0xff), Minor: int(x >> 16 & 0xff), Micro: int(x >> 8 & 0xff)}
}

// nameVersion matches the version in "python3.10", "libpython3.10.so.1.0"
// and "libpython3.10d.so".
var nameVersion = regexp.MustCompile(`python(\d+)\.(\d+)`)

// versionFromName reads major.minor from a file name; ok is false when it
// has none.
func versionFromName(name string) (v Version, ok bool) {
	m := nameVersion.FindStringSubmatch(name)
	if m == nil {
		return Version{}, false
	}
	v.Major, _ = strconv.Atoi(m[1])
	v.Minor, _ = strconv.Atoi(m[2])
	return v, true
}
