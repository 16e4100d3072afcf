#!/bin/sh
# build.sh builds CPython 3.11 with frame pointers everywhere, from Debian
# bookworm's python3.11 source package, into testdata/python/build/fp/
# (gitignored), for the test that checks vramprof's merge of native and
# Python frames on a real interpreter. Every CPython on the development
# machine is built with -O3 and the frame pointer omitted, so a frame-pointer
# walk breaks inside libpython, long before _PyEval_EvalFrameDefault; this one
# keeps rbp a frame pointer in every function, leaf functions included.
#
# It never installs anything system-wide and never touches the system's apt
# configuration: apt reads a private deb-src sources file and keeps its lists
# and caches in build/fp/apt/. `apt-get source --download-only` fetches the
# source package; the script unpacks the upstream tarball (python3.11_*.orig,
# CPython 3.11.2) and builds that, without Debian's patches, which change
# install layouts, not code generation.
#
#   ./configure --enable-shared --without-ensurepip --prefix=build/fp/py311fp \
#       CFLAGS='-O2 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer' \
#       LDFLAGS='-Wl,-rpath,build/fp/py311fp/lib'
#   make -j2 && make install
#
# --enable-shared puts _PyRuntime and the eval loop in libpython3.11.so.1.0,
# found through the rpath. To keep the build short, no tests, no PGO or LTO,
# and the extension modules the tests do not need (ctypes, decimal, sqlite,
# ssl, tkinter, curses, the CJK codecs, expat, the _test* modules, ...) are
# marked unavailable to configure (py_cv_module_NAME=n/a) or disabled in
# Modules/Setup.local for those setup.py builds.
#
# Usage: testdata/python/fp/build.sh
# Prints the absolute path of the interpreter (build/fp/py311fp/bin/python3.11)
# on stdout; progress and the time of each step go to stderr, and to
# build/fp/build.log the compiler's output. Exits 2 when the source cannot be
# fetched (no network, a mirror down), 1 on any other failure, each with one
# line on stderr. Idempotent: a second run only prints the path. Safe to run
# from several test binaries at once (flock). A fresh build takes about five
# and a half minutes on two cores (configure 1.5, make 3, make install 1).
#
# Environment: VRAMPROF_DEBIAN_SOURCES names the deb822 sources file whose
# first URIs is the Debian mirror (default /etc/apt/sources.list.d/debian.sources;
# without one, http://deb.debian.org/debian). JOBS is make's -j (default 2).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build="$(cd "$here/.." && pwd)/build/fp"
apt="$build/apt"
prefix="$build/py311fp"
python="$prefix/bin/python3.11"
log="$build/build.log"
jobs=${JOBS:-2}

mkdir -p "$build"
# One build at a time: tests of several packages may call this in parallel.
exec 9>"$build/.lock"
flock 9

if [ -f "$build/.done" ] && [ -x "$python" ]; then
	echo "$python"
	exit 0
fi
rm -f "$build/.done"

# fail prints one line saying what failed, where to look, and exits 1;
# fetch_fail the same for a source that cannot be fetched, and exits 2.
fail() {
	echo "build.sh: $*" >&2
	exit 1
}
fetch_fail() {
	echo "build.sh: $*" >&2
	exit 2
}

# step says what starts now, with the seconds the previous step took.
last=$(date +%s)
step() {
	now=$(date +%s)
	echo "build.sh: [$((now - last)) s] $*" >&2
	last=$now
}

for tool in apt-get gcc make tar flock; do
	command -v $tool >/dev/null || fail "$tool is needed (apt-get install apt gcc make tar util-linux)"
done

# The sources: bookworm's deb-src, from the mirror the system uses. Only
# the main archive: the security archive's pool may lack a version its
# index lists, and the upstream tarball is the same in every revision.
src=${VRAMPROF_DEBIAN_SOURCES:-/etc/apt/sources.list.d/debian.sources}
mirror=
if [ -r "$src" ]; then
	mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' "$src" | grep -v security | head -n 1)
fi
mirror=${mirror:-http://deb.debian.org/debian}
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$build/src"
cat >"$apt/debian.sources" <<SOURCES
Types: deb-src
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES

# Private sources, lists and caches: nothing under /etc/apt or /var/lib/apt
# changes. The sandbox user is root because _apt cannot write into a build
# directory owned by the user running the tests.
set -- \
	-o Dir::Etc::sourcelist="$apt/debian.sources" \
	-o Dir::Etc::sourceparts=/dev/null \
	-o Dir::State::Lists="$apt/lists" \
	-o Dir::Cache="$apt/cache" \
	-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= \
	-o Acquire::Languages=none \
	-o APT::Sandbox::User=root \
	-o Debug::NoLocking=true \
	-q

start=$(date +%s)
tarball=$(ls "$build/src"/python3.11_*.orig.tar.* 2>/dev/null | head -n 1 || true)
if [ -z "$tarball" ]; then
	step "apt-get update of bookworm's deb-src (private lists in $apt)"
	apt-get "$@" --error-on=any update >&2 ||
		fetch_fail "apt-get update of bookworm's deb-src failed (no network, or a mirror down?): see above"
	step "apt-get source --download-only python3.11"
	(cd "$build/src" && apt-get "$@" source --download-only python3.11 >&2) ||
		fetch_fail "apt-get source --download-only python3.11 failed: see above"
	tarball=$(ls "$build/src"/python3.11_*.orig.tar.* 2>/dev/null | head -n 1 || true)
	[ -n "$tarball" ] || fail "apt-get source python3.11 left no python3.11_*.orig.tar.* in $build/src"
fi

step "unpacking $(basename "$tarball")"
work="$build/work"
rm -rf "$work" "$prefix"
mkdir -p "$work"
# A broken tarball (a download cut short) is removed: the next run fetches
# it again.
tar -xf "$tarball" -C "$work" || {
	rm -f "$tarball"
	fail "tar -xf $tarball failed; removed it: run again to fetch it again"
}
srcdir=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'Python-3.11*' | head -n 1)
[ -n "$srcdir" ] && [ -x "$srcdir/configure" ] || fail "$tarball holds no Python-3.11*/configure"

# Modules built by setup.py, not by configure's Setup.stdlib: disabled here.
cat >"$srcdir/Modules/Setup.local" <<'SETUP'
*disabled*
_ctypes
_curses
_curses_panel
_dbm
_tkinter
readline
SETUP

# Modules of Setup.stdlib nobody here imports, the slow ones first (libmpdec,
# expat, the CJK codec tables, the test modules).
na=
for m in _decimal pyexpat _elementtree _codecs_cn _codecs_hk _codecs_iso2022 _codecs_jp \
	_codecs_kr _codecs_tw _multibytecodec unicodedata _sqlite3 _ssl _hashlib _tkinter \
	_testcapi _testinternalcapi _testbuffer _testclinic _testimportmultiple _testmultiphase \
	_ctypes_test _xxtestfuzz xxlimited xxlimited_35 _xxsubinterpreters audioop _bz2 _lzma \
	_gdbm _crypt nis ossaudiodev spwd _uuid _sqlite3 _lsprof _zoneinfo _statistics cmath; do
	na="$na py_cv_module_$m=n/a"
done

cflags='-O2 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer'
step "configure --enable-shared --prefix=$prefix CFLAGS='$cflags' (log: $log)"
# shellcheck disable=SC2086 # $na is a list of words
(cd "$srcdir" && ./configure --enable-shared --without-ensurepip --prefix="$prefix" \
	CFLAGS="$cflags" LDFLAGS="-Wl,-rpath,$prefix/lib" $na) >"$log" 2>&1 ||
	fail "configure failed: see the end of $log"
step "make -j$jobs"
make -C "$srcdir" -j"$jobs" >>"$log" 2>&1 || fail "make failed: see the end of $log"
step "make install"
make -C "$srcdir" install >>"$log" 2>&1 || fail "make install failed: see the end of $log"

step "checks"
# The checks: it runs, it is 3.11, libpython is the one it built, and the
# eval loop keeps a frame pointer (push %rbp; mov %rsp,%rbp at its entry).
[ -x "$python" ] || fail "make install left no $python"
out=$("$python" -c 'import sys, json; print(sys.version_info[:2] == (3, 11), sys.prefix)' 2>&1) ||
	fail "$python does not run: $out"
[ "$out" = "True $prefix" ] || fail "$python printed '$out', not 'True $prefix'"
lib="$prefix/lib/libpython3.11.so.1.0"
ldd "$python" | grep -qF "$lib" || fail "$python does not load $lib (rpath?)"
if [ "$(uname -m)" = x86_64 ] && command -v objdump >/dev/null; then
	objdump -d --no-show-raw-insn "$lib" | grep -A3 '<_PyEval_EvalFrameDefault>:$' |
		grep -q 'mov *%rsp,%rbp' || fail "_PyEval_EvalFrameDefault in $lib sets up no frame pointer"
fi

rm -rf "$work"
touch "$build/.done"
echo "build.sh: built in $(($(date +%s) - start)) s: $python" >&2
echo "$python"
