#!/bin/sh
# fetch.sh downloads PyTorch's real CUDA caching allocator from Debian trixie
# (libc10_cuda.so and libc10.so from contrib's libtorch-cuda-2.6, PyTorch 2.6.0
# for CUDA 12.4), the c10 headers to compile a program against it (from
# libtorch-cuda-dev), and the trixie libraries they need at run time (glibc
# 2.38 or newer, a libstdc++ with GLIBCXX_3.4.32, libnuma, libcpuinfo). It
# keeps them under testdata/torch/build/ (gitignored):
#
#   build/lib/      ld-linux-x86-64.so.2, libc.so.6 and the rest of trixie's
#                   glibc that a program may load, libstdc++.so.6,
#                   libgcc_s.so.1, libnuma.so.1, libcpuinfo.so.0,
#                   libc10.so.2.6, libc10_cuda.so.2.6 (and .so links to link)
#   build/include/  c10/{core,cuda,macros,util}: the headers that
#                   c10/cuda/CUDACachingAllocator.h draws in (60 of their 195
#                   files), not c10/xpu
#
# It never installs anything and never touches the system's apt
# configuration: apt reads a private sources file naming trixie with contrib,
# and keeps its lists and caches in build/apt/.
#
# Usage: testdata/torch/fetch.sh
# Prints the absolute paths of build/lib and build/include, one per line, on
# stdout; progress goes to stderr. Idempotent: a second run only prints the
# paths. Safe to run from several test binaries at once (flock).
#
# libtorch-cuda-2.6 is one 481 MB .deb (every PyTorch CUDA library); only
# libc10.so and libc10_cuda.so, its first members, are unpacked, the unpacking
# stops there, and the .deb is deleted.
#
# Environment: VRAMPROF_DEBIAN_MIRROR names the Debian mirror (default: the
# first .../debian URI in /etc/apt/sources.list.d/debian.sources, else
# http://deb.debian.org/debian).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build="$here/build"
apt="$build/apt"
debs="$build/debs"
stage="$build/stage"
lib="$build/lib"
inc="$build/include"
suite=trixie
torch=libtorch-cuda-2.6
# What libc10.so and libc10_cuda.so need at run time beyond libcudart.so.12
# (the fake runtime in testdata/cuda): readelf -d shows libnuma.so.1,
# libcpuinfo.so.0, libstdc++.so.6, libm.so.6, libgcc_s.so.1, libc.so.6 and
# ld-linux-x86-64.so.2, with symbols versioned GLIBC_2.38.
runtime="libc6 libstdc++6 libgcc-s1 libnuma1 libcpuinfo0"

mkdir -p "$build"
# One fetch at a time: tests of several packages may call this in parallel.
exec 9>"$build/.lock"
flock 9

# found prints the two directories; it fails when a file is missing.
found() {
	for f in ld-linux-x86-64.so.2 libc.so.6 libstdc++.so.6 libgcc_s.so.1 libnuma.so.1 \
		libcpuinfo.so.0 libc10.so.2.6 libc10_cuda.so.2.6 libc10.so libc10_cuda.so; do
		[ -e "$lib/$f" ] || return 1
	done
	[ -f "$inc/c10/cuda/CUDACachingAllocator.h" ] || return 1
	echo "$lib"
	echo "$inc"
}

if [ -f "$build/.done" ] && found; then
	exit 0
fi

arch=$(dpkg --print-architecture)
if [ "$arch" != amd64 ]; then
	# The USDT notes' argument registers (and the tests) are x86-64's.
	echo "fetch.sh: the PyTorch tests need amd64 (x86-64 USDT notes), not $arch" >&2
	exit 1
fi
py=$(command -v python3 || command -v python3.11) || {
	echo "fetch.sh: python3 is needed to unpack part of $torch" >&2
	exit 1
}

# The sources: trixie's main and contrib from the system's Debian mirror. The
# system's release (bookworm here) has no libtorch-cuda and a glibc too old
# for it. Bookworm's debian-archive-keyring holds trixie's keys.
mirror=${VRAMPROF_DEBIAN_MIRROR:-}
if [ -z "$mirror" ] && [ -r /etc/apt/sources.list.d/debian.sources ]; then
	mirror=$(awk '$1 == "URIs:" && $2 ~ /\/debian\/?$/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
fi
mirror=${mirror:-http://deb.debian.org/debian}
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$debs"
cat >"$apt/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: $suite
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES

# Private sources, lists and package cache: nothing under /etc/apt or
# /var/lib/apt changes. Only the package indices (10 MB): no translations, no
# AppStream metadata (another 8 MB where appstream is installed). The sandbox user is root because _apt cannot write
# into a build directory owned by the user running the tests.
set -- \
	-o Dir::Etc::sourcelist="$apt/debian.sources" \
	-o Dir::Etc::sourceparts=/dev/null \
	-o Dir::State::Lists="$apt/lists" \
	-o Dir::Cache="$apt/cache" \
	-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= \
	-o APT::Sandbox::User=root \
	-o Debug::NoLocking=true \
	-o Acquire::Languages=none \
	-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false \
	-o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false \
	-o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false \
	-o Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false \
	-q

echo "fetch.sh: apt-get update (private $suite lists in $apt)" >&2
# --error-on=any: an index that failed to download is an error, not a
# warning followed by "Unable to locate package".
apt-get "$@" --error-on=any update >&2 || {
	echo "fetch.sh: apt-get update of $mirror $suite failed (no network, or a mirror down?): see above" >&2
	exit 1
}
packages="$torch libtorch-cuda-dev $runtime"
echo "fetch.sh: apt-get download $packages" >&2
# A .deb left by an interrupted run may be an older version.
rm -f "$debs"/*.deb
(cd "$debs" && apt-get "$@" download $packages >&2) || {
	echo "fetch.sh: apt-get download $packages from $suite failed: see above" >&2
	exit 1
}

rm -rf "$stage" "$lib" "$inc"
mkdir -p "$stage" "$lib" "$inc"

# libtorch-cuda-2.6's data archive starts with libc10.so.2.6.0 and
# libc10_cuda.so.2.6.0 (then 1.4 GB of libtorch_cuda, cuDNN glue...): stop
# after those two. tar cannot stop on a wildcard, so a few lines of Python
# pick the members and quit (dpkg-deb then ends on SIGPIPE, which is expected).
deb=$(ls "$debs"/${torch}_*.deb | head -n 1)
echo "fetch.sh: unpack libc10.so and libc10_cuda.so from $(basename "$deb")" >&2
set +e
dpkg-deb --fsys-tarfile "$deb" 2>"$build/dpkg-deb.err" | "$py" -c '
import sys, tarfile
root, want = sys.argv[1], {"libc10.so.2.6.0", "libc10_cuda.so.2.6.0"}
with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as tf:
    for m in tf:
        name = m.name.rsplit("/", 1)[-1]
        if m.isfile() and name in want:
            try:
                tf.extract(m, root, set_attrs=False, filter="data")
            except TypeError:  # a Python without extraction filters
                tf.extract(m, root, set_attrs=False)
            want.discard(name)
            if not want:
                sys.exit(0)
sys.exit("no %s in the package" % " ".join(sorted(want)))
' "$stage"
rc=$?
set -e
[ $rc = 0 ] || {
	cat "$build/dpkg-deb.err" >&2
	echo "fetch.sh: unpacking $(basename "$deb") failed (exit $rc): see above" >&2
	exit 1
}
rm -f "$deb" "$build/dpkg-deb.err"

for p in libtorch-cuda-dev $runtime; do
	deb=$(ls "$debs"/${p}_*.deb | head -n 1)
	echo "fetch.sh: dpkg -x $(basename "$deb")" >&2
	dpkg -x "$deb" "$stage"
done

# Keep the shared objects (links resolved) and the c10 headers; drop the rest
# (libtorch-cuda-dev's own links to libraries not fetched, the torch, ATen and
# caffe2 headers, gconv, docs...).
multi="$stage/usr/lib/x86_64-linux-gnu"
for f in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libmvec.so.1 libdl.so.2 libpthread.so.0 librt.so.1 \
	libresolv.so.2 libutil.so.1 libanl.so.1 libnss_files.so.2 libnss_dns.so.2 \
	libstdc++.so.6 libgcc_s.so.1 libnuma.so.1 libcpuinfo.so.0; do
	cp -L "$multi/$f" "$lib/$f"
done
cp "$multi/libc10.so.2.6.0" "$lib/libc10.so.2.6"
cp "$multi/libc10_cuda.so.2.6.0" "$lib/libc10_cuda.so.2.6"
ln -sfn libc10.so.2.6 "$lib/libc10.so"
ln -sfn libc10_cuda.so.2.6 "$lib/libc10_cuda.so"
mkdir -p "$inc/c10"
for d in core cuda macros util; do
	cp -R "$stage/usr/include/c10/$d" "$inc/c10/$d"
done
rm -rf "$stage" "$debs"

found || {
	echo "fetch.sh: the packages did not contain every file needed (look in $build)" >&2
	exit 1
}
touch "$build/.done"
