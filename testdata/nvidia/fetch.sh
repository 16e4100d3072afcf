#!/bin/sh
# fetch.sh downloads NVIDIA's real libnvidia-ml.so.1, libcudart.so.11.0 and
# libnppc.so.11 (NPP's core: a private, stripped copy of the runtime linked
# in, as every NVIDIA library has) from Debian's non-free section and
# unpacks them under testdata/nvidia/build/ (gitignored), for tests of the
# "no driver" paths. It never installs anything and never touches the
# system's apt configuration: apt reads a private copy of the sources with
# non-free added, and keeps its lists and caches in build/apt/.
#
# Usage: testdata/nvidia/fetch.sh [static]
# Prints the absolute paths of libnvidia-ml.so.1, libcudart.so.11.0 and
# libnppc.so.11, one per line, on stdout; progress goes to stderr.
# Idempotent: a second run only prints the paths. Safe to run from several
# test binaries at once (flock).
#
# With "static" it fetches the static runtime instead: NVIDIA's
# libcudart_static.a and the headers (cuda_runtime.h...) from nvidia-cuda-dev,
# and prints the paths of libcudart_static.a and of the include directory.
# nvidia-cuda-dev is one 774 MB .deb (every CUDA library, static and shared);
# only /usr/include and libcudart_static.a are unpacked, and the unpacking
# stops at the archive; the .deb is deleted afterwards.
#
# Environment: VRAMPROF_DEBIAN_SOURCES names a deb822 sources file to start
# from instead of /etc/apt/sources.list.d/debian.sources.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build="$here/build"
root="$build/root"
apt="$build/apt"
packages="libnvidia-ml1 libcudart11.0 libnppc11"
debs="$build/debs"
mode=${1:-shared}
case $mode in
shared) ;;
static)
	packages=nvidia-cuda-dev
	debs="$build/debs-static"
	;;
*)
	echo "fetch.sh: unknown argument $mode (want nothing, or static)" >&2
	exit 2
	;;
esac

mkdir -p "$build"
# One fetch at a time: tests of several packages may call this in parallel.
exec 9>"$build/.lock"
flock 9

# find_libs prints the three libraries' paths; it fails when one is missing.
find_libs() {
	ml=$(find "$root" -name libnvidia-ml.so.1 2>/dev/null | head -n 1)
	rt=$(find "$root" -name libcudart.so.11.0 2>/dev/null | head -n 1)
	npp=$(find "$root" -name libnppc.so.11 2>/dev/null | head -n 1)
	[ -n "$ml" ] && [ -e "$ml" ] && [ -n "$rt" ] && [ -e "$rt" ] && [ -n "$npp" ] && [ -e "$npp" ] || return 1
	echo "$ml"
	echo "$rt"
	echo "$npp"
}

# find_static prints the static runtime's path and its include directory;
# it fails when either is missing.
find_static() {
	a=$(find "$root/usr/lib" -name libcudart_static.a 2>/dev/null | head -n 1)
	[ -n "$a" ] && [ -f "$a" ] && [ -f "$root/usr/include/cuda_runtime.h" ] || return 1
	echo "$a"
	echo "$root/usr/include"
}

if [ "$mode" = static ]; then
	[ -f "$build/.done-static" ] && find_static && exit 0
elif [ -f "$build/.done" ] && find_libs; then
	exit 0
fi

arch=$(dpkg --print-architecture)
if [ "$arch" != amd64 ] && [ "$arch" != arm64 ] && [ "$arch" != ppc64el ]; then
	echo "fetch.sh: Debian ships $packages for amd64, arm64 and ppc64el only, not $arch" >&2
	exit 1
fi

# The sources: the system's deb822 file with non-free added. The packages
# live in non-free; bookworm's separate non-free-firmware component holds only
# firmware, so it is not needed.
src=${VRAMPROF_DEBIAN_SOURCES:-/etc/apt/sources.list.d/debian.sources}
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$debs"
if [ -r "$src" ]; then
	sed 's/^Components:.*/Components: main contrib non-free/' "$src" >"$apt/debian.sources"
else
	# No deb822 file (an older image with a one-line sources.list): write
	# one for this release.
	. /etc/os-release
	cat >"$apt/debian.sources" <<SOURCES
Types: deb
URIs: http://deb.debian.org/debian
Suites: ${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}
Components: main contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
fi
grep -q '^Components:.*non-free' "$apt/debian.sources" || {
	echo "fetch.sh: $src has no Components line to extend" >&2
	exit 1
}

# Private sources, lists and package cache: nothing under /etc/apt or
# /var/lib/apt changes. The sandbox user is root because _apt cannot write
# into a build directory owned by the user running the tests.
set -- \
	-o Dir::Etc::sourcelist="$apt/debian.sources" \
	-o Dir::Etc::sourceparts=/dev/null \
	-o Dir::State::Lists="$apt/lists" \
	-o Dir::Cache="$apt/cache" \
	-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= \
	-o APT::Sandbox::User=root \
	-o Debug::NoLocking=true \
	-q

echo "fetch.sh: apt-get update (private lists in $apt)" >&2
# --error-on=any: an index that failed to download is an error, not a
# warning followed by "Unable to locate package".
apt-get "$@" --error-on=any update >&2 || {
	echo "fetch.sh: apt-get update failed (no network, or a mirror down?): see above" >&2
	exit 1
}
echo "fetch.sh: apt-get download $packages" >&2
# A .deb left by an interrupted run may be an older version.
rm -f "$debs"/*.deb
(cd "$debs" && apt-get "$@" download $packages >&2) || {
	echo "fetch.sh: apt-get download $packages failed: see above" >&2
	exit 1
}

if [ "$mode" = static ]; then
	deb=$(ls "$debs"/nvidia-cuda-dev_*.deb | head -n 1)
	py=$(command -v python3 || command -v python3.11) || {
		echo "fetch.sh: python3 is needed to unpack part of $(basename "$deb")" >&2
		exit 1
	}
	echo "fetch.sh: unpack /usr/include and libcudart_static.a from $(basename "$deb")" >&2
	# The data archive is sorted by path: the headers come first and
	# libcudart_static.a about a third of the way in (after cuBLAS's static
	# archives). Stop reading there rather than decompress 2.7 GB. tar
	# cannot stop on a wildcard, so a few lines of Python pick the members
	# and quit (dpkg-deb then ends on SIGPIPE, which is expected).
	mkdir -p "$root"
	set +e
	dpkg-deb --fsys-tarfile "$deb" 2>"$build/dpkg-deb.err" | "$py" -c '
import sys, tarfile
root = sys.argv[1]
with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as tf:
    for m in tf:
        if m.name.startswith("./usr/include/") or m.name.endswith("/libcudart_static.a"):
            try:
                tf.extract(m, root, set_attrs=False, filter="data")
            except TypeError:  # a Python without extraction filters
                tf.extract(m, root, set_attrs=False)
        if m.name.endswith("/libcudart_static.a"):
            sys.exit(0)
sys.exit("no libcudart_static.a in the package")
' "$root"
	rc=$?
	set -e
	[ $rc = 0 ] || {
		cat "$build/dpkg-deb.err" >&2
		echo "fetch.sh: unpacking $(basename "$deb") failed (exit $rc): see above" >&2
		exit 1
	}
	rm -f "$deb" "$build/dpkg-deb.err"
	find_static || {
		echo "fetch.sh: nvidia-cuda-dev did not contain libcudart_static.a and cuda_runtime.h (look in $root)" >&2
		exit 1
	}
	touch "$build/.done-static"
	exit 0
fi

for deb in "$debs"/*.deb; do
	echo "fetch.sh: dpkg -x $(basename "$deb")" >&2
	dpkg -x "$deb" "$root"
done

find_libs || {
	echo "fetch.sh: the packages did not contain libnvidia-ml.so.1, libcudart.so.11.0 and libnppc.so.11 (look in $root)" >&2
	exit 1
}
touch "$build/.done"
