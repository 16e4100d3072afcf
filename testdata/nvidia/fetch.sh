#!/bin/sh
# fetch.sh downloads NVIDIA's real libnvidia-ml.so.1 and libcudart.so.11.0
# from Debian's non-free section and unpacks them under testdata/nvidia/build/
# (gitignored), for tests of the "no driver" paths. It never installs
# anything and never touches the system's apt configuration: apt reads a
# private copy of the sources with non-free added, and keeps its lists and
# caches in build/apt/.
#
# Usage: testdata/nvidia/fetch.sh
# Prints the absolute paths of libnvidia-ml.so.1 and libcudart.so.11.0, one per
# line, on stdout; progress goes to stderr. Idempotent: a second run only
# prints the paths. Safe to run from several test binaries at once (flock).
#
# Environment: VRAMPROF_DEBIAN_SOURCES names a deb822 sources file to start
# from instead of /etc/apt/sources.list.d/debian.sources.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build="$here/build"
root="$build/root"
apt="$build/apt"
packages="libnvidia-ml1 libcudart11.0"

mkdir -p "$build"
# One fetch at a time: tests of several packages may call this in parallel.
exec 9>"$build/.lock"
flock 9

# find_libs prints the two libraries' paths; it fails when either is missing.
find_libs() {
	ml=$(find "$root" -name libnvidia-ml.so.1 2>/dev/null | head -n 1)
	rt=$(find "$root" -name libcudart.so.11.0 2>/dev/null | head -n 1)
	[ -n "$ml" ] && [ -e "$ml" ] && [ -n "$rt" ] && [ -e "$rt" ] || return 1
	echo "$ml"
	echo "$rt"
}

if [ -f "$build/.done" ] && find_libs; then
	exit 0
fi

arch=$(dpkg --print-architecture)
if [ "$arch" != amd64 ] && [ "$arch" != arm64 ] && [ "$arch" != ppc64el ]; then
	echo "fetch.sh: Debian ships $packages for amd64, arm64 and ppc64el only, not $arch" >&2
	exit 1
fi

# The sources: the system's deb822 file with non-free added. The two packages
# live in non-free; bookworm's separate non-free-firmware component holds only
# firmware, so it is not needed.
src=${VRAMPROF_DEBIAN_SOURCES:-/etc/apt/sources.list.d/debian.sources}
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$build/debs"
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
(cd "$build/debs" && apt-get "$@" download $packages >&2) || {
	echo "fetch.sh: apt-get download $packages failed: see above" >&2
	exit 1
}

for deb in "$build/debs"/*.deb; do
	echo "fetch.sh: dpkg -x $(basename "$deb")" >&2
	dpkg -x "$deb" "$root"
done

find_libs || {
	echo "fetch.sh: the packages did not contain libnvidia-ml.so.1 and libcudart.so.11.0 (look in $root)" >&2
	exit 1
}
touch "$build/.done"
