#!/bin/sh
# fetch.sh downloads CPython interpreters of the versions Debian bookworm does
# not have (it has 3.11 only) from newer Debian suites, unpacks them under
# testdata/python/build/ (gitignored) and writes a wrapper for each that runs
# it, for tests of Python stack unwinding across interpreter versions. It
# never installs anything and never touches the system's apt configuration:
# apt reads a private sources file listing the newer suites, and keeps its
# lists, caches and dpkg status in build/apt/.
#
# A newer suite's python needs that suite's glibc, newer than the system's:
# each suite's packages (python3.X-minimal, libpython3.X-minimal,
# libpython3.X-stdlib, libpython3.X and everything they depend on, libc6
# included) are unpacked with dpkg-deb -x into a private root, build/SUITE/root,
# and the wrapper runs the interpreter through that root's own dynamic loader:
#
#   PYTHONHOME=ROOT/usr exec ROOT/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 \
#       --argv0 WRAPPER --library-path ROOT/usr/lib/x86_64-linux-gnu ROOT/usr/bin/python3.X "$@"
#
# So /proc/PID/exe of a running wrapper is the loader, not python; python is
# a mapped file like any library. --argv0 makes sys.executable the wrapper, so
# subprocess and multiprocessing start the same interpreter again.
#
# Debian's python3.X is linked statically (_PyRuntime is in the executable).
# For each version the script also builds python3.X-shared with gcc, a main()
# that calls Py_BytesMain from the suite's libpython3.X.so.1.0, as embedders
# and --enable-shared builds do: there _PyRuntime is in the library.
#
# Each interpreter must print its version and call, through ctypes, a function
# of a shared library built here with gcc (the way tests drive the fake CUDA
# runtime); one that fails is left out and makes the script fail.
#
# Usage: testdata/python/fetch.sh
# Prints one line per working interpreter on stdout,
#   VERSION<TAB>WRAPPER<TAB>FILE-HOLDING-_PyRuntime
# (absolute paths); progress, the exact package versions and any failure go
# to stderr. Idempotent: a second run only prints the lines. Safe to run from
# several test binaries at once (flock).
#
# Environment: VRAMPROF_DEBIAN_SOURCES names the deb822 sources file whose
# first URIs is the Debian mirror (default /etc/apt/sources.list.d/debian.sources;
# without one, http://deb.debian.org/debian). VRAMPROF_PYTHON_SUITES lists the
# suites to look in, the preferred first (default: trixie forky sid
# experimental); each version comes from the first suite that has it.
# VRAMPROF_PYTHON_VERSIONS lists the versions to fetch (default: every
# python3.X-minimal the suites have, except 3.11, which the system has).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build="$here/build"
apt="$build/apt"
list="$build/interpreters.tsv"
suites=${VRAMPROF_PYTHON_SUITES:-trixie forky sid experimental}

mkdir -p "$build"
# One fetch at a time: tests of several packages may call this in parallel.
exec 9>"$build/.lock"
flock 9

# print_list prints the interpreters of the last complete fetch, as absolute
# paths; it fails when one of their files is missing.
print_list() {
	[ -f "$list" ] || return 1
	while IFS='	' read -r v w r; do
		[ -x "$build/$w" ] && [ -e "$build/$r" ] || return 1
	done <"$list"
	while IFS='	' read -r v w r; do
		printf '%s\t%s\t%s\n' "$v" "$build/$w" "$build/$r"
	done <"$list"
}

# .done holds the layout of build/ it was written for: 2 since the headers
# (libpython3.X-dev) are unpacked too, for probes/python's layout tests.
if [ "$(cat "$build/.done" 2>/dev/null)" = 2 ] && print_list; then
	exit 0
fi
rm -f "$build/.done"

case $(dpkg --print-architecture) in
amd64)
	triplet=x86_64-linux-gnu
	loader=ld-linux-x86-64.so.2
	;;
arm64)
	triplet=aarch64-linux-gnu
	loader=ld-linux-aarch64.so.1
	;;
*)
	echo "fetch.sh: only amd64 and arm64 are supported, not $(dpkg --print-architecture)" >&2
	exit 1
	;;
esac
for tool in apt-get apt-cache dpkg-deb gcc nm; do
	command -v $tool >/dev/null || {
		echo "fetch.sh: $tool is needed (apt-get install apt dpkg gcc binutils)" >&2
		exit 1
	}
done

# The sources: the newer suites, from the mirror the system uses.
src=${VRAMPROF_DEBIAN_SOURCES:-/etc/apt/sources.list.d/debian.sources}
mirror=
if [ -r "$src" ]; then
	mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' "$src" | grep -v security | head -n 1)
fi
mirror=${mirror:-http://deb.debian.org/debian}
mkdir -p "$apt/lists/partial"
cat >"$apt/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: $suites
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
# An empty dpkg status: apt resolves each interpreter's whole dependency
# closure from its suite, as for an empty machine, and never looks at what
# the system has installed.
: >"$apt/status"
# apt's binary caches of the lists (pkgcache.bin, srcpkgcache.bin, 140 MB)
# only spare this run's apt calls parsing the lists again: removed at exit.
# The lists stay, for the next update.
trap 'rm -f "$apt/pkgcache.bin" "$apt/srcpkgcache.bin"' EXIT

# Private sources, lists, status and package cache: nothing under /etc/apt,
# /var/lib/apt or /var/lib/dpkg changes. The sandbox user is root because
# _apt cannot write into a build directory owned by the user running the
# tests. No DEP-11 (AppStream) metadata: only the Packages indexes are
# needed.
set -- \
	-o Dir::Etc::sourcelist="$apt/debian.sources" \
	-o Dir::Etc::sourceparts=/dev/null \
	-o Dir::State::Lists="$apt/lists" \
	-o Dir::State::status="$apt/status" \
	-o Dir::Cache="$apt/cache" \
	-o Dir::Cache::pkgcache="$apt/pkgcache.bin" -o Dir::Cache::srcpkgcache="$apt/srcpkgcache.bin" \
	-o APT::Architectures="$(dpkg --print-architecture)" \
	-o APT::Install-Recommends=false \
	-o Acquire::Languages=none \
	-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false \
	-o APT::Sandbox::User=root \
	-o Debug::NoLocking=true \
	-q

echo "fetch.sh: apt-get update of $suites (private lists in $apt)" >&2
# --error-on=any: an index that failed to download is an error, not a
# warning followed by "Unable to locate package".
apt-get "$@" --error-on=any update >&2 || {
	echo "fetch.sh: apt-get update failed (no network, or a mirror down?): see above" >&2
	exit 1
}

# has tells whether suite $2 has package $1; the other arguments are apt's
# options.
has() {
	pkg=$1 suite=$2
	shift 2
	apt-cache "$@" madison "$pkg" 2>/dev/null | cut -d'|' -f3 | grep -q " $suite/main "
}

# The versions: every python3.X-minimal the suites have, and any version
# between 3.10 and the newest that they lack, to say so.
if [ -n "${VRAMPROF_PYTHON_VERSIONS:-}" ]; then
	versions=$VRAMPROF_PYTHON_VERSIONS
else
	newest=$(apt-cache "$@" pkgnames python3. | sed -n 's/^python3\.\([0-9][0-9]*\)-minimal$/\1/p' | sort -n | tail -n 1)
	versions=
	minor=10
	while [ "$minor" -le "${newest:-13}" ]; do
		[ "$minor" = 11 ] || versions="$versions 3.$minor"
		minor=$((minor + 1))
	done
fi

# Which suite each version comes from, and the packages to fetch per suite.
plan=
for v in $versions; do
	from=
	for s in $suites; do
		if has "python$v-minimal" "$s" "$@"; then
			from=$s
			break
		fi
	done
	if [ -n "$from" ]; then
		echo "fetch.sh: python$v: from $from" >&2
		plan="$plan $v:$from"
	else
		echo "fetch.sh: python$v: no suite of $suites has python$v-minimal; skipped" >&2
	fi
done
[ -n "$plan" ] || {
	echo "fetch.sh: none of $versions is in $suites" >&2
	exit 1
}

# A shared library for the ctypes check, built here against bookworm's
# glibc, as the tests build the fake CUDA runtime.
mkdir -p "$build/check"
cat >"$build/check/check.c" <<'C'
int vramprof_check_add(int a, int b) { return a + b; }
C
gcc -shared -fPIC -O2 -o "$build/check/libcheck.so" "$build/check/check.c"
# The embedding main() of the python3.X-shared variants.
cat >"$build/check/shared.c" <<'C'
int Py_BytesMain(int argc, char **argv);
int main(int argc, char **argv) { return Py_BytesMain(argc, argv); }
C

: >"$list.new"
failed=
mkdir -p "$build/bin"
for s in $suites; do
	pkgs=
	for entry in $plan; do
		[ "${entry#*:}" = "$s" ] || continue
		v=${entry%%:*}
		pkgs="$pkgs python$v-minimal libpython$v-minimal libpython$v-stdlib"
		# The shared library, where the version has it; and its headers
		# (build/SUITE/root/usr/include/python3.X, the internal ones too), which
		# probes/python's tests compile offsetof() against.
		if has "libpython$v" "$s" "$@"; then
			pkgs="$pkgs libpython$v"
		fi
		if has "libpython$v-dev" "$s" "$@"; then
			pkgs="$pkgs libpython$v-dev"
		fi
	done
	[ -n "$pkgs" ] || continue

	# -t: the suite's own packages win, dependencies included, so one root
	# holds one suite's consistent set (its libc6 above all).
	cache="$build/$s/apt-cache"
	mkdir -p "$cache/archives/partial"
	echo "fetch.sh: $s: apt-get install --download-only$pkgs" >&2
	apt-get "$@" -o Dir::Cache="$cache" -t "$s" -y --download-only install $pkgs >&2 || {
		echo "fetch.sh: $s: apt-get install --download-only$pkgs failed: see above" >&2
		exit 1
	}

	# A fresh root from exactly the packages downloaded for this run.
	root="$build/$s/root"
	rm -rf "$root.new"
	mkdir -p "$root.new"
	: >"$build/$s/packages.txt"
	# The packages of this closure, from a simulation (the cache may also
	# hold other versions, from earlier runs).
	closure="$build/$s/closure.txt"
	apt-get "$@" -t "$s" -y -s install $pkgs >"$closure.sim" || {
		echo "fetch.sh: $s: apt-get -s install$pkgs failed: see above" >&2
		exit 1
	}
	sed -n 's/^Inst \([^ ]*\) (\([^ ]*\) .*/\1 \2/p' "$closure.sim" | sort >"$closure"
	for deb in "$cache/archives"/*.deb; do
		nv=$(dpkg-deb -f "$deb" Package Version | sed 's/^[^:]*: //' | paste -sd' ' -)
		grep -qxF "$nv" "$closure" || continue
		echo "fetch.sh: $s: dpkg-deb -x $nv" >&2
		echo "$nv" >>"$build/$s/packages.txt"
		dpkg-deb -x "$deb" "$root.new"
	done
	missing=$(sort "$build/$s/packages.txt" | comm -13 - "$closure" | paste -sd, -)
	[ -s "$closure" ] && [ -z "$missing" ] || {
		echo "fetch.sh: $s: $cache/archives lacks packages of the closure: ${missing:-all}" >&2
		exit 1
	}
	rm -rf "$root"
	mv "$root.new" "$root"

	ld="$root/usr/lib/$triplet/$loader"
	[ -x "$ld" ] || {
		echo "fetch.sh: $s: no dynamic loader at $ld (did libc6 come with the closure?)" >&2
		exit 1
	}
	for entry in $plan; do
		[ "${entry#*:}" = "$s" ] || continue
		v=${entry%%:*}
		variants="python$v"
		debian=$(sed -n "s/^python$v-minimal //p" "$build/$s/packages.txt")
		lib="$root/usr/lib/$triplet/libpython$v.so.1.0"
		if [ -e "$lib" ]; then
			# Link against the suite's libpython; its own references to the
			# suite's newer glibc resolve at run time, under the suite's loader.
			if gcc -O2 -o "$root/usr/bin/python$v-shared" "$build/check/shared.c" "$lib" \
				-Wl,--allow-shlib-undefined 2>"$build/check/gcc.err"; then
				variants="$variants python$v-shared"
			else
				echo "fetch.sh: python$v-shared: gcc failed: $(cat "$build/check/gcc.err")" >&2
				failed="$failed python$v-shared"
			fi
		else
			echo "fetch.sh: python$v: $s has no libpython$v.so.1.0: no shared variant" >&2
		fi
		for name in $variants; do
			exe="$root/usr/bin/$name"
			wrapper="$build/bin/$name"
			cat >"$wrapper" <<WRAPPER
#!/bin/sh
# $name: CPython $v (Debian $s, python$v-minimal $debian), run by
# $s's own dynamic loader and libraries, in build/$s/root.
# Written by testdata/python/fetch.sh.
bin=\$(cd "\$(dirname "\$0")" && pwd) || exit 1
root=\$bin/../$s/root
PYTHONHOME=\$root/usr exec "\$root/usr/lib/$triplet/$loader" --argv0 "\$bin/$name" \\
	--library-path "\$root/usr/lib/$triplet" "\$root/usr/bin/$name" "\$@"
WRAPPER
			chmod +x "$wrapper"

			# The file holding _PyRuntime: the executable when it defines it
			# (static), else the libpython it links.
			if nm -D --defined-only "$exe" | grep -qw _PyRuntime; then
				runtime=$exe
			elif nm -D --defined-only "$lib" 2>/dev/null | grep -qw _PyRuntime; then
				runtime=$lib
			else
				echo "fetch.sh: $name: neither $exe nor $lib defines _PyRuntime" >&2
				failed="$failed $name"
				continue
			fi

			if out=$("$wrapper" -c '
import sys, ctypes, json
lib = ctypes.CDLL(sys.argv[1])
print(json.dumps(sys.version_info[:2]), lib.vramprof_check_add(40, 2))
' "$build/check/libcheck.so" 2>&1) && [ "$out" = "[${v%%.*}, ${v#*.}] 42" ]; then
				full=$("$wrapper" -c 'import sys; print(sys.version.replace("\n", " "))')
				echo "fetch.sh: $name: ok: $full; _PyRuntime in ${runtime#"$build/"}" >&2
				printf '%s\t%s\t%s\n' "$v" "bin/$name" "${runtime#"$build/"}" >>"$list.new"
			else
				echo "fetch.sh: $name does not work: $wrapper -c 'import sys, ctypes, json; ...' printed: $out" >&2
				failed="$failed $name"
			fi
		done
	done
done

mv "$list.new" "$list"
print_list
if [ -n "$failed" ]; then
	echo "fetch.sh: failed:$failed (see above)" >&2
	exit 1
fi
echo 2 >"$build/.done"
